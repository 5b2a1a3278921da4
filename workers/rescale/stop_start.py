"""Stop-start rescale through recovery partitions (DESIGN §3, seed 004).

At one barrier the stream waits while two Spark jobs run, one task per PU each: the snapshot
(every source PU writes its stores into the pipeline's recovery partitions, the format of
:mod:`workers.recovery`), and the restore (every old or target PU first removes its old stores,
then every target PU reads the partitions holding its vnodes under the new mapping). The
driver only plans
and records; the downtime falls with parallelism instead of growing on one core. Without a Spark
session (the rescale unit tests and simulations) the same tasks run in the driver, in turn.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from workers.pipeline.placement import VnodeMapping
from workers.recovery.format import FragmentSnapshot, SnapshotManifest
from workers.recovery.location import RecoveryLocation, snapshot_id
from workers.recovery.snapshots import (
    DEFAULT_PARTITIONS,
    recovery_partitions,
    restore_stores,
)
from workers.recovery.write_job import snapshot_stores
from workers.rescale import transfer
from workers.rescale.ledger import OperationLedger
from workers.rescale.operation import OperationState
from workers.rescale.protocol import OperationStatus, StopStartPhase

log = logging.getLogger("workers.rescale")


class StopStart:
    def __init__(
        self,
        ledger: OperationLedger,
        backend: str,
        spark: Any = None,
        homes: Callable[[], dict[int, str]] | None = None,
    ) -> None:
        self.ledger = ledger
        # PU -> its home executor's location: each PU's snapshot and restore task runs there
        self.homes = homes
        self.backend = backend
        self.spark = spark  # None: the tasks run in this process

    def run(self, op: OperationState, epoch: int) -> None:
        """Snapshot into recovery partitions, restart at the new size, restore by key.

        The stream waits at this barrier for all of it; each phase is durable, and a crash at
        any point resumes from the last finished phase (the snapshot holds everything; clear
        and restore are idempotent).
        """
        # the snapshot is staged in the durable location, which every executor reaches
        staging = f"{transfer.operation_prefix(op.operation_id)}/snapshot"
        location = RecoveryLocation(self.ledger.durable.uri_of(staging))
        homes = self.homes() if self.homes is not None else None
        pipeline = self.ledger.dir.name
        if op.begun_epoch is None:
            op.begun_epoch = epoch
        started = time.perf_counter()
        executors = set(op.executors)
        if op.phase == StopStartPhase.BEGUN:
            manifest = self._snapshot(location, pipeline, op, epoch, homes)
            executors |= {t.executor for t in manifest.tasks}
            op.phase, op.executors = StopStartPhase.SNAPSHOTTED, tuple(sorted(executors))
            self.ledger.save(op)
        # the restore job clears the old stores first, each task its own PU's (an operation
        # recorded as cleared by an earlier version resumes here the same way)
        if op.phase in (StopStartPhase.SNAPSHOTTED, StopStartPhase.CLEARED):
            manifest = location.manifest(pipeline, "latest")
            targets = {
                name: VnodeMapping(
                    name, tuple(change.parallel_units_after), tuple(change.mapping_after)
                )
                for name, change in op.fragments.items()
            }
            runs = restore_stores(
                self.spark,
                location=location,
                manifest=manifest,
                pipeline_dir=self.ledger.dir,
                backend=self.backend,
                placements=targets,
                fresh_from={name: self.ledger.placements[name] for name in op.fragments},
                homes=homes,
            )
            executors |= {r.executor for r in runs}
            vnodes = keys = moved_bytes = 0
            for name, change in op.fragments.items():
                # the placement changes below, after the restore: a crash before it resumes
                # here with the old mapping still in place, and counts the same again
                before = self.ledger.placements[name].mapping
                held = {
                    v: run for s in manifest.fragments[name].segments for v, run in s.vnodes.items()
                }
                for vnode, owner in enumerate(change.mapping_after):
                    if owner != before[vnode]:
                        run = held.get(vnode)
                        vnodes += 1
                        keys += run.keys if run else 0
                        moved_bytes += run.bytes if run else 0
                self.ledger.set_placement(
                    name, list(change.parallel_units_after), list(change.mapping_after)
                )
            op.restored_moves = (vnodes, keys, moved_bytes)
            op.executors = tuple(sorted(executors))
            op.phase = StopStartPhase.RESTORED
            op.status, op.finished_epoch = OperationStatus.COMPLETED, epoch
            self.ledger.save(op)
            self.ledger.durable.delete_dir(staging)
        log.info(
            "stop-start %s done at epoch %d in %.3fs (tasks on %s)",
            op.operation_id,
            epoch,
            time.perf_counter() - started,
            ", ".join(op.executors) or "the driver",
        )

    def _snapshot(
        self,
        location: RecoveryLocation,
        pipeline: str,
        op: OperationState,
        epoch: int,
        homes: dict[int, str] | None,
    ) -> SnapshotManifest:
        """The fragments' stores as of the previous epoch, written by one task per PU."""
        taken_at = time.time()
        stores: dict[int, list[str]] = {}
        for name in op.fragments:  # each task reads its PU's stores on its executor
            for pu in self.ledger.placements[name].parallel_units:
                stores.setdefault(pu, []).append(name)
        partitions = recovery_partitions(self.ledger.dir, DEFAULT_PARTITIONS)
        sid = snapshot_id(taken_at, max(epoch - 1, 0))
        runs, segments = snapshot_stores(
            self.spark,
            location=location,
            pipeline=pipeline,
            snapshot=sid,
            partitions=partitions,
            backend=self.backend,
            stores=stores,
            state_root=self.ledger.dir,
            homes=homes,
            live=True,
        )
        manifest = SnapshotManifest(
            snapshot_id=sid,
            pipeline=pipeline,
            epoch=epoch - 1,
            partitions=partitions,
            backend=self.backend,
            taken_at=taken_at,
            duration_s=round(time.time() - taken_at, 3),
            trigger="stop-start",
            requested_by=op.operation_id,
            source_offset={},
            checkpoint={},
            files={},
            fragments={
                name: FragmentSnapshot.of(self.ledger.placements[name], segments)
                for name in op.fragments
            },
            tasks=runs,
        )
        location.commit(manifest)
        return manifest

    def apply_placement(self, op: OperationState) -> None:
        """A completed operation's placements, as it recorded them (idempotent)."""
        if op.status == OperationStatus.COMPLETED:
            for name, change in op.fragments.items():
                self.ledger.set_placement(
                    name, list(change.parallel_units_after), list(change.mapping_after)
                )
