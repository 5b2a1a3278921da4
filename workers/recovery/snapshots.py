"""The driver's side of snapshots: when to take one, the write job, the manifest.

Taking a snapshot never stops the stream. At the barrier of a due epoch the runner marks the
epoch's plan; every PU task copies its store as of that epoch right after its commit
(:meth:`~workers.state.base.StateStore.checkpoint`). Once the epoch is committed, a background
thread runs the write job (one task per source PU, :func:`workers.recovery.tasks.
write_snapshot_segments`) beside the following epochs, waits for Spark's commit of the epoch,
writes the manifest (the snapshot now exists), prunes old snapshots and drops the copies.

A snapshot is not taken while a live operation has vnodes in transit (their state is in export
files and their records in hold queues, not in the stores): a due snapshot waits for the first
barrier without one.

The restore's side (its checks, its placements, its job) is :mod:`workers.recovery.restore`.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from workers.pipeline.placement import VnodeMapping
from workers.recovery.format import (
    FragmentSnapshot,
    SnapshotError,
    SnapshotManifest,
)
from workers.recovery.location import RecoveryLocation, snapshot_id

# re-exported: workers/rescale/stop_start.py imports it from here
from workers.recovery.restore import restore_stores as restore_stores
from workers.recovery.write_job import drop_copies, snapshot_stores

log = logging.getLogger("workers.recovery")

DEFAULT_PARTITIONS = 16
DEFAULT_KEPT = 3
#: pipeline-directory files a snapshot carries with the state, restored as they were
#: (the watermark; a directory source's file list, which its offsets index; the older Python
#: control stream's tick counter, which its offsets hold and must keep growing past: the file
#: control stream's offset starts again instead, workers.sources.control.restored_offsets)
CARRIED_FILES = ("watermark.json", "source-manifest.txt", "barrier-ticks")
SETTINGS_FILE = "recovery.json"


@dataclass(frozen=True)
class SnapshotEvery:
    """RESCALER_SNAPSHOT_EVERY: ``N`` (or ``Ne``) epochs, or ``Ts`` / ``Tm`` / ``Th``; "" is off."""

    epochs: int | None = None
    seconds: float | None = None

    @classmethod
    def parse(cls, text: str) -> SnapshotEvery:
        raw = text.strip().lower().replace(" ", "")
        if raw in ("", "0", "off", "never"):
            return cls()
        found = re.fullmatch(r"(\d+(?:\.\d+)?)(e|epochs?|s|m|h)?", raw)
        if not found:
            raise ValueError(
                f"snapshot interval {text!r}: give epochs (20 or 20e) or a time (90s, 5m, 1h)"
            )
        number, unit = float(found.group(1)), found.group(2) or "e"
        if number <= 0:
            raise ValueError(f"snapshot interval {text!r} must be above 0")
        if unit.startswith("e"):
            if number != int(number):
                raise ValueError(f"snapshot interval {text!r}: epochs are whole numbers")
            return cls(epochs=int(number))
        return cls(seconds=number * {"s": 1, "m": 60, "h": 3600}[unit])

    @property
    def enabled(self) -> bool:
        return self.epochs is not None or self.seconds is not None

    def describe(self) -> str:
        if self.epochs is not None:
            return f"every {self.epochs} epochs"
        if self.seconds is not None:
            return f"every {self.seconds:g} s"
        return "off"


def recovery_partitions(pipeline_dir: Path, wanted: int) -> int:
    """P, fixed when the pipeline's state is created: the first start records it, later ones
    read it (a different RESCALER_RECOVERY_PARTITIONS is ignored with a warning)."""
    path = Path(pipeline_dir) / SETTINGS_FILE
    if path.exists():
        recorded = int(json.loads(path.read_text("utf-8"))["partitions"])
        if recorded != wanted:
            log.warning(
                "recovery partitions: this state was created with %d, not %d; keeping %d",
                recorded,
                wanted,
                recorded,
            )
        return recorded
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"partitions": wanted}), "utf-8")
    return wanted


@dataclass(frozen=True)
class Pending:
    """A snapshot whose stores were copied at ``epoch``'s barrier, not yet written out."""

    snapshot_id: str
    epoch: int
    taken_at: float
    trigger: str
    requested_by: str
    placements: dict[str, VnodeMapping]


class Snapshots:
    """Decides when a snapshot is due, and writes it beside the stream."""

    def __init__(
        self,
        *,
        spark: Any,
        pipeline: str,
        pipeline_dir: Path,
        location: RecoveryLocation,
        every: SnapshotEvery,
        partitions: int,
        keep: int,
        backend: str,
        on_written: Callable[[SnapshotManifest], None] | None = None,
        commit_wait_s: float = 120.0,
        homes: Callable[[], dict[int, str]] | None = None,
    ) -> None:
        self.spark = spark
        # PU -> its home executor's location: a PU's write task runs where its copy is
        self.homes = homes
        self.pipeline = pipeline
        self.pipeline_dir = Path(pipeline_dir)
        self.location = location
        self.every = every
        self.partitions = partitions
        self.keep = max(keep, 1)
        self.backend = backend
        self.on_written = on_written
        self.commit_wait_s = commit_wait_s
        self._requests: list[str] = []  # who asked for a snapshot now
        # a rescale ran since the last snapshot: with periodic snapshots on, one is taken as
        # soon as it settles, so that a lost store is rebuilt from its new placement (a rebuild
        # cannot re-run a rescale's steps) without waiting out the interval
        self._rescaled = False
        self._lock = threading.Lock()
        self._writer: threading.Thread | None = None
        self._last_epoch: int | None = None
        self._last_time = time.monotonic()
        self.last_error: str | None = None
        self.written: list[SnapshotManifest] = []
        self._query_stopped = threading.Event()
        self._query_stopped_at = 0.0
        self._writing_epoch: int | None = None
        # the newest complete snapshot's epoch: a lost store is rebuilt from it
        ids = location.snapshot_ids(pipeline)
        self.latest_epoch: int | None = location.manifest(pipeline, ids[-1]).epoch if ids else None

    def request(self, requested_by: str) -> None:
        """Snapshot now: at the next barrier where none is in flight."""
        with self._lock:
            self._requests.append(requested_by or "unknown")

    def replay_from(self) -> int | None:
        """The first epoch a rebuild of a lost store would re-run (the one after the newest
        snapshot, or after the one being written when none is complete): the stores keep their
        outputs from it on. None when there is no snapshot to rebuild from."""
        base = self.latest_epoch if self.latest_epoch is not None else self._writing_epoch
        return None if base is None else base + 1

    @property
    def in_flight(self) -> bool:
        return self._writer is not None and self._writer.is_alive()

    def due(self, epoch: int, *, busy: bool, last: bool = False) -> Pending | None:
        """At the barrier: whether this epoch's tasks copy their stores. Never while one is
        still being written, nor while a live operation has vnodes in transit, nor at the
        runner's ``last`` epoch (it stops after it, and Spark may not log that epoch's commit
        before the query stops: the snapshot could not be finished). With periodic snapshots
        on, the first barrier after a rescale settled takes one too (trigger ``rescale``)."""
        if busy:
            self._rescaled = self.every.enabled
        if busy or last or self.in_flight:
            return None
        with self._lock:
            manual = self._requests[:1]
        if manual:
            trigger, by = "manual", manual[0]
        elif self._periodic_due(epoch):
            trigger, by = "periodic", "rescaler"
        elif self._rescaled:
            trigger, by = "rescale", "rescaler"
        else:
            return None
        self._rescaled = False
        now = time.time()
        return Pending(snapshot_id(now, epoch), epoch, now, trigger, by, {})

    def _periodic_due(self, epoch: int) -> bool:
        if self.every.epochs is not None:
            return self._last_epoch is None or epoch - self._last_epoch >= self.every.epochs
        if self.every.seconds is not None:
            return time.monotonic() - self._last_time >= self.every.seconds
        return False

    def epoch_committed(self, pending: Pending, placements: dict[str, VnodeMapping]) -> None:
        """The epoch whose stores were copied is done: write the snapshot beside the stream."""
        with self._lock:
            if pending.trigger == "manual" and self._requests:
                self._requests.pop(0)
        self._last_epoch, self._last_time = pending.epoch, time.monotonic()
        self._writing_epoch = pending.epoch
        pending = replace(pending, placements=dict(placements))
        self._writer = threading.Thread(
            target=self._write_logged, args=(pending,), name="snapshot-writer", daemon=True
        )
        self._writer.start()

    def query_stopped(self) -> None:
        """The streaming query has stopped: a snapshot still waiting for its epoch's commit
        gives up (it is dropped, whole) instead of waiting out ``commit_wait_s``."""
        self._query_stopped_at = time.monotonic()
        self._query_stopped.set()

    def wait(self, timeout: float | None = None) -> None:
        """Until the snapshot being written (if any) is done (tests, a clean stop)."""
        writer = self._writer
        if writer is not None:
            writer.join(timeout)

    def _write_logged(self, pending: Pending) -> None:
        try:
            manifest = self.write(pending)
        except Exception as exc:  # the stream goes on; the next due epoch tries again
            self.last_error = f"snapshot {pending.snapshot_id}: {exc}"
            log.exception("snapshot %s failed", pending.snapshot_id)
            # what it wrote is no snapshot (no manifest): leave nothing behind
            self._drop_copies(pending)
            try:
                self.location.delete_snapshot(self.pipeline, pending.snapshot_id)
            except OSError:
                log.warning("could not delete the partial snapshot %s", pending.snapshot_id)
            return
        self.last_error = None
        self.latest_epoch = manifest.epoch
        self.written.append(manifest)
        if self.on_written is not None:
            try:
                self.on_written(manifest)
            except Exception:  # reporting must not lose a written snapshot
                log.exception("reporting snapshot %s failed", manifest.snapshot_id)

    def _drop_copies(self, pending: Pending) -> None:
        """The PUs' staged copies of a failed snapshot, removed on their executors."""
        pus = sorted({pu for p in pending.placements.values() for pu in p.parallel_units})
        homes = self.homes() if self.homes is not None else {}
        drop_copies(self.spark, self.pipeline_dir, pus, homes, pending.snapshot_id)

    def write(self, pending: Pending) -> SnapshotManifest:
        """The write job, then the manifest; returns it."""
        by_pu: dict[int, list[str]] = {}
        for name, placement in sorted(pending.placements.items()):
            for pu in placement.parallel_units:
                by_pu.setdefault(pu, []).append(name)  # its task finds the copy on its executor
        runs, segments = snapshot_stores(
            self.spark,
            location=self.location,
            pipeline=self.pipeline,
            snapshot=pending.snapshot_id,
            partitions=self.partitions,
            backend=self.backend,
            stores=by_pu,
            state_root=self.pipeline_dir,
            homes=self.homes() if self.homes is not None else None,
        )
        checkpoint = self._checkpoint_files(pending.epoch)
        files = {
            name: (self.pipeline_dir / name).read_text("utf-8")
            for name in CARRIED_FILES
            if (self.pipeline_dir / name).exists()
        }
        manifest = SnapshotManifest(
            snapshot_id=pending.snapshot_id,
            pipeline=self.pipeline,
            epoch=pending.epoch,
            partitions=self.partitions,
            backend=self.backend,
            taken_at=pending.taken_at,
            duration_s=round(time.time() - pending.taken_at, 3),
            trigger=pending.trigger,
            requested_by=pending.requested_by,
            source_offset=_source_offset(checkpoint["offsets"]),
            checkpoint=checkpoint,
            files=files,
            fragments={
                name: FragmentSnapshot.of(placement, segments)
                for name, placement in sorted(pending.placements.items())
            },
            tasks=runs,
        )
        self.location.commit(manifest)
        pruned = self.location.prune(self.pipeline, self.keep)
        log.info(
            "snapshot %s of epoch %d: %d keys, %d bytes, %d PU tasks on %s, %.2fs%s",
            manifest.snapshot_id,
            manifest.epoch,
            manifest.keys,
            manifest.bytes,
            len(runs),
            ", ".join(sorted({r.executor for r in runs})),
            manifest.duration_s,
            f"; pruned {', '.join(pruned)}" if pruned else "",
        )
        return manifest

    def _checkpoint_files(self, epoch: int) -> dict[str, str]:
        """Spark's metadata, offset and commit entries of ``epoch``: the commit is written after
        the epoch's foreachBatch returns, so it is waited for."""
        checkpoint = self.pipeline_dir / "checkpoint"
        commit = checkpoint / "commits" / str(epoch)
        deadline = time.monotonic() + self.commit_wait_s
        while not commit.exists():
            if self._query_stopped.is_set():  # the query is gone: no commit will come now
                deadline = min(deadline, self._query_stopped_at + 2.0)
            if time.monotonic() > deadline:
                raise SnapshotError(f"Spark did not commit epoch {epoch}: the snapshot is dropped")
            time.sleep(0.05)
        files = {
            "metadata": (checkpoint / "metadata").read_text("utf-8"),
            "offsets": (checkpoint / "offsets" / str(epoch)).read_text("utf-8"),
            "commits": commit.read_text("utf-8"),
        }
        # a restart reads the entry before the last one too (the offsets it resumes from are
        # the last, the ones already committed before it the previous)
        previous = checkpoint / "offsets" / str(epoch - 1)
        if epoch > 0:
            files["previous_offsets"] = previous.read_text("utf-8")
        return files


def _source_offset(offsets: str) -> dict[str, Any]:
    """The pipeline source's offset from an offset-log entry (version, metadata, sources...)."""
    lines = offsets.splitlines()
    try:
        parsed: dict[str, Any] = json.loads(lines[2])
        return parsed
    except (IndexError, ValueError):
        return {}
