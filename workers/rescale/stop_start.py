"""Stop-start rescale through recovery partitions (DESIGN §3).

At one barrier the stream waits while the runner snapshots all of each fragment's state into
:data:`~workers.rescale.transfer.RECOVERY_PARTITIONS` partitions (by vnode, independent of the
cluster size), clears the old stores, and restores every entry to the PU that owns its vnode
under the new mapping.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections import defaultdict
from pathlib import Path

from workers.layout import store_path
from workers.rescale import transfer
from workers.rescale.ledger import OperationLedger
from workers.rescale.operation import OperationState
from workers.rescale.protocol import OperationStatus, StopStartPhase
from workers.state import open_store
from workers.state.base import VnodeExport, checksum_items, decode_key

log = logging.getLogger("workers.rescale")


class StopStart:
    def __init__(self, ledger: OperationLedger, backend: str) -> None:
        self.ledger = ledger
        self.backend = backend

    def run(self, op: OperationState, epoch: int) -> None:
        """Snapshot into recovery partitions, restart at the new size, restore by key.

        The stream waits at this barrier for all of it; each phase is durable, and a crash at
        any point resumes from the last finished phase (the snapshot holds everything).
        """
        op_dir = self.ledger.store.op_dir(op.operation_id)
        if op.begun_epoch is None:
            op.begun_epoch = epoch
        started = time.perf_counter()
        if op.phase == StopStartPhase.BEGUN:
            for name in op.fragments:
                self._snapshot(op_dir, name)
            op.phase = StopStartPhase.SNAPSHOTTED
            self.ledger.save(op)
        if op.phase == StopStartPhase.SNAPSHOTTED:
            for name in op.fragments:
                for pu in self.ledger.placements[name].parallel_units:
                    path = store_path(self.ledger.dir, name, pu)
                    if path.exists():
                        with open_store(self.backend, path) as store:
                            for vnode in list(store.vnode_stats()):
                                store.drop_vnode(vnode)
            op.phase = StopStartPhase.CLEARED
            self.ledger.save(op)
        if op.phase == StopStartPhase.CLEARED:
            vnodes = keys = moved_bytes = 0
            for name, change in op.fragments.items():
                mapping = list(change.mapping_after)
                # the placement changes below, after the restore: a crash before it resumes
                # here with the old mapping still in place, and counts the same again
                before = self.ledger.placements[name].mapping
                restored = self._restore(op_dir, name, mapping)
                for vnode, owner in enumerate(mapping):
                    if owner != before[vnode]:
                        n, size = restored.get(vnode, (0, 0))
                        vnodes, keys, moved_bytes = vnodes + 1, keys + n, moved_bytes + size
                self.ledger.set_placement(name, list(change.parallel_units_after), mapping)
            op.restored_moves = (vnodes, keys, moved_bytes)
            op.phase = StopStartPhase.RESTORED
            op.status, op.finished_epoch = OperationStatus.COMPLETED, epoch
            self.ledger.save(op)
            for name in op.fragments:
                shutil.rmtree(op_dir / "snapshot" / name, ignore_errors=True)
        log.info(
            "stop-start %s done at epoch %d in %.3fs",
            op.operation_id,
            epoch,
            time.perf_counter() - started,
        )

    def apply_placement(self, op: OperationState) -> None:
        """A completed operation's placements, as it recorded them (idempotent)."""
        if op.status == OperationStatus.COMPLETED:
            for name, change in op.fragments.items():
                self.ledger.set_placement(
                    name, list(change.parallel_units_after), list(change.mapping_after)
                )

    def _snapshot(self, op_dir: Path, name: str) -> None:
        parts: dict[int, list[tuple[bytes, bytes]]] = defaultdict(list)
        for pu in self.ledger.placements[name].parallel_units:
            path = store_path(self.ledger.dir, name, pu)
            if not path.exists():
                continue
            with open_store(self.backend, path, readonly=True) as store:
                for key, value in store.scan():
                    vnode, _ = decode_key(key)
                    parts[transfer.recovery_partition(vnode)].append((key, value))
        for part in range(transfer.RECOVERY_PARTITIONS):
            transfer.write_partition(
                transfer.snapshot_path(op_dir, name, part), parts.get(part, [])
            )

    def _restore(self, op_dir: Path, name: str, mapping: list[int]) -> dict[int, tuple[int, int]]:
        """Every snapshot entry into its new owner's store; returns vnode -> (keys, bytes)."""
        by_owner: dict[int, dict[int, list[tuple[bytes, bytes]]]] = defaultdict(
            lambda: defaultdict(list)
        )
        for part in range(transfer.RECOVERY_PARTITIONS):
            for key, value in transfer.read_partition(transfer.snapshot_path(op_dir, name, part)):
                vnode, _ = decode_key(key)
                by_owner[mapping[vnode]][vnode].append((key, value))
        for pu in sorted(set(mapping)):
            with open_store(self.backend, store_path(self.ledger.dir, name, pu)) as store:
                for vnode, items in sorted(by_owner.get(pu, {}).items()):
                    items.sort()
                    store.ingest(VnodeExport(vnode, items, len(items), checksum_items(items)))
        return {
            vnode: (len(items), sum(len(k) + len(v) for k, v in items))
            for owned in by_owner.values()
            for vnode, items in owned.items()
        }
