"""Snapshots into recovery partitions and restores at another size, without Spark: the tasks
run in this process through a stand-in for ``SparkContext.parallelize(...).map(...).collect()``
(tests/unit/workers/recovery/snapshot_setup.py). A restore's refusals are test_restore.py; the
real jobs on executors are in tests/integration/workers/test_recovery.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.workers.recovery.snapshot_setup import (
    VNODES,
    InProcessSpark,
    fill,
    restored,
    take,
)
from workers.layout import local_root, pu_store
from workers.pipeline.placement import VnodeMapping
from workers.recovery.format import SnapshotError, recovery_partition
from workers.recovery.location import RecoveryLocation, snapshot_id
from workers.recovery.restore import (
    RESTORE_PROGRESS,
    begin_restore,
    check_restorable,
    finish_restore,
    pending_restore,
    restore_placements,
    restore_stores,
)
from workers.recovery.snapshots import SnapshotEvery, Snapshots
from workers.recovery.tasks import staging_path
from workers.spark_tasks import BACKGROUND_POOL
from workers.state import open_store
from workers.state.base import COLUMNAR


@pytest.mark.parametrize("backend", ["lmdb", "rocksdb"])
@pytest.mark.parametrize("target", [1, 3, 4])
def test_snapshot_restores_at_any_size(
    tmp_path: Path, backend: str, target: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    mapping = VnodeMapping.initial("counts", VNODES, [0, 1])
    snapshots, entries, sid = take(tmp_path, backend, mapping, epoch=7)
    location = RecoveryLocation(tmp_path / "recovery")
    manifest = location.manifest("p", "latest")
    assert manifest.snapshot_id == sid and manifest.epoch == 7
    assert manifest.keys == len(entries)
    assert manifest.source_offset == {"rows": 1234}
    assert manifest.files["watermark.json"] == '{"watermark_ms": 5}'
    # one task per source PU, and every segment holds only its partition's vnodes
    assert [slices for _, slices in snapshots.spark.sparkContext.jobs] == [2]
    # beside the epochs: in the executors' background pool (workers.spark_tasks)
    assert snapshots.spark.sparkContext.pools == [BACKGROUND_POOL]
    for seg in manifest.fragments["counts"].segments:
        assert {recovery_partition(v, 8) for v in seg.vnodes} == {seg.partition}
        assert all(mapping.mapping[v] == seg.pu for v in seg.vnodes)
        # each vnode's run is verified on its buffers at restore (no step per key in Python)
        assert all(run.checksum.startswith(COLUMNAR) for run in seg.vnodes.values())
    # the executors' staged copies went once written
    assert not (local_root(tmp_path / "state" / "p") / "snapshot-staging").exists()

    fresh = tmp_path / "elsewhere" / "p"  # another cluster: its executor's directory too
    monkeypatch.setenv("RESCALER_LOCAL_DIR", str(tmp_path / "elsewhere-executor"))
    check_restorable(fresh, manifest, {"counts": VNODES})
    begin_restore(fresh, manifest, location.uri)
    placements = restore_placements(manifest, list(range(target)))
    assert placements["counts"].version == mapping.version + 1
    spark = InProcessSpark()
    runs = restore_stores(
        spark,
        location=location,
        manifest=manifest,
        pipeline_dir=fresh,
        backend=backend,
        placements=placements,
        report_progress=True,
    )
    assert [slices for _, slices in spark.sparkContext.jobs] == [target]
    assert sorted(r.pu for r in runs) == list(range(target))
    # while it runs, each task says how far it is (what the console shows)
    progress = [
        json.loads((fresh / RESTORE_PROGRESS / f"pu-{pu}.json").read_text("utf-8"))
        for pu in range(target)
    ]
    assert all(p["done"] and p["keys"] == p["keys_total"] for p in progress)
    assert sum(p["keys"] for p in progress) == len(entries)
    finish_restore(fresh, manifest, runs)
    assert not (fresh / RESTORE_PROGRESS).exists()
    assert restored(fresh, backend, placements) == entries
    for pu in range(target):
        with open_store(backend, pu_store(fresh, "counts", pu), readonly=True) as store:
            assert store.applied_epoch() == 7
    assert (fresh / "checkpoint" / "commits" / "7").exists()
    # a restart reads the offsets before the last too (what was committed before it)
    assert (fresh / "checkpoint" / "offsets" / "6").read_text("utf-8").endswith('{"rows": 1000}')
    assert (fresh / "watermark.json").read_text("utf-8") == '{"watermark_ms": 5}'
    assert pending_restore(fresh) is None
    assert json.loads((fresh / "restored.json").read_text("utf-8"))["keys"] == len(entries)


def test_only_complete_snapshots_count_and_old_ones_are_pruned(tmp_path: Path) -> None:
    location = RecoveryLocation(tmp_path / "recovery")
    ids = [snapshot_id(1_700_000_000 + i, i) for i in range(5)]
    for i in ids:
        location.write_bytes(f"p/{i}/counts/part-000/pu-0.arrow", b"x")
    for i in ids[:4]:  # the last one crashed before its manifest
        location.write_bytes(f"p/{i}/manifest.json", b"{}")
    assert location.snapshot_ids("p") == ids[:4]
    assert location.incomplete_ids("p") == ids[4:]
    deleted = location.prune("p", keep=2)
    assert deleted == ids[:2]
    assert location.snapshot_ids("p") == ids[2:4]
    with pytest.raises(SnapshotError, match="no complete snapshot"):
        location.manifest("p", ids[0])
    with pytest.raises(SnapshotError, match="no snapshot of pipeline 'q'"):
        location.manifest("q", "latest")


def test_due_waits_for_transit_and_for_the_snapshot_being_written(tmp_path: Path) -> None:
    snapshots = Snapshots(
        spark=InProcessSpark(),
        pipeline="p",
        pipeline_dir=tmp_path / "p",
        location=RecoveryLocation(tmp_path / "recovery"),
        every=SnapshotEvery.parse("3"),
        partitions=4,
        keep=3,
        backend="lmdb",
    )
    assert snapshots.due(0, busy=True) is None  # vnodes in transit: not now
    assert snapshots.due(0, busy=False, last=True) is None  # the runner stops after it
    first = snapshots.due(1, busy=False)
    assert first is not None and first.trigger == "periodic"
    snapshots._last_epoch = 1  # as epoch_committed records it
    assert snapshots.due(2, busy=False) is None and snapshots.due(3, busy=False) is None
    assert snapshots.due(4, busy=False) is not None


def test_with_periodic_snapshots_on_one_is_taken_once_a_rescale_settles(tmp_path: Path) -> None:
    """A rebuild re-runs epochs, not a rescale's steps: a snapshot of the new placement as soon
    as the operation has no vnode in transit, not an interval later."""

    def snapshots(every: str) -> Snapshots:
        return Snapshots(
            spark=InProcessSpark(),
            pipeline="p",
            pipeline_dir=tmp_path / "p",
            location=RecoveryLocation(tmp_path / "recovery"),
            every=SnapshotEvery.parse(every),
            partitions=4,
            keep=3,
            backend="lmdb",
        )

    on = snapshots("100")
    on._last_epoch = 10  # the last periodic one
    assert on.due(11, busy=True) is None and on.due(12, busy=True) is None
    settled = on.due(13, busy=False)
    assert settled is not None and (settled.trigger, settled.requested_by) == (
        "rescale",
        "rescaler",
    )
    assert on.due(14, busy=False) is None  # once
    off = snapshots("")  # no periodic snapshots asked for: none after a rescale either
    assert off.due(1, busy=True) is None and off.due(2, busy=False) is None


@pytest.mark.parametrize(
    ("text", "epochs", "seconds"),
    [
        ("", None, None),
        ("off", None, None),
        ("20", 20, None),
        ("5e", 5, None),
        ("90s", None, 90.0),
        ("5m", None, 300.0),
        ("1h", None, 3600.0),
    ],
)
def test_snapshot_every_reads_epochs_or_time(
    text: str, epochs: int | None, seconds: float | None
) -> None:
    every = SnapshotEvery.parse(text)
    assert (every.epochs, every.seconds) == (epochs, seconds)


@pytest.mark.parametrize("text", ["-3", "1.5", "ten", "5 weeks", "0s"])
def test_snapshot_every_refuses_nonsense(text: str) -> None:
    with pytest.raises(ValueError, match="snapshot interval"):
        SnapshotEvery.parse(text)


def test_a_snapshot_whose_epoch_never_commits_is_dropped_whole(tmp_path: Path) -> None:
    """The query stopped before Spark logged the epoch's commit: the writer gives up at once
    (not after commit_wait_s) and leaves no files and no copies behind."""
    pipeline_dir = tmp_path / "state" / "p"
    mapping = VnodeMapping.initial("counts", VNODES, [0, 1])
    fill(pipeline_dir, "lmdb", mapping, 5, 500)
    (pipeline_dir / "checkpoint" / "offsets").mkdir(parents=True)
    (pipeline_dir / "checkpoint" / "metadata").write_text("{}", "utf-8")
    location = RecoveryLocation(tmp_path / "recovery")
    snapshots = Snapshots(
        spark=InProcessSpark(),
        pipeline="p",
        pipeline_dir=pipeline_dir,
        location=location,
        every=SnapshotEvery.parse("1"),
        partitions=4,
        keep=3,
        backend="lmdb",
        commit_wait_s=600.0,
    )
    pending = snapshots.due(5, busy=False)
    assert pending is not None
    for pu in (0, 1):
        with open_store("lmdb", pu_store(pipeline_dir, "counts", pu)) as store:
            store.checkpoint(
                staging_path(local_root(pipeline_dir), pending.snapshot_id, "counts", pu)
            )
    snapshots.query_stopped()
    snapshots.epoch_committed(pending, {"counts": mapping})
    snapshots.wait(timeout=30)
    assert snapshots.last_error is not None and "did not commit epoch 5" in snapshots.last_error
    assert location.snapshot_ids("p") == [] and location.incomplete_ids("p") == []
    assert not (local_root(pipeline_dir) / "snapshot-staging").exists(), "its copies are gone"
