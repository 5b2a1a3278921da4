"""Restores (workers/recovery/restore.py) that must not go on: a corrupt snapshot (with the one
before it offered), a state directory that holds state, another topology; and the placements a
restore starts from, without Spark (tests/unit/workers/recovery/snapshot_setup.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.workers.recovery.snapshot_setup import (
    VNODES,
    InProcessSpark,
    checkpoint_log_next,
    take,
)
from workers.layout import local_root, pu_store
from workers.pipeline.placement import VnodeMapping
from workers.recovery.format import SnapshotCorrupt
from workers.recovery.location import RecoveryLocation
from workers.recovery.restore import (
    RestoreRefused,
    check_restorable,
    corruption_in,
    restore_placements,
    restore_stores,
)
from workers.recovery.snapshots import Pending, SnapshotEvery, Snapshots
from workers.recovery.tasks import staging_path
from workers.state import open_store


def test_a_corrupt_segment_is_refused_and_the_previous_snapshot_offered(tmp_path: Path) -> None:
    mapping = VnodeMapping.initial("counts", VNODES, [0, 1])
    take(tmp_path, "lmdb", mapping, epoch=3)
    location = RecoveryLocation(tmp_path / "recovery")
    first = location.snapshot_ids("p")[-1]
    # a later snapshot (the stores have moved on) whose one file then rots
    snapshots = Snapshots(
        spark=InProcessSpark(),
        pipeline="p",
        pipeline_dir=tmp_path / "state" / "p",
        location=location,
        every=SnapshotEvery(),
        partitions=8,
        keep=3,
        backend="lmdb",
    )
    snapshots.request("alice")
    pending = snapshots.due(4, busy=False)
    assert pending is not None and pending.trigger == "manual" and pending.requested_by == "alice"
    checkpoint_log_next(tmp_path / "state" / "p", 4)
    for pu in (0, 1):
        with open_store("lmdb", pu_store(tmp_path / "state" / "p", "counts", pu)) as store:
            store.checkpoint(
                staging_path(
                    local_root(tmp_path / "state" / "p"), pending.snapshot_id, "counts", pu
                )
            )
    manifest = snapshots.write(Pending(**{**pending.__dict__, "placements": {"counts": mapping}}))
    segment = manifest.fragments["counts"].segments[0]
    path = tmp_path / "recovery" / "p" / manifest.snapshot_id / segment.path
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))

    fresh = tmp_path / "fresh" / "p"
    with pytest.raises(
        SnapshotCorrupt, match=f"does not match its manifest.*--restore-from {first}"
    ):
        restore_stores(
            InProcessSpark(),
            location=location,
            manifest=manifest,
            pipeline_dir=fresh,
            backend="lmdb",
            placements=restore_placements(manifest, [0, 1]),
        )
    assert location.previous("p", manifest.snapshot_id) == first


def test_restore_refuses_a_directory_with_state_and_another_topology(tmp_path: Path) -> None:
    mapping = VnodeMapping.initial("counts", VNODES, [0, 1])
    take(tmp_path, "lmdb", mapping, epoch=2)
    manifest = RecoveryLocation(tmp_path / "recovery").manifest("p", "latest")
    with pytest.raises(RestoreRefused, match="already holds a running job's state"):
        check_restorable(tmp_path / "state" / "p", manifest, {"counts": VNODES})
    with pytest.raises(RestoreRefused, match="holds fragments"):
        check_restorable(tmp_path / "new" / "p", manifest, {"other": VNODES})
    with pytest.raises(RestoreRefused, match="vnode count is fixed"):
        check_restorable(tmp_path / "new" / "p", manifest, {"counts": 128})


def test_a_restored_placement_numbers_past_every_version_seen(tmp_path: Path) -> None:
    mapping = VnodeMapping("counts", (0, 1), tuple(v % 2 for v in range(VNODES)), version=4)
    take(tmp_path, "lmdb", mapping, epoch=1)
    manifest = RecoveryLocation(tmp_path / "recovery").manifest("p", "latest")
    assert restore_placements(manifest, [0, 1, 2])["counts"].version == 5
    # the lost job rescaled twice after the snapshot: the control plane saw version 6
    assert restore_placements(manifest, [0], {"counts": 6})["counts"].version == 7


def test_a_corrupt_snapshot_is_named_from_a_spark_task_s_error() -> None:
    text = (
        "An exception was thrown from the Python worker:\nTraceback ...\n"
        "workers.recovery.format.SnapshotCorrupt: snapshot s1: /r/p/s1/f/part-001/pu-0.arrow "
        "does not match its manifest (checksum a, recorded b)\n\tat org.apache.spark..."
    )
    assert corruption_in(RuntimeError(text)) == (
        "snapshot s1: /r/p/s1/f/part-001/pu-0.arrow does not match its manifest "
        "(checksum a, recorded b)"
    )
    assert corruption_in(RuntimeError("the executor was lost")) is None
