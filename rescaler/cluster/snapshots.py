"""Snapshots and restores, the control plane's half (docs/recovery.md, docs/api.md).

The runner takes snapshots and restores (``workers.recovery``); the control plane lists what is
in the recovery location, asks the runner for a snapshot ("Snapshot now": the ``snapshot``
runner command), and audits who took and who restored each one:

* ``snapshot.requested`` (the operator) when one is asked for;
* ``snapshot.restored`` (the ``restored_by`` of the restore) once per restore, when the control
  plane learns of it from ``STATE_DIR/<pipeline>/restored.json``: when the runner registers after
  the restore, or when a page or client lists the pipeline's snapshots (a restore run without
  the control plane, ``python -m workers run --restore-from``, is recorded then);
* ``store.rebuilt`` (actor ``runner``) once per rebuild of lost PU stores, learned the same way
  from ``rebuilt.json`` (once per its ``started_at``, as a restore is per ``restored_at``).

All have object type ``pipeline`` and the pipeline's name as object id. The recovery location
is computed as the runner computes it (``RunnerConfig.recovery_location``: RESCALER_RECOVERY_DIR,
else ``recovery`` beside STATE_DIR), and STATE_DIR is shared with the runner, as for key reads.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings
from django.db import transaction

from rescaler.audit.models import AuditEvent
from rescaler.audit.services import audit_record
from rescaler.cluster.models import Pipeline, RunnerCommand
from rescaler.cluster.reasons import clean_reason
from rescaler.cluster.selectors import runner_alive
from rescaler.cluster.services import command_submit
from rescaler.percent import whole_percent
from workers.config import RunnerConfig
from workers.recovery.format import SnapshotError, SnapshotManifest
from workers.recovery.location import RecoveryLocation
from workers.recovery.rebuild import REBUILT as REBUILT_FILE
from workers.recovery.restore import RESTORE_PENDING as RESTORE_PENDING_FILE
from workers.recovery.restore import RESTORE_PROGRESS
from workers.rescale import errors
from workers.rescale.protocol import CommandKind

log = logging.getLogger(__name__)

# the audit's object type of snapshot events: the object is the pipeline, by name
AUDIT_OBJECT = "pipeline"
REQUESTED = "snapshot.requested"
RESTORED = "snapshot.restored"
RESTORED_FILE = "restored.json"  # written by workers.recovery.restore.finish_restore
REBUILT = "store.rebuilt"  # learned from REBUILT_FILE, written by workers.recovery.rebuild
# the recent requests a listing shows, newest first
RECENT_REQUESTS = 10


class SnapshotRefused(errors.RescaleError):
    """Base of the refusals of snapshot requests (a 4xx at the API, with the reason)."""

    code = "snapshot_refused"


class UnknownPipeline(SnapshotRefused):
    code = "unknown_pipeline"


class RunnerDown(SnapshotRefused):
    """Only a running runner takes a snapshot (at its next barrier)."""

    code = "runner_down"


class ReasonRequired(SnapshotRefused):
    code = "reason_required"


# -- records -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SnapshotRecord:
    """One complete snapshot, as its manifest describes it (``SnapshotManifest.summary``)."""

    snapshot_id: str
    epoch: int
    taken_at: dt.datetime
    age_s: float
    duration_s: float
    trigger: str  # periodic, manual, stop-start
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
            tasks=tuple(_task_record(t) for t in data.get("tasks", ())),
        )


def _task_record(t: dict[str, Any]) -> RestoreTaskRecord:
    """A restore task as the runner writes it (``pu``) or as the audit keeps it."""
    return RestoreTaskRecord(
        parallel_unit=int(t.get("pu", t.get("parallel_unit", -1))),
        executor=str(t.get("executor", "")),
        host=str(t.get("host", "")),
        keys=int(t.get("keys", 0)),
        bytes=int(t.get("bytes", 0)),
        seconds=float(t.get("seconds", 0.0)),
    )


def _task_json(t: RestoreTaskRecord) -> dict[str, Any]:
    return {
        "parallel_unit": t.parallel_unit,
        "executor": t.executor,
        "host": t.host,
        "keys": t.keys,
        "bytes": t.bytes,
        "seconds": t.seconds,
    }


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
            tasks=tuple(_task_record(t) for t in data.get("tasks", ())),
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
            "tasks": [_task_json(t) for t in self.tasks],
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


# -- where ---------------------------------------------------------------------------------------
def recovery_location() -> RecoveryLocation:
    """The runner's recovery location: the same computation (``RunnerConfig``), from the same
    variables (RESCALER_RECOVERY_DIR, STATE_DIR)."""
    config = RunnerConfig(
        state_dir=Path(settings.STATE_DIR), recovery_dir=settings.RESCALER_RECOVERY_DIR
    )
    return RecoveryLocation(config.recovery_location)


def location_shown(uri: str) -> str:
    """A location as a page may show it: a URI loses its user info and query (``pyarrow.fs``
    takes credentials in either)."""
    if "://" not in uri:
        return uri
    parts = urlsplit(uri)
    return urlunsplit((parts.scheme, parts.hostname or "", parts.path, "", ""))


def _pipeline(name: str) -> Pipeline:
    try:
        return Pipeline.objects.get(name=name)
    except Pipeline.DoesNotExist:
        raise UnknownPipeline(f"no pipeline named {name!r} has registered") from None


# -- reading -------------------------------------------------------------------------------------
def snapshot_list(
    *, pipeline: str, location: RecoveryLocation | None = None
) -> tuple[list[SnapshotRecord], list[str]]:
    """The complete snapshots of ``pipeline``, newest first, and the problems met: a manifest
    that cannot be read is left out and named, an unreadable location lists nothing."""
    location = location or recovery_location()
    now = time.time()
    try:
        ids = location.snapshot_ids(pipeline)
    except (OSError, SnapshotError) as exc:
        return [], [f"the recovery location {location_shown(location.uri)} cannot be listed: {exc}"]
    records: list[SnapshotRecord] = []
    problems: list[str] = []
    for snapshot_id in reversed(ids):
        try:
            records.append(SnapshotRecord.of(location.manifest(pipeline, snapshot_id), now))
        except (OSError, SnapshotError, KeyError, TypeError, ValueError) as exc:
            problems.append(f"snapshot {snapshot_id}: its manifest cannot be read: {exc}")
    return records, problems


def _state_record(
    pipeline: str, state_dir: Path | None, name: str, parse: Any
) -> dict[str, Any] | None:
    """``<state_dir>/<pipeline>/<name>`` (default STATE_DIR) as the runner wrote it, if
    ``parse`` finds every field it needs; None when there is none or it cannot be read (logged:
    a half-written file is the runner's, not a refusal)."""
    path = Path(state_dir or settings.STATE_DIR) / pipeline / name
    try:
        data = json.loads(path.read_text("utf-8"))
        parse(data)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("cannot read %s: %s", path, exc)
        return None
    return data if isinstance(data, dict) else None


def _last_event(action: str, pipeline: str) -> AuditEvent | None:
    return (
        AuditEvent.objects.filter(action=action, object_type=AUDIT_OBJECT, object_id=pipeline)
        .order_by("-id")
        .first()
    )


def _learn_once(
    *, pipeline: str, action: str, stamp: str, data: dict[str, Any], actor_name: str, after: Any
) -> AuditEvent | None:
    """Record ``action`` for what the runner left, once: only when its ``stamp`` is newer than
    the last one recorded. ``after(name)`` builds the event's ``after`` for the pipeline."""
    with transaction.atomic():
        # the pipeline's row serializes two registrations (or a listing) learning at once
        target = Pipeline.objects.locked().filter(name=pipeline).first()
        if target is None:
            return None
        last = _last_event(action, target.name)
        if last is not None and float((last.after or {}).get(stamp, 0)) >= float(data[stamp]):
            return None
        return audit_record(
            actor_name=actor_name,
            action=action,
            obj=(AUDIT_OBJECT, target.name),
            # the runner's own stamp (a datetime's round trip could move it a microsecond)
            after={"pipeline": target.name, **after, stamp: float(data[stamp])},
        )


def _last_record(pipeline: str, name: str, action: str, parse: Any) -> Any:
    """The runner's record of ``name``, else (the state directory is not shared with this
    process) the last one the audit recorded as ``action``."""
    data = _state_record(pipeline, None, name, parse)
    if data is not None:
        return parse(data)
    event = _last_event(action, pipeline)
    if event is None or not isinstance(event.after, dict):
        return None
    try:
        return parse(event.after)
    except (KeyError, TypeError, ValueError):
        return None


def restore_read(*, pipeline: str, state_dir: Path | None = None) -> dict[str, Any] | None:
    """``<state_dir>/<pipeline>/restored.json`` as the runner wrote it, or None."""
    return _state_record(pipeline, state_dir, RESTORED_FILE, RestoreRecord.from_json)


def restore_learn(*, pipeline: str, state_dir: Path | None = None) -> AuditEvent | None:
    """Record ``snapshot.restored`` for the pipeline's last restore, once: only when its
    ``restored.json`` is newer than the last restore recorded. Safe to call at every
    registration and every listing. Returns the event recorded, if one was."""
    data = restore_read(pipeline=pipeline, state_dir=state_dir)
    if data is None:
        return None
    record = RestoreRecord.from_json(data)
    return _learn_once(
        pipeline=pipeline,
        action=RESTORED,
        stamp="restored_at",
        data=data,
        actor_name=record.restored_by[:150],
        after={
            "snapshot_id": record.snapshot_id,
            "epoch": record.epoch,
            "restored_by": record.restored_by,
            "parallel_units": list(record.parallel_units),
            "keys": record.keys,
            "bytes": record.bytes,
            "seconds": record.seconds,
            "tasks": [_task_json(t) for t in record.tasks],
        },
    )


def rebuild_read(*, pipeline: str, state_dir: Path | None = None) -> dict[str, Any] | None:
    """``<state_dir>/<pipeline>/rebuilt.json`` as the runner wrote it, or None."""
    return _state_record(pipeline, state_dir, REBUILT_FILE, RebuildRecord.from_json)


def rebuild_learn(*, pipeline: str, state_dir: Path | None = None) -> AuditEvent | None:
    """Record ``store.rebuilt`` for the pipeline's last rebuild of lost stores, once (as
    ``restore_learn`` does for restores). Returns the event recorded, if one was."""
    data = rebuild_read(pipeline=pipeline, state_dir=state_dir)
    if data is None:
        return None
    return _learn_once(
        pipeline=pipeline,
        action=REBUILT,
        stamp="started_at",
        data=data,
        actor_name="runner",
        after=RebuildRecord.from_json(data).to_json(),
    )


def last_rebuild(*, pipeline: str) -> RebuildRecord | None:
    """The pipeline's last rebuild: its ``rebuilt.json``, else the last one the audit recorded."""
    record: RebuildRecord | None = _last_record(
        pipeline, REBUILT_FILE, REBUILT, RebuildRecord.from_json
    )
    return record


def restore_progress(
    *, pipeline: str, location: RecoveryLocation | None = None, state_dir: Path | None = None
) -> RestoreProgressRecord | None:
    """A ``--restore-from`` under way in the pipeline's state directory: the snapshot, and each
    task's keys so far; None when no restore is under way."""
    root = Path(state_dir or settings.STATE_DIR) / pipeline
    try:
        pending = json.loads((root / RESTORE_PENDING_FILE).read_text("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("cannot read %s: %s", root / RESTORE_PENDING_FILE, exc)
        return None
    snapshot_id = str(pending.get("snapshot_id", ""))
    tasks = []
    for path in sorted((root / RESTORE_PROGRESS).glob("pu-*.json")):
        try:
            t = json.loads(path.read_text("utf-8"))
            tasks.append(
                RestoreTaskProgress(
                    parallel_unit=int(t["pu"]),
                    executor=str(t.get("executor", "")),
                    host=str(t.get("host", "")),
                    keys=int(t.get("keys", 0)),
                    keys_total=int(t.get("keys_total", 0)),
                    done=bool(t.get("done", False)),
                )
            )
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a task's file being replaced: the next read has it
    total = sum(t.keys_total for t in tasks)
    try:
        total = (location or recovery_location()).manifest(pipeline, snapshot_id).keys
    except (OSError, SnapshotError, KeyError, TypeError, ValueError):
        pass  # the tasks' own totals, as far as they have started
    return RestoreProgressRecord(
        snapshot_id=snapshot_id,
        keys=sum(t.keys for t in tasks),
        keys_total=total,
        tasks=tuple(sorted(tasks, key=lambda t: t.parallel_unit)),
    )


def last_restore(*, pipeline: str) -> RestoreRecord | None:
    """The pipeline's last restore: its ``restored.json``, else (the state directory is not
    shared with this process) the last one the audit recorded."""
    record: RestoreRecord | None = _last_record(
        pipeline, RESTORED_FILE, RESTORED, RestoreRecord.from_json
    )
    return record


def snapshot_requests(
    *, pipeline: str, limit: int = RECENT_REQUESTS
) -> list[SnapshotRequestRecord]:
    """The pipeline's recent "Snapshot now" requests, newest first, with their commands' fate."""
    events = list(
        AuditEvent.objects.filter(
            action=REQUESTED, object_type=AUDIT_OBJECT, object_id=pipeline
        ).order_by("-id")[:limit]
    )
    ids = [e.after.get("command") for e in events if isinstance(e.after, dict)]
    commands: dict[int, dict[str, Any]] = {
        c["id"]: dict(c)
        for c in RunnerCommand.objects.filter(id__in=[i for i in ids if isinstance(i, int)]).values(
            "id", "status", "detail"
        )
    }
    records = []
    for event in events:
        after = event.after if isinstance(event.after, dict) else {}
        command = after.get("command") if isinstance(after.get("command"), int) else None
        row: dict[str, Any] = commands.get(command, {}) if command is not None else {}
        records.append(
            SnapshotRequestRecord(
                at=event.at,
                requested_by=event.actor_name,
                reason=str(after.get("reason", "")),
                command=command,
                status=str(row.get("status", "")),
                detail=str(row.get("detail", "")),
            )
        )
    return records


def snapshot_overview(*, pipeline: str) -> SnapshotOverview:
    """Everything the snapshots page and ``GET pipelines/<name>/snapshots`` show. Learns of a
    restore or a rebuild it has not recorded yet (``restore_learn``, ``rebuild_learn``)."""
    target = _pipeline(pipeline)
    location = recovery_location()
    restore_learn(pipeline=target.name)
    rebuild_learn(pipeline=target.name)
    snapshots, problems = snapshot_list(pipeline=target.name, location=location)
    return SnapshotOverview(
        pipeline=target.name,
        location=location_shown(location.uri),
        runner_alive=runner_alive(target),
        snapshots=tuple(snapshots),
        last_restore=last_restore(pipeline=target.name),
        requests=tuple(snapshot_requests(pipeline=target.name)),
        problems=tuple(problems),
        restoring=restore_progress(pipeline=target.name, location=location),
        last_rebuild=last_rebuild(pipeline=target.name),
    )


# -- asking --------------------------------------------------------------------------------------
def reason_clean(reason: Any) -> str:
    """The operator's reason: required (it goes to the audit trail), by the rule of every
    reason (at most REASON_MAX_CHARS characters, no control characters)."""
    cleaned = clean_reason(reason)
    if not cleaned:
        raise ReasonRequired("a reason is required: say why (it goes to the audit trail)")
    return cleaned


@transaction.atomic
def snapshot_request(*, user: Any, pipeline: str, reason: str) -> RunnerCommand:
    """Snapshot now: queue the ``snapshot`` command for the pipeline's runner (taken at its
    next barrier where no snapshot is being written and no vnode is in transit) and audit
    ``snapshot.requested``. Refused when the runner is down: nobody would take it."""
    reason = reason_clean(reason)
    try:
        target = Pipeline.objects.locked().get(name=pipeline)
    except Pipeline.DoesNotExist:
        raise UnknownPipeline(f"no pipeline named {pipeline!r} has registered") from None
    if not runner_alive(target):
        beat = (
            f"its last heartbeat was at {target.heartbeat_at:%Y-%m-%d %H:%M:%S} UTC"
            if target.heartbeat_at
            else "it has sent no heartbeat"
        )
        raise RunnerDown(
            f"the runner of {target.name!r} is not running ({target.status}; {beat}): a "
            f"snapshot is taken by the running runner at a barrier; start it and ask again"
        )
    name = user.get_username() if user is not None and user.is_authenticated else "unknown"
    # the command's audit event is the request: one event, with the reason and the command's id
    command = command_submit(
        pipeline=target,
        kind=CommandKind.SNAPSHOT,
        payload={"requested_by": name},
        user=user,
        obj=(AUDIT_OBJECT, target.name),
        action=REQUESTED,
        after={"pipeline": target.name, "reason": reason},
    )
    return command
