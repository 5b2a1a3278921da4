"""A rescale's records on a PU: held records appended to the hold queue, and on acquire the
verified exports ingested and the hold queue read back for replay."""

from __future__ import annotations

import pyarrow as pa

from workers import partials
from workers.epoch.spec import CLOCK_COLUMNS, RoutingError, TaskSpec, held_columns, is_processor
from workers.pipeline.placement import SlotActions
from workers.state.base import StateStore
from workers.storage import Location, location


def write_held(
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

    rows = held.select(held_columns(spec, held))
    if is_processor(spec):
        for name, value in zip(CLOCK_COLUMNS, spec.clock.to_json().values(), strict=True):
            rows = rows.append_column(name, pa.array([value] * rows.num_rows, pa.int64()))
    written = write_hold(durable_of(spec), actions.hold_path, rows)
    per_vnode = partials.records_per_vnode(held)
    vnodes = list(map(str, per_vnode))
    records = list(per_vnode.values())
    total = sum(records)
    return (
        dict(zip(vnodes, records, strict=True)),
        {v: -(-written * n // total) for v, n in zip(vnodes, records, strict=True)},
    )


def acquire(spec: TaskSpec, store: StateStore, actions: SlotActions) -> pa.Table | None:
    """Ingest the verified exports, then return the hold queue's rows to apply first (also for
    vnodes a cancel gave back to their source: no export, only their hold queue)."""
    from workers.rescale.transfer import ingest_export, read_hold

    at = durable_of(spec)
    for path in actions.ingest:
        ingest_export(store, at, path)  # verified: range, order, key count, checksum
    if not actions.replay_files:
        return None
    return read_hold(at, actions.replay_files, set(actions.replay_vnodes))


def durable_of(spec: TaskSpec) -> Location:
    """Where the task's exports and hold queues are (``workers.rescale.transfer``)."""
    return location(spec.durable or spec.state_root)
