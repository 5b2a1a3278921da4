"""Snapshots and restores as the runner leaves them, without Spark: segments written into a
recovery location with ``RecoveryLocation.write_bytes``, described by the format's own records
(``workers.recovery.format``) and made to exist by ``RecoveryLocation.commit``; a restore's
``restored.json`` written by ``workers.recovery.restore.finish_restore``, a rebuild's
``rebuilt.json`` by ``workers.recovery.rebuild.finish_rebuild``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from workers.recovery.format import (
    FragmentSnapshot,
    Segment,
    SnapshotManifest,
    TaskRun,
    VnodeRun,
    file_checksum,
    recovery_partition,
    segment_path,
)
from workers.recovery.location import RecoveryLocation, snapshot_id
from workers.recovery.rebuild import Rebuild, finish_rebuild
from workers.recovery.restore import finish_restore
from workers.recovery.stores import StoreState
from workers.recovery.tasks import segment_bytes
from workers.state.base import checksum_items, encode_key

FRAGMENT = "word_count"
VNODES = 16
PARTITIONS = 4


def take_snapshot(
    location: RecoveryLocation,
    *,
    pipeline: str,
    epoch: int,
    taken_at: float | None = None,
    keys_per_vnode: int = 3,
    pus: tuple[int, ...] = (0, 1),
    trigger: str = "periodic",
    requested_by: str = "rescaler",
    duration_s: float = 1.25,
) -> SnapshotManifest:
    """A complete snapshot of one fragment (``VNODES`` vnodes spread over ``pus``, each with
    ``keys_per_vnode`` keys), its segments written, its manifest last."""
    taken_at = time.time() if taken_at is None else taken_at
    sid = snapshot_id(taken_at, epoch)
    segments: list[Segment] = []
    runs: list[TaskRun] = []
    for pu in pus:
        owned = [v for v in range(VNODES) if v % len(pus) == pus.index(pu)]
        written: list[Segment] = []
        for partition in range(PARTITIONS):
            members = [v for v in owned if recovery_partition(v, PARTITIONS) == partition]
            items: list[tuple[bytes, bytes]] = []
            vnode_runs: dict[int, VnodeRun] = {}
            for vnode in members:
                mine = [
                    (encode_key(vnode, f"w{epoch}-{vnode}-{i}".encode()), f"{i}".encode())
                    for i in range(keys_per_vnode)
                ]
                mine.sort()
                size = sum(len(k) + len(v) for k, v in mine)
                vnode_runs[vnode] = VnodeRun(len(items), len(mine), size, checksum_items(mine))
                items += mine
            if not items:
                continue
            data = segment_bytes([k for k, _ in items], [v for _, v in items])
            rel = segment_path(FRAGMENT, partition, pu)
            location.write_bytes(f"{pipeline}/{sid}/{rel}", data)
            written.append(Segment(FRAGMENT, partition, pu, rel, file_checksum(data), vnode_runs))
        segments += written
        runs.append(
            TaskRun(
                pu,
                f"executor-{pu}",
                f"host-{pu}",
                sum(s.keys for s in written),
                sum(s.bytes for s in written),
                0.5 + pu,
            )
        )
    manifest = SnapshotManifest(
        snapshot_id=sid,
        pipeline=pipeline,
        epoch=epoch,
        partitions=PARTITIONS,
        backend="lmdb",
        taken_at=taken_at,
        duration_s=duration_s,
        trigger=trigger,
        requested_by=requested_by,
        source_offset={"offset": 1000 * epoch},
        checkpoint={
            "metadata": '{"id":"q"}',
            "offsets": f'v1\n{{"batchWatermarkMs":0}}\n{{"offset": {1000 * epoch}}}',
            "commits": 'v1\n{"nextBatchWatermarkMs":0}',
        },
        files={},
        fragments={FRAGMENT: FragmentSnapshot(VNODES, 1, tuple(pus), tuple(segments))},
        tasks=tuple(runs),
    )
    location.commit(manifest)
    return manifest


def restore(
    state_dir: Path, manifest: SnapshotManifest, *, pus: tuple[int, ...] = (0, 1, 2)
) -> list[TaskRun]:
    """What a restore leaves in the pipeline's state directory (``restored.json`` included),
    the tasks' records as the restore job returns them."""
    per_pu = manifest.keys // len(pus)
    runs = [
        TaskRun(pu, f"executor-{pu}", f"host-{pu}", per_pu, per_pu * 20, 0.25 * (pu + 1))
        for pu in pus
    ]
    finish_restore(state_dir / manifest.pipeline, manifest, runs)
    return runs


def rebuild(
    state_dir: Path,
    manifest: SnapshotManifest,
    *,
    lost: tuple[StoreState, ...] = (
        StoreState(FRAGMENT, 1, "missing", "stores/word_count/pu-1 is gone"),
    ),
    epoch: int | None = None,
    started_at: float | None = None,
    duration_s: float = 9.5,
) -> dict[str, Any]:
    """What a rebuild of ``lost`` stores from ``manifest`` leaves in the pipeline's state
    directory: ``rebuilt.json`` with the fields ``workers.recovery.rebuild.run_rebuild`` writes
    (epochs up to ``epoch`` re-run, default three; one task per PU with a lost store)."""
    epoch = manifest.epoch + 3 if epoch is None else epoch
    pus = sorted({s.pu for s in lost})
    runs = [TaskRun(pu, f"executor-{pu}", f"host-{pu}", 100 * (pu + 1), 2000, 0.4) for pu in pus]
    record: dict[str, Any] = {
        "snapshot_id": manifest.snapshot_id,
        "snapshot_epoch": manifest.epoch,
        "epoch": epoch,
        "lost": [s.to_json() for s in lost],
        "rerun_epochs": list(range(manifest.epoch + 1, epoch + 1)),
        "started_at": time.time() if started_at is None else started_at,
        "duration_s": duration_s,
        "keys": sum(r.keys for r in runs),
        "tasks": [r.to_json() for r in runs],
    }
    done = Rebuild(manifest=manifest, target=epoch, lost=lost, entries=(), later_offsets={})
    finish_rebuild(state_dir / manifest.pipeline, done, record)
    return record
