"""Restores and rebuilds of lost stores, the control plane's half (docs/recovery.md).

The runner restores a state directory from a snapshot (``workers.recovery.restore``) and rebuilds
lost PU stores (``workers.recovery.rebuild``); the control plane learns of each from what the
runner leaves in ``STATE_DIR/<pipeline>/``, and audits it once:

* ``snapshot.restored`` (the ``restored_by`` of the restore) once per restore, when the control
  plane learns of it from ``restored.json``: when the runner registers after the restore, or
  when a page or client lists the pipeline's snapshots (a restore run without the control
  plane, ``python -m workers run --restore-from``, is recorded then);
* ``store.rebuilt`` (actor ``runner``) once per rebuild of lost PU stores, learned the same way
  from ``rebuilt.json`` (once per its ``started_at``, as a restore is per ``restored_at``).

Both have object type ``pipeline`` and the pipeline's name as object id. When the state
directory is not shared with this process, the last restore and rebuild are the audit's. A
restore under way is read from ``restore-pending.json`` and ``restore-progress/``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction

from rescaler.audit.models import AuditEvent
from rescaler.audit.services import audit_record
from rescaler.cluster.models import Pipeline
from rescaler.cluster.snapshot_records import (
    AUDIT_OBJECT,
    REBUILT,
    RESTORED,
    RebuildRecord,
    RestoreProgressRecord,
    RestoreRecord,
    RestoreTaskProgress,
)
from workers.recovery.format import SnapshotError
from workers.recovery.location import RecoveryLocation
from workers.recovery.rebuild import REBUILT as REBUILT_FILE
from workers.recovery.restore import RESTORE_PENDING as RESTORE_PENDING_FILE
from workers.recovery.restore import RESTORE_PROGRESS
from workers.storage import location as storage_location

log = logging.getLogger(__name__)

RESTORED_FILE = "restored.json"  # written by workers.recovery.restore.finish_restore


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
            "tasks": [t.to_json() for t in record.tasks],
        },
    )


def last_restore(*, pipeline: str) -> RestoreRecord | None:
    """The pipeline's last restore: its ``restored.json``, else (the state directory is not
    shared with this process) the last one the audit recorded."""
    record: RestoreRecord | None = _last_record(
        pipeline, RESTORED_FILE, RESTORED, RestoreRecord.from_json
    )
    return record


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
    *, pipeline: str, location: RecoveryLocation, state_dir: Path | None = None
) -> RestoreProgressRecord | None:
    """A ``--restore-from`` under way in the pipeline's state directory: the snapshot, and each
    task's keys so far (of the snapshot's keys, from its manifest at ``location``); None when no
    restore is under way."""
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
    # the tasks write it where the runner said, in the pipeline's durable location
    progress = storage_location(str(pending.get("progress_at") or root))
    try:
        names = [n for n in progress.files(RESTORE_PROGRESS) if n.endswith(".json")]
    except OSError as exc:
        log.warning("cannot list %s: %s", progress.uri_of(RESTORE_PROGRESS), exc)
        names = []
    for name in sorted(names):
        try:
            t = json.loads(progress.read_bytes(name) or b"")
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
        total = location.manifest(pipeline, snapshot_id).keys
    except (OSError, SnapshotError, KeyError, TypeError, ValueError):
        pass  # the tasks' own totals, as far as they have started
    return RestoreProgressRecord(
        snapshot_id=snapshot_id,
        keys=sum(t.keys for t in tasks),
        keys_total=total,
        tasks=tuple(sorted(tasks, key=lambda t: t.parallel_unit)),
    )
