"""One PU's slice of one epoch: the function Spark's ``mapInArrow`` runs on an executor."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from workers import partials
from workers.epoch.fold import fold_operator, fold_processor
from workers.epoch.held import acquire, write_held
from workers.epoch.location import task_location
from workers.epoch.outputs import (
    empty_outputs,
    from_ipc,
    info_row,
    ipc_bytes,
    output_batches,
    passthrough,
)
from workers.epoch.sink import write_sink
from workers.epoch.spec import (
    STORE_LOST,
    StoreLost,
    TaskSpec,
    is_processor,
    output_schema,
)
from workers.hashing import KeyRange
from workers.layout import local_root, pu_store, refuse_away_from_home
from workers.processor import max_event_ms
from workers.processor.layout import INITIAL_KIND
from workers.processor.run import next_timer_of
from workers.state import open_store
from workers.state.base import StateStore


def run_task(
    spec: TaskSpec, slot: int, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """Process one PU's slice of one epoch. ``slot`` is the Spark partition index."""
    started = time.perf_counter()
    schema = output_schema(spec.operator)
    pu = spec.parallel_units[slot]
    actions = spec.slot_actions(slot)
    where = task_location()
    path = pu_store(spec.state_root, spec.fragment, pu)
    home = spec.home_of(slot)
    # before anything is written here: away from home, the store must be on this disk too (an
    # executor beside the home one, on the same host, shares its directory)
    refuse_away_from_home(home, where[0], path, f"{spec.fragment} PU {pu}'s task")
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
        yield from passthrough(schema, table.filter(pc.invert(ours)))
    else:
        records = initial = None
    arrived = [t for t in (records, held) if t is not None and t.num_rows]
    source_rows = sum(pc.sum(t.column("src")).as_py() or 0 for t in arrived)
    held_counts, held_bytes = write_held(spec, actions, held)  # durable before the commit
    # what the runner's watermark advances by: every row that arrived, held ones included
    event_ms = (
        [] if spec.chained_event_time else [max_event_ms(t, spec.event_time) for t in arrived]
    )

    n_records = partials.records_in(records)
    # the vnodes' load, records per vnode as they arrived here (the planner's "hot vnodes"):
    # the applied ones counted here, the held ones already by write_held
    vnode_records = dict(held_counts)
    if records is not None and records.num_rows:
        for vnode, n in partials.records_per_vnode(records).items():
            vnode_records[str(vnode)] = vnode_records.get(str(vnode), 0) + n
    store = open_store(spec.backend, path)
    try:
        applied = store.applied_epoch()
        if applied < spec.expected_epoch(slot):
            raise StoreLost(
                f"{STORE_LOST}: {spec.fragment} PU {pu}'s store ({path}) has committed epoch "
                f"{applied}, but the PU committed epoch {spec.expected_epoch(slot)} already: it "
                f"was deleted or replaced; the runner rebuilds it from the newest snapshot"
            )
        replay = applied >= spec.epoch
        if replay:
            recorded = store.epoch_outputs(spec.epoch)
            if recorded is None and spec.rebuilding and spec.terminal:
                recorded = ipc_bytes(empty_outputs(spec.operator))  # the sink holds them
            if recorded is None:
                raise RuntimeError(
                    f"{spec.fragment} PU {pu}: epoch {spec.epoch} is already applied but its "
                    f"outputs are gone (applied epoch {store.applied_epoch()}); the checkpoint "
                    f"and the state directory disagree"
                )
            outputs = from_ipc(recorded)
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
            replayed = acquire(spec, store, actions)
            n_records += partials.records_in(replayed)
            if is_processor(spec):
                outputs = fold_processor(
                    spec, slot, store, replayed, records, actions.replay_vnodes, initial
                )
            else:
                outputs = fold_operator(spec, slot, store, replayed, records)
        stats = store.vnode_stats()
        next_timer = next_timer_of(spec.operator, store, spec.owned[slot])
        if spec.snapshot is not None:
            _stage_copy(spec, store, pu)
    finally:
        store.close()

    if spec.terminal:
        if not spec.rebuilding:  # a rebuild re-runs committed epochs: their sink writes are done
            write_sink(spec, pu, outputs)
    elif outputs.num_rows:
        yield from output_batches(schema, "out", outputs)
    yield info_row(
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
            # where the store is: this executor's directory of the pipeline (store_homes.py)
            "store_root": str(local_root(spec.state_root)),
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
    dest = staging_path(local_root(spec.state_root), spec.snapshot, spec.fragment, pu)
    if dest.exists():
        shutil.rmtree(dest)
    store.checkpoint(dest)


def make_task(spec: TaskSpec) -> Any:
    """The function handed to ``DataFrame.mapInArrow`` for one fragment and epoch."""

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        slot = context.partitionId() if context is not None else 0
        yield from run_task(spec, slot, batches)

    return task
