"""Snapshots into recovery partitions and restores at another size, without Spark: the tasks
run in this process through a stand-in for ``SparkContext.parallelize(...).map(...).collect()``.
The real jobs on executors are in tests/integration/workers/test_recovery.py."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from workers.layout import store_path
from workers.pipeline.placement import VnodeMapping
from workers.recovery.format import SnapshotCorrupt, SnapshotError, recovery_partition
from workers.recovery.location import RecoveryLocation, snapshot_id
from workers.recovery.snapshots import (
    RESTORE_PROGRESS,
    Pending,
    RestoreRefused,
    SnapshotEvery,
    Snapshots,
    begin_restore,
    check_restorable,
    finish_restore,
    pending_restore,
    restore_placements,
    restore_stores,
)
from workers.recovery.tasks import staging_path
from workers.spark_tasks import BACKGROUND_POOL, POOL_PROPERTY
from workers.state import open_store
from workers.state.base import COLUMNAR, Update, encode_key

VNODES = 64


class _Frame:
    """``spark.range(...)`` and the ``mapInArrow`` over it that ``run_tasks`` collects: each
    row a partition of its own, run here in order."""

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids
        self.rows: list[dict[str, Any]] = []

    def mapInArrow(self, fn: Any, schema: str) -> _Frame:
        done = _Frame(self.ids)
        for i in self.ids:
            batch = pa.RecordBatch.from_arrays([pa.array([i], pa.int64())], names=["id"])
            for out in fn(iter([batch])):
                done.rows.extend(out.to_pylist())
        return done

    def collect(self) -> list[dict[str, Any]]:
        return self.rows


class _Context:
    def __init__(self) -> None:
        self.jobs: list[tuple[str | None, int]] = []
        self.pools: list[str | None] = []  # the scheduler pool of each job
        self._description: str | None = None
        self._local: dict[str, str | None] = {}

    def setJobDescription(self, text: str | None) -> None:
        self._description = text

    def setLocalProperty(self, key: str, value: str | None) -> None:
        self._local[key] = value


class InProcessSpark:
    """Runs each "task" in this process, in order; records every job's description and size."""

    def __init__(self) -> None:
        self.sparkContext = _Context()

    def range(self, start: int, end: int, step: int, slices: int) -> _Frame:
        context = self.sparkContext
        context.jobs.append((context._description, slices))
        context.pools.append(context._local.get(POOL_PROPERTY))
        return _Frame(list(range(start, end, step)))


def _fill(
    root: Path, backend: str, mapping: VnodeMapping, epoch: int, keys: int
) -> dict[bytes, bytes]:
    """Stores of one fragment at ``epoch`` with ``keys`` random keys; returns every entry."""
    rng = random.Random(keys)
    entries: dict[bytes, bytes] = {}
    by_pu: dict[int, list[Update]] = {pu: [] for pu in mapping.parallel_units}
    for i in range(keys):
        vnode = rng.randrange(VNODES)
        key = encode_key(vnode, f"key-{i}".encode())
        value = rng.randbytes(rng.randrange(0, 40))
        entries[key] = value
        by_pu[mapping.mapping[vnode]].append(Update(key, None, value))
    for pu, updates in by_pu.items():
        with open_store(backend, store_path(root, "counts", pu)) as store:
            store.commit_epoch(epoch, updates)
    return entries


def _checkpoint_log(pipeline_dir: Path, epoch: int) -> None:
    cp = pipeline_dir / "checkpoint"
    (cp / "offsets").mkdir(parents=True)
    (cp / "commits").mkdir(parents=True)
    (cp / "metadata").write_text('{"id":"q"}', "utf-8")
    (cp / "offsets" / str(epoch - 1)).write_text('v1\n{}\n{"rows": 1000}', "utf-8")
    (cp / "offsets" / str(epoch)).write_text(
        'v1\n{"batchWatermarkMs":0}\n{"rows": 1234}\n{"ticks": 3}', "utf-8"
    )
    (cp / "commits" / str(epoch)).write_text('v1\n{"nextBatchWatermarkMs":0}', "utf-8")


def _take(
    tmp: Path, backend: str, mapping: VnodeMapping, epoch: int, *, keep: int = 3, keys: int = 3000
) -> tuple[Snapshots, dict[bytes, bytes], str]:
    """A snapshot of one fragment's stores at ``epoch``, as the runner takes one."""
    pipeline_dir = tmp / "state" / "p"
    entries = _fill(pipeline_dir, backend, mapping, epoch, keys)
    _checkpoint_log(pipeline_dir, epoch) if not (pipeline_dir / "checkpoint").exists() else None
    (pipeline_dir / "watermark.json").write_text('{"watermark_ms": 5}', "utf-8")
    snapshots = Snapshots(
        spark=InProcessSpark(),
        pipeline="p",
        pipeline_dir=pipeline_dir,
        location=RecoveryLocation(tmp / "recovery"),
        every=SnapshotEvery.parse("2"),
        partitions=8,
        keep=keep,
        backend=backend,
    )
    pending = snapshots.due(epoch, busy=False)
    assert pending is not None
    for pu in mapping.parallel_units:  # what each PU's epoch task does after its commit
        with open_store(backend, store_path(pipeline_dir, "counts", pu)) as store:
            store.checkpoint(staging_path(pipeline_dir, pending.snapshot_id, "counts", pu))
    snapshots.write(Pending(**{**pending.__dict__, "placements": {"counts": mapping}}))
    return snapshots, entries, pending.snapshot_id


def _restored(root: Path, backend: str, placements: dict[str, VnodeMapping]) -> dict[bytes, bytes]:
    out: dict[bytes, bytes] = {}
    for pu in placements["counts"].parallel_units:
        with open_store(backend, store_path(root, "counts", pu), readonly=True) as store:
            for key, value in store.scan():
                vnode = int.from_bytes(key[:2], "big")
                assert placements["counts"].mapping[vnode] == pu, "a vnode restored off its owner"
                out[key] = value
    return out


@pytest.mark.parametrize("backend", ["lmdb", "rocksdb"])
@pytest.mark.parametrize("target", [1, 3, 4])
def test_snapshot_restores_at_any_size(tmp_path: Path, backend: str, target: int) -> None:
    mapping = VnodeMapping.initial("counts", VNODES, [0, 1])
    snapshots, entries, sid = _take(tmp_path, backend, mapping, epoch=7)
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
    assert not (tmp_path / "state" / "p" / "snapshot-staging" / sid).exists()

    fresh = tmp_path / "elsewhere" / "p"
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
    assert _restored(fresh, backend, placements) == entries
    for pu in range(target):
        with open_store(backend, store_path(fresh, "counts", pu), readonly=True) as store:
            assert store.applied_epoch() == 7
    assert (fresh / "checkpoint" / "commits" / "7").exists()
    # a restart reads the offsets before the last too (what was committed before it)
    assert (fresh / "checkpoint" / "offsets" / "6").read_text("utf-8").endswith('{"rows": 1000}')
    assert (fresh / "watermark.json").read_text("utf-8") == '{"watermark_ms": 5}'
    assert pending_restore(fresh) is None
    assert json.loads((fresh / "restored.json").read_text("utf-8"))["keys"] == len(entries)


def test_a_corrupt_segment_is_refused_and_the_previous_snapshot_offered(tmp_path: Path) -> None:
    mapping = VnodeMapping.initial("counts", VNODES, [0, 1])
    _take(tmp_path, "lmdb", mapping, epoch=3)
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
    _checkpoint_log_next(tmp_path / "state" / "p", 4)
    for pu in (0, 1):
        with open_store("lmdb", store_path(tmp_path / "state" / "p", "counts", pu)) as store:
            store.checkpoint(
                staging_path(tmp_path / "state" / "p", pending.snapshot_id, "counts", pu)
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


def _checkpoint_log_next(pipeline_dir: Path, epoch: int) -> None:
    cp = pipeline_dir / "checkpoint"
    (cp / "offsets" / str(epoch)).write_text('v1\n{}\n{"rows": 99}', "utf-8")
    (cp / "commits" / str(epoch)).write_text("v1\n{}", "utf-8")


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


def test_restore_refuses_a_directory_with_state_and_another_topology(tmp_path: Path) -> None:
    mapping = VnodeMapping.initial("counts", VNODES, [0, 1])
    _take(tmp_path, "lmdb", mapping, epoch=2)
    manifest = RecoveryLocation(tmp_path / "recovery").manifest("p", "latest")
    with pytest.raises(RestoreRefused, match="already holds a running job's state"):
        check_restorable(tmp_path / "state" / "p", manifest, {"counts": VNODES})
    with pytest.raises(RestoreRefused, match="holds fragments"):
        check_restorable(tmp_path / "new" / "p", manifest, {"other": VNODES})
    with pytest.raises(RestoreRefused, match="vnode count is fixed"):
        check_restorable(tmp_path / "new" / "p", manifest, {"counts": 128})


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


def test_a_restored_placement_numbers_past_every_version_seen(tmp_path: Path) -> None:
    mapping = VnodeMapping("counts", (0, 1), tuple(v % 2 for v in range(VNODES)), version=4)
    _take(tmp_path, "lmdb", mapping, epoch=1)
    manifest = RecoveryLocation(tmp_path / "recovery").manifest("p", "latest")
    assert restore_placements(manifest, [0, 1, 2])["counts"].version == 5
    # the lost job rescaled twice after the snapshot: the control plane saw version 6
    assert restore_placements(manifest, [0], {"counts": 6})["counts"].version == 7


def test_a_corrupt_snapshot_is_named_from_a_spark_task_s_error() -> None:
    from workers.recovery.snapshots import corruption_in

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


def test_a_snapshot_whose_epoch_never_commits_is_dropped_whole(tmp_path: Path) -> None:
    """The query stopped before Spark logged the epoch's commit: the writer gives up at once
    (not after commit_wait_s) and leaves no files and no copies behind."""
    pipeline_dir = tmp_path / "state" / "p"
    mapping = VnodeMapping.initial("counts", VNODES, [0, 1])
    _fill(pipeline_dir, "lmdb", mapping, 5, 500)
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
        with open_store("lmdb", store_path(pipeline_dir, "counts", pu)) as store:
            store.checkpoint(staging_path(pipeline_dir, pending.snapshot_id, "counts", pu))
    snapshots.query_stopped()
    snapshots.epoch_committed(pending, {"counts": mapping})
    snapshots.wait(timeout=30)
    assert snapshots.last_error is not None and "did not commit epoch 5" in snapshots.last_error
    assert location.snapshot_ids("p") == [] and location.incomplete_ids("p") == []
    assert not (pipeline_dir / "snapshot-staging" / pending.snapshot_id).exists()
