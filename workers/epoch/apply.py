"""The per-key path: ``KeyedOperator.update`` once per key, for operators the vectorised path
(``workers.vectorised``) cannot take."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from workers import partials
from workers.operators.base import KeyedOperator, arrow_type, sort_by_seq
from workers.state.base import StateStore, Update, encode_key


def _group_records(table: pa.Table, columns: tuple[str, ...]) -> dict[str, list[tuple[Any, ...]]]:
    """Key -> that key's records (tuples of ``columns``), in the table's order."""
    groups: dict[str, list[tuple[Any, ...]]] = {}
    keys = table.column("key").to_pylist()
    values = [table.column(c).to_pylist() for c in columns]
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(tuple(col[i] for col in values))
    return groups


def apply_records(
    store: StateStore,
    operator: KeyedOperator,
    records: pa.Table,
    vnodes: dict[str, int],
) -> tuple[list[Update], pa.Table]:
    """Fold records (key, seq, operator columns; or partial rows, ``workers.partials``) into the
    store's states; nothing is written.

    Returns the updates to commit and the outputs: (key, seq, *output fields).
    """
    combined = seq_max = None
    aggregates = (
        partials.aggregates_for_partials(operator, operator.describe())
        if partials.is_partial(records)
        else partials.aggregates_of(operator)
    )
    if aggregates:
        # declared aggregates fold records and partial rows alike (a combine() of the operator's
        # own would not merge partial rows), and the fold gives each key's last seq with them
        folded = partials.fold(records, aggregates)
        combined = folded.select(["key", *(partials.column_name(c, f) for c, f in aggregates)])
        seq_max = folded.select(["key", "seq"])
    elif not operator.order_sensitive:
        combined = operator.combine(records)
        if combined is not None:
            seq_max = records.group_by("key").aggregate([("seq", "max")])
    if combined is None or seq_max is None:
        ordered = sort_by_seq(records)
        groups = _group_records(ordered, operator.columns)
        last_seq = dict(zip(ordered.column("key").to_pylist(), ordered.column("seq").to_pylist()))
    else:
        parts = combined.column_names[1:]
        groups = {
            key: [row]
            for key, row in zip(
                combined.column("key").to_pylist(),
                zip(*(combined.column(p).to_pylist() for p in parts)),
            )
        }
        last_seq = dict(zip(seq_max.column("key").to_pylist(), seq_max.column(-1).to_pylist()))
    keys = list(groups)
    store_keys = [encode_key(vnodes[k], k.encode("utf-8")) for k in keys]
    olds = store.get_many(store_keys)
    updates: list[Update] = []
    out_rows: list[tuple[Any, ...]] = []
    out_seq: list[int] = []
    for key, store_key, old in zip(keys, store_keys, olds):
        state = operator.decode(old) if old is not None else None
        new_state, outputs = operator.update(key, state, groups[key])
        updates.append(Update(store_key, old, operator.encode(new_state)))
        out_rows.extend(outputs)
        out_seq.extend([last_seq[key]] * len(outputs))
    names = ["key", *(n for n, _ in operator.output_fields)]
    types = [pa.string(), *(arrow_type(t) for _, t in operator.output_fields)]
    columns: list[tuple[Any, ...]] = list(zip(*out_rows)) if out_rows else [() for _ in names]
    arrays = [pa.array(list(col), typ) for col, typ in zip(columns, types)]
    arrays.insert(1, pa.array(out_seq, pa.int64()))
    outputs_table = pa.Table.from_arrays(arrays, names=[names[0], "seq", *names[1:]])
    return updates, outputs_table
