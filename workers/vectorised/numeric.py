"""The vectorised numeric operators (Count, Sum, Min, Max, Mean, PageStats): a slice's partial
aggregates folded into FixedForm states a whole column at a time."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from workers import partials
from workers.columnar import store_keys
from workers.operators.aggregates import Count, Max, Mean, Min, PageStats, Sum
from workers.operators.base import KeyedOperator, arrow_type
from workers.state.base import ColumnUpdates
from workers.vectorised.batch import BatchResult, Kernel, Reader

# A fold takes (present, old state columns, partial aggregates) and returns the new state
# columns and the output columns, computing exactly what the operator's ``update`` computes.
Fold = Callable[
    [KeyedOperator, np.ndarray, list[np.ndarray], list[np.ndarray]],
    tuple[list[np.ndarray], list[np.ndarray]],
]


def _fold_count(
    op: KeyedOperator, present: np.ndarray, old: list[np.ndarray], parts: list[np.ndarray]
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    new = np.where(present, old[0], 0) + parts[0]
    return [new], [new]


def _canonical_nan(values: np.ndarray) -> np.ndarray:
    """NaNs as the one quiet NaN (``workers.operators.canonical_nan``: the per-key path)."""
    nans = np.isnan(values)
    return np.where(nans, np.float64(np.nan), values) if nans.any() else values


def _fold_sum(
    op: KeyedOperator, present: np.ndarray, old: list[np.ndarray], parts: list[np.ndarray]
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    part = parts[0].astype(np.float64)
    new = _canonical_nan(np.where(present, old[0] + part, part))
    return [new], [new]


def _fold_min(
    op: KeyedOperator, present: np.ndarray, old: list[np.ndarray], parts: list[np.ndarray]
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    part = parts[0].astype(np.float64)
    # min(state, part) keeps the state unless part < state (NaN included): not np.minimum
    new = _canonical_nan(np.where(~present | (part < old[0]), part, old[0]))
    return [new], [new]


def _fold_max(
    op: KeyedOperator, present: np.ndarray, old: list[np.ndarray], parts: list[np.ndarray]
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    part = parts[0].astype(np.float64)
    new = _canonical_nan(np.where(~present | (part > old[0]), part, old[0]))
    return [new], [new]


def _fold_mean(
    op: KeyedOperator, present: np.ndarray, old: list[np.ndarray], parts: list[np.ndarray]
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    total = _canonical_nan(np.where(present, old[0], 0.0) + parts[0].astype(np.float64))
    count = np.where(present, old[1], 0) + parts[1]
    return [total, count], [total / count]


def _fold_page_stats(
    op: KeyedOperator, present: np.ndarray, old: list[np.ndarray], parts: list[np.ndarray]
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    views = np.where(present, old[0], 0) + parts[0]
    uniques = np.where(present, old[1], 0) + parts[1]
    return [views, uniques], [views, uniques]


# fold, and per partial aggregate the types it takes: "i" integers, "n" integers or floats
# (what the operator's ``update`` turns with int() or float() the same way numpy casts them).
_FOLDS: dict[type[KeyedOperator], tuple[Fold, str]] = {
    Count: (_fold_count, "i"),
    Sum: (_fold_sum, "n"),
    Min: (_fold_min, "n"),
    Max: (_fold_max, "n"),
    Mean: (_fold_mean, "ni"),
    PageStats: (_fold_page_stats, "ii"),
}


def _numeric(op: KeyedOperator, records: pa.Table, read: Reader) -> BatchResult | None:
    fold, kinds = _FOLDS[type(op)]
    aggregates = op.aggregates
    # The same fold as the operator's combine (records or partial rows, workers.partials), so
    # the same groups in the same order, with each key's last seq and its vnode.
    grouped = partials.fold(records, aggregates)
    parts = []
    for (column, agg), kind in zip(aggregates, kinds, strict=True):
        part = grouped[partials.column_name(column, agg)]
        integer = pa.types.is_integer(part.type)
        if part.null_count or not (integer or (kind == "n" and pa.types.is_floating(part.type))):
            return None  # update() would fail or convert differently: let it
        parts.append(part.to_numpy().astype(np.int64 if integer else np.float64))
    keys = grouped["key"]
    skeys = store_keys(grouped["vnode"].to_numpy(), keys)
    old = read(skeys)
    present, columns = _decode_fixed(op, old)
    new_columns, out_columns = fold(op, present, columns, parts)
    new = op.form.pack_columns(new_columns)  # type: ignore[attr-defined]
    outputs = _outputs_table(op, keys, grouped["seq"], out_columns)
    return BatchResult(ColumnUpdates(skeys, old, new), outputs)


def _decode_fixed(op: KeyedOperator, old: pa.Array) -> tuple[np.ndarray, list[np.ndarray]]:
    """(present, state columns) of a column of stored values in the operator's FixedForm."""
    present = np.asarray(old.is_valid(), bool)
    in_form, columns = op.form.unpack_columns(old)  # type: ignore[attr-defined]
    legacy = np.flatnonzero(present & ~in_form)
    if len(legacy):
        # msgpack's compact forms (written before the fixed form), or another version, which
        # decode() refuses with its error: read one by one; the commit rewrites them fixed.
        states = [op.decode(v) for v in old.take(pa.array(legacy)).to_pylist()]
        if len(columns) == 1:
            columns[0][legacy] = states
        else:
            for i, column in enumerate(columns):
                column[legacy] = [s[i] for s in states]
    return present, columns


def _outputs_table(
    op: KeyedOperator, keys: pa.Array, seq: pa.Array, fields: Sequence[np.ndarray]
) -> pa.Table:
    arrays = [pc.cast(keys, pa.string()), pc.cast(seq, pa.int64())]
    arrays += [
        pa.array(column, arrow_type(typ))
        for column, (_, typ) in zip(fields, op.output_fields, strict=True)
    ]
    names = ["key", "seq", *(name for name, _ in op.output_fields)]
    return pa.Table.from_arrays(arrays, names=names)


#: the kernel of each operator class this module vectorises
KERNELS: dict[type[KeyedOperator], Kernel] = {cls: _numeric for cls in _FOLDS}
