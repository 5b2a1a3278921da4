"""What the snapshot and restore tests share: a stand-in for Spark that runs each task in this
process, stores filled at an epoch, and a snapshot of them taken as the runner takes one."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa

from workers.layout import local_root, pu_store
from workers.pipeline.placement import VnodeMapping
from workers.recovery.location import RecoveryLocation
from workers.recovery.snapshots import Pending, SnapshotEvery, Snapshots
from workers.recovery.tasks import staging_path
from workers.spark_tasks import POOL_PROPERTY
from workers.state import open_store
from workers.state.base import Update, encode_key

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


def fill(
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
        with open_store(backend, pu_store(root, "counts", pu)) as store:
            store.commit_epoch(epoch, updates)
    return entries


def checkpoint_log(pipeline_dir: Path, epoch: int) -> None:
    cp = pipeline_dir / "checkpoint"
    (cp / "offsets").mkdir(parents=True)
    (cp / "commits").mkdir(parents=True)
    (cp / "metadata").write_text('{"id":"q"}', "utf-8")
    (cp / "offsets" / str(epoch - 1)).write_text('v1\n{}\n{"rows": 1000}', "utf-8")
    (cp / "offsets" / str(epoch)).write_text(
        'v1\n{"batchWatermarkMs":0}\n{"rows": 1234}\n{"ticks": 3}', "utf-8"
    )
    (cp / "commits" / str(epoch)).write_text('v1\n{"nextBatchWatermarkMs":0}', "utf-8")


def take(
    tmp: Path, backend: str, mapping: VnodeMapping, epoch: int, *, keep: int = 3, keys: int = 3000
) -> tuple[Snapshots, dict[bytes, bytes], str]:
    """A snapshot of one fragment's stores at ``epoch``, as the runner takes one."""
    pipeline_dir = tmp / "state" / "p"
    entries = fill(pipeline_dir, backend, mapping, epoch, keys)
    checkpoint_log(pipeline_dir, epoch) if not (pipeline_dir / "checkpoint").exists() else None
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
        with open_store(backend, pu_store(pipeline_dir, "counts", pu)) as store:
            store.checkpoint(
                staging_path(local_root(pipeline_dir), pending.snapshot_id, "counts", pu)
            )
    snapshots.write(Pending(**{**pending.__dict__, "placements": {"counts": mapping}}))
    return snapshots, entries, pending.snapshot_id


def restored(root: Path, backend: str, placements: dict[str, VnodeMapping]) -> dict[bytes, bytes]:
    out: dict[bytes, bytes] = {}
    for pu in placements["counts"].parallel_units:
        with open_store(backend, pu_store(root, "counts", pu), readonly=True) as store:
            for key, value in store.scan():
                vnode = int.from_bytes(key[:2], "big")
                assert placements["counts"].mapping[vnode] == pu, "a vnode restored off its owner"
                out[key] = value
    return out


def checkpoint_log_next(pipeline_dir: Path, epoch: int) -> None:
    cp = pipeline_dir / "checkpoint"
    (cp / "offsets" / str(epoch)).write_text('v1\n{}\n{"rows": 99}', "utf-8")
    (cp / "commits" / str(epoch)).write_text("v1\n{}", "utf-8")
