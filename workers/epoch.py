"""One stateful fragment's work for one epoch on one parallel unit: the code inside mapInArrow.

Rows reaching a task carry a ``kind``: ``rec`` rows are this fragment's input records (already
routed here by vnode in Spark SQL); every other kind (``stat`` reports of upstream tasks,
``malformed`` source lines) passes through untouched so that one Spark job per epoch carries
everything back to the driver in a single small collect.

A task opens its PU's store, folds the epoch's records into it and commits the new states, the
epoch's outputs and the applied-epoch marker in one atomic write. If the store has already
applied this epoch (Spark re-ran it after a failure), it changes nothing and re-emits the outputs
it recorded the first time, so downstream fragments and the sink see exactly the same data.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import shutil
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from workers import faults, partials
from workers.hashing import KeyRange
from workers.layout import store_path
from workers.operators import KeyedOperator, arrow_type, sort_by_seq
from workers.pipeline.placement import EpochClock, SlotActions
from workers.processor import ProcessorOperator, ProcessorRun, Segment, max_event_ms, section_of
from workers.processor.layout import INITIAL_KIND, initial_column
from workers.processor.run import next_timer_of
from workers.processor.schema import wire_name
from workers.region import Region
from workers.sinks.base import EpochOutputs, Sink
from workers.sinks.files import FileSink
from workers.state import open_store
from workers.state.base import StateStore, Update, encode_key
from workers.vectorised import apply_batch

#: the clock columns a processor's held rows carry, so their replay runs at their own epoch's time
CLOCK_COLUMNS = ("_batch_ms", "_watermark_ms", "_late_ms")


class RoutingError(Exception):
    """A record reached a PU that does not own its vnode: routing and placement disagree."""


def output_schema(operator: KeyedOperator) -> pa.Schema:
    """The schema every task of a fragment emits: kind, key, seq, the operator's fields, info."""
    fields = [("kind", pa.string()), ("key", pa.string()), ("seq", pa.int64())]
    fields += [(name, arrow_type(typ)) for name, typ in operator.output_fields]
    return pa.schema([*fields, ("info", pa.string())])


@dataclass(frozen=True)
class TaskSpec:
    """Everything a task needs, pickled to the executors with the function."""

    fragment: str
    operator: KeyedOperator
    epoch: int
    parallel_units: tuple[int, ...]  # Spark partition i runs PU parallel_units[i]
    owned: tuple[
        tuple[int, ...], ...
    ]  # owned[i]: the vnodes PU parallel_units[i] applies records of
    state_root: str
    backend: str
    terminal: bool  # the last fragment writes the sink instead of emitting outputs
    actions: tuple[SlotActions, ...] = ()  # actions[i]: the rescale actions of PU parallel_units[i]
    sink: Sink | None = None  # where the terminal fragment's outputs go; None: FileSink
    sink_retention: int = 50  # epochs the FileSink keeps
    vectorised: bool = True  # False: every operator takes the per-key path (tests, benchmarks)
    clock: EpochClock = dataclasses.field(
        default_factory=EpochClock
    )  # the epoch's processing time and watermark (processors)
    event_time: str | None = None  # the column giving event time, when the pipeline has one
    # the event time is an upstream processor's output (its event_time_column): the watermark
    # stays the source's, so this fragment's event times do not move it (as in Spark)
    chained_event_time: bool = False
    # a snapshot taken at this epoch: after its commit, the task copies its store for it
    snapshot: str | None = None
    # outputs of epochs from this one on are kept (what a rebuild re-emits); None: the last two
    outputs_from: int | None = None
    # a re-run for a rebuild of lost stores (workers/recovery/rebuild.py): the sink already
    # holds the epoch, and a whole store whose outputs of it are gone re-emits none
    rebuilding: bool = False

    def slot_actions(self, slot: int) -> SlotActions:
        return self.actions[slot] if self.actions else SlotActions()


def _ipc_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression="lz4")
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    data: bytes = sink.getvalue().to_pybytes()
    return data


def _from_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


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


#: sinks opened in this (reused) Python worker, so a sink's connection outlives one task
_OPEN_SINKS: dict[tuple[type, str], Sink] = {}


def _write_sink(spec: TaskSpec, pu: int, outputs: pa.Table) -> None:
    """The epoch's outputs of this PU to the pipeline's sink, once per (fragment, epoch, PU): the
    store committed them first, so a replay after a crash between the two writes the same table
    again and the sink recognises it (workers/sinks/base.py)."""
    sink = spec.sink if spec.sink is not None else FileSink(spec.state_root, spec.sink_retention)
    if not outputs.num_rows and not sink.writes_empty:
        return
    ident = (type(sink), sink.describe())
    live = _OPEN_SINKS.setdefault(ident, sink)
    live.write(EpochOutputs(spec.fragment, spec.epoch, pu, spec.operator.sink_table(outputs)))
    faults.after_sink_write(spec.state_root, spec.epoch, outputs.num_rows)


def _as_output_batches(schema: pa.Schema, kind: str, outputs: pa.Table) -> list[pa.RecordBatch]:
    n = outputs.num_rows
    arrays = []
    for field in schema:
        if field.name == "kind":
            arrays.append(pa.array([kind] * n, pa.string()))
        elif field.name == "info":
            arrays.append(pa.nulls(n, pa.string()))
        else:
            arrays.append(outputs.column(field.name).cast(field.type))
    batches: list[pa.RecordBatch] = pa.Table.from_arrays(arrays, schema=schema).to_batches()
    return batches


def _info_row(schema: pa.Schema, kind: str, info: dict[str, Any]) -> pa.RecordBatch:
    arrays = [
        pa.array([kind])
        if f.name == "kind"
        else pa.array([json.dumps(info)])
        if f.name == "info"
        else pa.nulls(1, f.type)
        for f in schema
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _passthrough(schema: pa.Schema, table: pa.Table) -> Iterator[pa.RecordBatch]:
    if table.num_rows == 0:
        return
    arrays = []
    for field in schema:
        if field.name in ("kind", "info", "seq"):
            arrays.append(table.column(field.name).cast(field.type))
        else:
            arrays.append(pa.nulls(table.num_rows, field.type))
    yield from pa.Table.from_arrays(arrays, schema=schema).to_batches()


def _columns(*names: str) -> list[str]:
    """Column names without repeats (an operator may read ``seq`` itself)."""
    return list(dict.fromkeys(names))


def _held_columns(spec: TaskSpec, held: pa.Table) -> list[str]:
    if partials.is_partial(held):
        return partials.partial_columns(partials.aggregates_of(spec.operator))
    return _columns("key", "seq", "vnode", "src", *_read_columns(spec))


def _read_columns(spec: TaskSpec) -> tuple[str, ...]:
    """The record columns the operator reads (its key arrives as ``key``), event time included;
    a processor's by their names in the task's tables (``wire_name``: its columns are the
    user's, a built-in operator's are Rescaler's own, ``seq`` included)."""
    key = getattr(spec.operator, "key_column", None)
    named = wire_name if _is_processor(spec) else str
    wanted = (*(named(c) for c in spec.operator.columns if c != key), *_event_column(spec))
    return tuple(dict.fromkeys(wanted))


def _event_column(spec: TaskSpec) -> tuple[str, ...]:
    return (spec.event_time,) if spec.event_time and _is_processor(spec) else ()


def _is_processor(spec: TaskSpec) -> bool:
    """A StatefulProcessor, or a keyed region of them: folded with the epoch's clock."""
    return isinstance(spec.operator, ProcessorOperator | Region)


def _write_held(
    spec: TaskSpec, actions: SlotActions, held: pa.Table | None
) -> tuple[dict[str, int], dict[str, int]]:
    """Append this epoch's held records (routed here, the target) to the hold queue file.

    Returns the records and the bytes held per vnode: a vnode's share of the bytes written, in
    proportion to its records (what the bounds of docs/rescale.md, "Bounded hold queues", count).
    """
    if held is None or held.num_rows == 0:
        return {}, {}
    if actions.hold_path is None:
        raise RoutingError(f"{spec.fragment}: held records reached a PU with no hold queue")
    from workers.rescale.transfer import write_hold

    rows = held.select(_held_columns(spec, held))
    if _is_processor(spec):
        for name, value in zip(CLOCK_COLUMNS, spec.clock.to_json().values(), strict=True):
            rows = rows.append_column(name, pa.array([value] * rows.num_rows, pa.int64()))
    written = write_hold(Path(actions.hold_path), rows)
    per_vnode = partials.records_per_vnode(held)
    vnodes = list(map(str, per_vnode))
    records = list(per_vnode.values())
    total = sum(records)
    return (
        dict(zip(vnodes, records, strict=True)),
        {v: -(-written * n // total) for v, n in zip(vnodes, records, strict=True)},
    )


def _acquire(spec: TaskSpec, store: StateStore, actions: SlotActions) -> pa.Table | None:
    """Ingest the verified exports, then return the hold queue's rows to apply first (also for
    vnodes a cancel gave back to their source: no export, only their hold queue)."""
    from workers.rescale.transfer import ingest_export, read_hold

    for path in actions.ingest:
        ingest_export(store, Path(path))  # verified: range, order, key count, checksum
    if not actions.replay_files:
        return None
    return read_hold([Path(p) for p in actions.replay_files], set(actions.replay_vnodes))


def _check_owned(spec: TaskSpec, slot: int, vnodes: pa.ChunkedArray) -> None:
    owned = pa.array(spec.owned[slot], vnodes.type)
    stray = pc.unique(vnodes.filter(pc.invert(pc.is_in(vnodes, value_set=owned))))
    if len(stray):
        raise RoutingError(
            f"{spec.fragment} PU {spec.parallel_units[slot]}, epoch {spec.epoch}: records of "
            f"vnodes {sorted(stray.to_pylist())[:8]} it does not own"
        )


def _fold_processor(
    spec: TaskSpec,
    slot: int,
    store: StateStore,
    replayed: pa.Table | None,
    records: pa.Table | None,
    acquired: tuple[int, ...] = (),
    initial: pa.Table | None = None,
) -> pa.Table:
    """A processor's epoch: the initial state (the first epoch only, before anything else);
    held rows replayed at their own epochs' clocks (their vnodes' timers only); the acquired
    vnodes' event-time timers that the previous epoch's watermark made due (Spark fired those
    in the batches the vnode spent in transit); then this epoch's records and every owned
    vnode's timers; one commit.

    In a keyed region, each operator folds the previous one's outputs of the same segment,
    under its own section of the store; the last one's outputs are the fragment's."""
    operator = spec.operator
    assert isinstance(operator, ProcessorOperator | Region)
    cols = _columns("key", "seq", "vnode", *_read_columns(spec))
    segments: list[Segment] = []
    if replayed is not None and replayed.num_rows:
        for batch_ms, watermark_ms, late_ms in sorted(
            set(zip(*(replayed.column(c).to_pylist() for c in CLOCK_COLUMNS), strict=True))
        ):
            mask = pc.and_(
                pc.and_(
                    pc.equal(replayed.column("_batch_ms"), batch_ms),
                    pc.equal(replayed.column("_watermark_ms"), watermark_ms),
                ),
                pc.equal(replayed.column("_late_ms"), late_ms),
            )
            part = replayed.filter(mask)
            segments.append(
                Segment(
                    EpochClock(batch_ms, watermark_ms, late_ms),
                    part.select(cols),
                    tuple(sorted(set(part.column("vnode").to_pylist()))),
                )
            )
    current = records.select(cols) if records is not None and records.num_rows else None
    if current is not None:
        _check_owned(spec, slot, current.column("vnode"))
    empty = pa.table({c: pa.array([], pa.string()) for c in ("key",)})
    if acquired and operator.time_mode == "eventtime":
        # the transit's event-time timers, before this epoch's rows (processing-time ones fire
        # with this epoch's: the previous epoch's batch time is not kept)
        previous = EpochClock(spec.clock.batch_ms, spec.clock.late_ms, spec.clock.late_ms)
        segments.append(Segment(previous, empty, acquired))
    segments.append(
        Segment(spec.clock, current if current is not None else empty, spec.owned[slot])
    )
    if isinstance(operator, Region):
        last = len(operator.operators) - 1
        runs = [
            ProcessorRun(
                op,
                store,
                spec.event_time if i == 0 else None,
                section=section_of(i),
                same_key=i < last,
            )
            for i, op in enumerate(operator.operators)
        ]
    else:
        runs = [ProcessorRun(operator, store, spec.event_time)]
    parts: list[pa.Table] = []
    try:
        if initial is not None and initial.num_rows:
            _check_owned(spec, slot, initial.column("vnode"))
            for i, run in enumerate(runs):
                run.initial_from(initial, initial_column(i), spec.clock)
        for segment in segments:
            for run in runs:
                run.fold(segment)
                out = run.take_outputs()
                segment = Segment(segment.clock, out, segment.vnodes)
            parts.append(out.drop_columns(["vnode"]))
    finally:
        for run in runs:
            run.close()
    outputs = pa.concat_tables(parts)
    updates = [u for run in runs for u in run.updates()]
    store.commit_epoch(
        spec.epoch, updates, outputs=_ipc_bytes(outputs), outputs_from=spec.outputs_from
    )
    return outputs


def _fold_operator(
    spec: TaskSpec,
    slot: int,
    store: StateStore,
    replayed: pa.Table | None,
    records: pa.Table | None,
) -> pa.Table:
    """A keyed operator's epoch: held rows replayed first, then this epoch's records (partial
    rows of either, ``workers.partials``, are merged with the rest)."""
    arrived = [t for t in (replayed, records) if t is not None and t.num_rows]
    if any(partials.is_partial(t) for t in arrived):
        records = partials.merge(
            arrived, partials.aggregates_for_partials(spec.operator, spec.fragment)
        )
    elif replayed is not None and replayed.num_rows:
        cols = _columns("key", "seq", "vnode", *spec.operator.columns)
        parts = [replayed.select(cols)]
        if records is not None and records.num_rows:
            parts.append(records.select(cols).cast(parts[0].schema))
        records = pa.concat_tables(parts)
    if records is not None and records.num_rows:
        _check_owned(spec, slot, records.column("vnode"))
        return _fold_and_commit(spec, store, records)
    outputs = empty_outputs(spec.operator)
    store.commit_epoch(spec.epoch, [], outputs=_ipc_bytes(outputs), outputs_from=spec.outputs_from)
    return outputs


def _fold_and_commit(spec: TaskSpec, store: StateStore, records: pa.Table) -> pa.Table:
    """Fold the epoch's records into the store and commit; returns the epoch's outputs.

    Built-in operators take the vectorised path (one read, arrays, one column commit) unless
    the spec turns it off; custom operators, and batches the arrays cannot take exactly, the
    per-key path. Both commit updates, outputs and the marker in one atomic write.
    """
    operator = spec.operator
    batch = None
    partial = partials.is_partial(records)  # merged by _fold_operator: partial_columns only
    if spec.vectorised:
        cols = _columns("key", "seq", "vnode", *operator.columns)
        batch = apply_batch(
            operator, records if partial else records.select(cols), store.get_column
        )
    if batch is not None:
        store.commit_columns(
            spec.epoch,
            batch.updates,
            outputs=_ipc_bytes(batch.outputs),
            outputs_from=spec.outputs_from,
        )
        return batch.outputs
    vnodes = dict(zip(records.column("key").to_pylist(), records.column("vnode").to_pylist()))
    cols = _columns("key", "seq", *operator.columns)
    updates, outputs = apply_records(
        store, operator, records if partial else records.select(cols), vnodes
    )
    store.commit_epoch(
        spec.epoch, updates, outputs=_ipc_bytes(outputs), outputs_from=spec.outputs_from
    )
    return outputs


@functools.cache
def task_location() -> tuple[str, str]:
    """(Spark executor id, host) of the process running this task. Kubernetes sets
    ``SPARK_EXECUTOR_ID``; a standalone worker gives its executor a log URL naming the executor
    and runs it in ``<work dir>/<application>/<executor id>``; local mode has only the driver."""
    executor = os.environ.get("SPARK_EXECUTOR_ID", "")
    if not executor:
        found = re.search(r"executorId=([^&]+)", os.environ.get("SPARK_LOG_URL_STDOUT", ""))
        executor = found.group(1) if found else ""
    if not executor:
        cwd = Path.cwd()
        executor = cwd.name if cwd.parent.name.startswith("app-") else "driver"
    host = os.environ.get("SPARK_LOCAL_HOSTNAME") or os.environ.get("SPARK_LOCAL_IP")
    return executor, host or socket.gethostname()


def run_task(
    spec: TaskSpec, slot: int, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """Process one PU's slice of one epoch. ``slot`` is the Spark partition index."""
    started = time.perf_counter()
    schema = output_schema(spec.operator)
    pu = spec.parallel_units[slot]
    actions = spec.slot_actions(slot)
    where = task_location()
    received = list(batches)
    held = None
    if received:
        table = pa.Table.from_batches(received)
        kinds = table.column("kind")
        is_rec = pc.equal(kinds, "rec")
        is_held = pc.equal(kinds, "held")
        is_init = pc.equal(kinds, INITIAL_KIND)
        records = table.filter(is_rec)
        held = table.filter(is_held)
        initial = table.filter(is_init)
        ours = pc.or_(pc.or_(is_rec, is_held), is_init)
        yield from _passthrough(schema, table.filter(pc.invert(ours)))
    else:
        records = initial = None
    arrived = [t for t in (records, held) if t is not None and t.num_rows]
    source_rows = sum(pc.sum(t.column("src")).as_py() or 0 for t in arrived)
    held_counts, held_bytes = _write_held(spec, actions, held)  # durable before the commit
    # what the runner's watermark advances by: every row that arrived, held ones included
    event_ms = (
        [] if spec.chained_event_time else [max_event_ms(t, spec.event_time) for t in arrived]
    )

    n_records = partials.records_in(records)
    # the vnodes' load, records per vnode as they arrived here (the planner's "hot vnodes"):
    # the applied ones counted here, the held ones already by _write_held
    vnode_records = dict(held_counts)
    if records is not None and records.num_rows:
        for vnode, n in partials.records_per_vnode(records).items():
            vnode_records[str(vnode)] = vnode_records.get(str(vnode), 0) + n
    store = open_store(spec.backend, store_path(Path(spec.state_root), spec.fragment, pu))
    try:
        replay = store.applied_epoch() >= spec.epoch
        if replay:
            recorded = store.epoch_outputs(spec.epoch)
            if recorded is None and spec.rebuilding and spec.terminal:
                recorded = _ipc_bytes(empty_outputs(spec.operator))  # the sink holds them
            if recorded is None:
                raise RuntimeError(
                    f"{spec.fragment} PU {pu}: epoch {spec.epoch} is already applied but its "
                    f"outputs are gone (applied epoch {store.applied_epoch()}); the checkpoint "
                    f"and the state directory disagree"
                )
            outputs = _from_ipc(recorded)
        else:
            if actions.seal:
                store.seal(actions.seal)
            for vnode, index, count in actions.seal_ranges:  # a hot vnode's range in flight
                store.seal_key_range(vnode, KeyRange(index, count))
            for vnode, index, count in actions.drop_ranges:  # it stays sealed here
                store.drop_key_range(vnode, KeyRange(index, count))
            for vnode in actions.drop:
                store.drop_vnode(vnode)
            if actions.unseal:  # a cancel gave these back: their hold queue replays below
                store.unseal(actions.unseal)
            for vnode, index, count in actions.unseal_ranges:
                store.unseal_key_range(vnode, KeyRange(index, count))
            replayed = _acquire(spec, store, actions)
            n_records += partials.records_in(replayed)
            if _is_processor(spec):
                outputs = _fold_processor(
                    spec, slot, store, replayed, records, actions.replay_vnodes, initial
                )
            else:
                outputs = _fold_operator(spec, slot, store, replayed, records)
        stats = store.vnode_stats()
        next_timer = next_timer_of(spec.operator, store, spec.owned[slot])
        if spec.snapshot is not None:
            _stage_copy(spec, store, pu)
    finally:
        store.close()

    if spec.terminal:
        if not spec.rebuilding:  # a rebuild re-runs committed epochs: their sink writes are done
            _write_sink(spec, pu, outputs)
    elif outputs.num_rows:
        yield from _as_output_batches(schema, "out", outputs)
    yield _info_row(
        schema,
        "stat",
        {
            "fragment": spec.fragment,
            "pu": pu,
            "epoch": spec.epoch,
            "records": n_records,
            "source_rows": source_rows,
            "held": held_counts,
            "held_bytes": held_bytes,
            "outputs": outputs.num_rows,
            "keys": sum(s.keys for s in stats.values()),
            "bytes": sum(s.bytes for s in stats.values()),
            "vnodes": {str(v): [s.keys, s.bytes] for v, s in stats.items()},
            "vnode_records": vnode_records,
            "replay": replay,
            "max_event_ms": max((m for m in event_ms if m is not None), default=None),
            "next_timer_ms": next_timer,
            "seconds": round(time.perf_counter() - started, 4),
            # where this PU's task really ran (truthful placement)
            "executor": where[0],
            "host": where[1],
        },
    )


def _stage_copy(spec: TaskSpec, store: StateStore, pu: int) -> None:
    """The store as of this epoch, copied for the snapshot taken at it (workers/recovery). A
    re-run of the epoch (the store is still at it: the next epoch needs this one committed)
    replaces whatever copy a crashed run left."""
    from workers.recovery.tasks import staging_path

    assert spec.snapshot is not None
    dest = staging_path(Path(spec.state_root), spec.snapshot, spec.fragment, pu)
    if dest.exists():
        shutil.rmtree(dest)
    store.checkpoint(dest)


def empty_outputs(operator: KeyedOperator) -> pa.Table:
    names = ["key", "seq", *(n for n, _ in operator.output_fields)]
    types = [pa.string(), pa.int64(), *(arrow_type(t) for _, t in operator.output_fields)]
    return pa.Table.from_arrays([pa.array([], t) for t in types], names=names)


def make_task(spec: TaskSpec) -> Any:
    """The function handed to ``DataFrame.mapInArrow`` for one fragment and epoch."""

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        slot = context.partitionId() if context is not None else 0
        yield from run_task(spec, slot, batches)

    return task
