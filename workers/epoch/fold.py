"""An epoch's fold on one PU's store, and its one commit: a processor's (with the epoch's clock)
or a keyed operator's (vectorised or per key)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from workers import partials
from workers.epoch.apply import apply_records
from workers.epoch.outputs import empty_outputs, ipc_bytes
from workers.epoch.spec import CLOCK_COLUMNS, RoutingError, TaskSpec, read_columns, unique_columns
from workers.pipeline.placement import EpochClock
from workers.processor import ProcessorOperator, ProcessorRun, Segment, section_of
from workers.processor.layout import initial_column
from workers.region import Region
from workers.state.base import StateStore
from workers.vectorised import apply_batch


def check_owned(spec: TaskSpec, slot: int, vnodes: pa.ChunkedArray) -> None:
    owned = pa.array(spec.owned[slot], vnodes.type)
    stray = pc.unique(vnodes.filter(pc.invert(pc.is_in(vnodes, value_set=owned))))
    if len(stray):
        raise RoutingError(
            f"{spec.fragment} PU {spec.parallel_units[slot]}, epoch {spec.epoch}: records of "
            f"vnodes {sorted(stray.to_pylist())[:8]} it does not own"
        )


def fold_processor(
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
    cols = unique_columns("key", "seq", "vnode", *read_columns(spec))
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
        check_owned(spec, slot, current.column("vnode"))
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
            check_owned(spec, slot, initial.column("vnode"))
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
        spec.epoch, updates, outputs=ipc_bytes(outputs), outputs_from=spec.outputs_from
    )
    return outputs


def fold_operator(
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
        cols = unique_columns("key", "seq", "vnode", *spec.operator.columns)
        parts = [replayed.select(cols)]
        if records is not None and records.num_rows:
            parts.append(records.select(cols).cast(parts[0].schema))
        records = pa.concat_tables(parts)
    if records is not None and records.num_rows:
        check_owned(spec, slot, records.column("vnode"))
        return fold_and_commit(spec, store, records)
    outputs = empty_outputs(spec.operator)
    store.commit_epoch(spec.epoch, [], outputs=ipc_bytes(outputs), outputs_from=spec.outputs_from)
    return outputs


def fold_and_commit(spec: TaskSpec, store: StateStore, records: pa.Table) -> pa.Table:
    """Fold the epoch's records into the store and commit; returns the epoch's outputs.

    Built-in operators take the vectorised path (one read, arrays, one column commit) unless
    the spec turns it off; custom operators, and batches the arrays cannot take exactly, the
    per-key path. Both commit updates, outputs and the marker in one atomic write.
    """
    operator = spec.operator
    batch = None
    partial = partials.is_partial(records)  # merged by fold_operator: partial_columns only
    if spec.vectorised:
        cols = unique_columns("key", "seq", "vnode", *operator.columns)
        batch = apply_batch(
            operator, records if partial else records.select(cols), store.get_column
        )
    if batch is not None:
        store.commit_columns(
            spec.epoch,
            batch.updates,
            outputs=ipc_bytes(batch.outputs),
            outputs_from=spec.outputs_from,
        )
        return batch.outputs
    vnodes = dict(zip(records.column("key").to_pylist(), records.column("vnode").to_pylist()))
    cols = unique_columns("key", "seq", *operator.columns)
    updates, outputs = apply_records(
        store, operator, records if partial else records.select(cols), vnodes
    )
    store.commit_epoch(
        spec.epoch, updates, outputs=ipc_bytes(outputs), outputs_from=spec.outputs_from
    )
    return outputs
