"""What the control plane knows of snapshots, restores and rebuilds of lost stores, as records
(docs/recovery.md), and the audit's names for them.

Each record is read from what the runner leaves (a snapshot's manifest, ``restored.json``,
``rebuilt.json``, ``restore-progress/``) or from the audit event that kept it (``from_json``
reads both spellings). ``rescaler.cluster.snapshots`` lists and asks for snapshots,
``rescaler.cluster.restores`` learns of restores and rebuilds.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from rescaler.percent import whole_percent
from workers.recovery.format import SnapshotManifest

# the audit's object type of snapshot events: the object is the pipeline, by name
AUDIT_OBJECT = "pipeline"
REQUESTED = "snapshot.requested"
RESTORED = "snapshot.restored"
REBUILT = "store.rebuilt"  # learned from rebuilt.json, written by workers.recovery.rebuild


@dataclass(frozen=True)
class SnapshotRecord:
    """One complete snapshot, as its manifest describes it (``SnapshotManifest.summary``)."""

    snapshot_id: str
    epoch: int
    taken_at: dt.datetime
    age_s: float
    duration_s: float
    trigger: str  # periodic, rescale, manual, stop-start
    requested_by: str
    partitions: int
    keys: int
    bytes: int
    fragments: tuple[str, ...]
    executors: tuple[str, ...]

    @classmethod
    def of(cls, manifest: SnapshotManifest, now: float) -> SnapshotRecord:
        summary = manifest.summary()
        return cls(
            snapshot_id=summary["snapshot_id"],
            epoch=summary["epoch"],
            taken_at=dt.datetime.fromtimestamp(summary["taken_at"], dt.UTC),
            age_s=max(now - summary["taken_at"], 0.0),
            duration_s=summary["duration_s"],
            trigger=summary["trigger"],
            requested_by=summary["requested_by"],
            partitions=summary["partitions"],
            keys=summary["keys"],
            bytes=summary["bytes"],
            fragments=tuple(summary["fragments"]),
            executors=tuple(summary["executors"]),
        )


@dataclass(frozen=True)
class RestoreTaskRecord:
    """One restore task: the target PU it filled, where it ran, what it read."""

    parallel_unit: int
    executor: str
    host: str
    keys: int
    bytes: int
    seconds: float

    @classmethod
    def from_json(cls, t: dict[str, Any]) -> RestoreTaskRecord:
        """A restore task as the runner writes it (``pu``) or as the audit keeps it."""
        return cls(
            parallel_unit=int(t.get("pu", t.get("parallel_unit", -1))),
            executor=str(t.get("executor", "")),
            host=str(t.get("host", "")),
            keys=int(t.get("keys", 0)),
            bytes=int(t.get("bytes", 0)),
            seconds=float(t.get("seconds", 0.0)),
        )

    def to_json(self) -> dict[str, Any]:
        """What the audit keeps (``from_json`` reads it back)."""
        return {
            "parallel_unit": self.parallel_unit,
            "executor": self.executor,
            "host": self.host,
            "keys": self.keys,
            "bytes": self.bytes,
            "seconds": self.seconds,
        }


@dataclass(frozen=True)
class RestoreRecord:
    """The last restore of a pipeline's state directory (``restored.json``)."""

    snapshot_id: str
    epoch: int
    restored_at: dt.datetime
    restored_by: str
    parallel_units: tuple[int, ...]
    keys: int
    bytes: int
    tasks: tuple[RestoreTaskRecord, ...]

    @property
    def seconds(self) -> float:
        """The slowest task's time: the tasks run side by side, one per target PU."""
        return max((t.seconds for t in self.tasks), default=0.0)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RestoreRecord:
        """``restored.json`` as the runner writes it (``pus``, ``pu``) or as the audit keeps it."""
        return cls(
            snapshot_id=str(data["snapshot_id"]),
            epoch=int(data["epoch"]),
            restored_at=dt.datetime.fromtimestamp(float(data["restored_at"]), dt.UTC),
            restored_by=str(data.get("restored_by") or "unknown"),
            parallel_units=tuple(int(p) for p in data.get("pus", data.get("parallel_units", ()))),
            keys=int(data.get("keys", 0)),
            bytes=int(data.get("bytes", 0)),
            tasks=tuple(RestoreTaskRecord.from_json(t) for t in data.get("tasks", ())),
        )


@dataclass(frozen=True)
class LostStoreRecord:
    """A store the runner's check found unusable, and why."""

    fragment: str
    parallel_unit: int
    status: str  # missing, corrupt, behind
    detail: str


@dataclass(frozen=True)
class RebuildRecord:
    """The last rebuild of lost stores in a pipeline's state directory (``rebuilt.json``)."""

    snapshot_id: str
    snapshot_epoch: int
    epoch: int  # the epoch the stores were brought back to
    rebuilt_at: dt.datetime
    rerun_epochs: tuple[int, ...]
    lost: tuple[LostStoreRecord, ...]
    keys: int
    seconds: float
    tasks: tuple[RestoreTaskRecord, ...]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RebuildRecord:
        """``rebuilt.json`` as the runner writes it, or as the audit keeps it."""
        return cls(
            snapshot_id=str(data["snapshot_id"]),
            snapshot_epoch=int(data["snapshot_epoch"]),
            epoch=int(data["epoch"]),
            rebuilt_at=dt.datetime.fromtimestamp(float(data["started_at"]), dt.UTC),
            rerun_epochs=tuple(int(e) for e in data.get("rerun_epochs", ())),
            lost=tuple(
                LostStoreRecord(
                    fragment=str(s["fragment"]),
                    parallel_unit=int(s.get("pu", s.get("parallel_unit", -1))),
                    status=str(s["status"]),
                    detail=str(s.get("detail", "")),
                )
                for s in data.get("lost", ())
            ),
            keys=int(data.get("keys", 0)),
            seconds=float(data.get("duration_s", data.get("seconds", 0.0))),
            tasks=tuple(RestoreTaskRecord.from_json(t) for t in data.get("tasks", ())),
        )

    def to_json(self) -> dict[str, Any]:
        """What the audit keeps (``from_json`` reads it back)."""
        return {
            "snapshot_id": self.snapshot_id,
            "snapshot_epoch": self.snapshot_epoch,
            "epoch": self.epoch,
            "started_at": self.rebuilt_at.timestamp(),
            "rerun_epochs": list(self.rerun_epochs),
            "lost": [
                {
                    "fragment": s.fragment,
                    "pu": s.parallel_unit,
                    "status": s.status,
                    "detail": s.detail,
                }
                for s in self.lost
            ],
            "keys": self.keys,
            "duration_s": self.seconds,
            "tasks": [t.to_json() for t in self.tasks],
        }


@dataclass(frozen=True)
class RestoreTaskProgress:
    parallel_unit: int
    executor: str
    host: str
    keys: int
    keys_total: int
    done: bool


@dataclass(frozen=True)
class RestoreProgressRecord:
    """A ``--restore-from`` under way: each task's keys so far (``restore-progress/``)."""

    snapshot_id: str
    keys: int
    keys_total: int  # the snapshot's keys
    tasks: tuple[RestoreTaskProgress, ...]

    @property
    def percent(self) -> int:
        """The keys restored, in percent (``rescaler.percent.whole_percent``); 0 of none."""
        return whole_percent(self.keys / self.keys_total if self.keys_total else None) or 0


@dataclass(frozen=True)
class SnapshotRequestRecord:
    """A "Snapshot now" and what became of its runner command."""

    at: dt.datetime
    requested_by: str
    reason: str
    command: int | None
    status: str  # the command's: pending, done, failed ("" if it is gone)
    detail: str


@dataclass(frozen=True)
class SnapshotOverview:
    """A pipeline's snapshots (newest first), its last restore and last rebuild of lost stores,
    a restore under way, and the recent requests."""

    pipeline: str
    location: str  # without credentials or query
    runner_alive: bool
    snapshots: tuple[SnapshotRecord, ...]
    last_restore: RestoreRecord | None
    requests: tuple[SnapshotRequestRecord, ...]
    restoring: RestoreProgressRecord | None = None
    last_rebuild: RebuildRecord | None = None
    # the location could not be listed, or some manifests not read: why (the rest is shown)
    problems: tuple[str, ...] = ()
