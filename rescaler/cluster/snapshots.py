"""Snapshots, the control plane's half (docs/recovery.md, docs/api.md).

The runner takes snapshots (``workers.recovery``); the control plane lists what is in the
recovery location, asks the runner for a snapshot ("Snapshot now": the ``snapshot`` runner
command), and audits who asked for each one: ``snapshot.requested`` (the operator), object type
``pipeline`` and the pipeline's name as object id. The overview a page or client lists also
shows the last restore and rebuild of lost stores, and learns of them
(``rescaler.cluster.restores``); the records are ``rescaler.cluster.snapshot_records``.

The recovery location is computed as the runner computes it (``RunnerConfig.recovery_location``:
RESCALER_RECOVERY_DIR, else ``recovery`` beside STATE_DIR), and STATE_DIR is shared with the
runner, as for key reads.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings
from django.db import transaction

from rescaler.audit.models import AuditEvent
from rescaler.cluster.models import Pipeline, RunnerCommand
from rescaler.cluster.reasons import clean_reason
from rescaler.cluster.restores import (
    last_rebuild,
    last_restore,
    rebuild_learn,
    restore_learn,
    restore_progress,
)
from rescaler.cluster.selectors import runner_alive
from rescaler.cluster.services import command_submit
from rescaler.cluster.snapshot_records import (
    AUDIT_OBJECT,
    REQUESTED,
    SnapshotOverview,
    SnapshotRecord,
    SnapshotRequestRecord,
)
from workers.config import RunnerConfig
from workers.recovery.format import SnapshotError
from workers.recovery.location import RecoveryLocation
from workers.rescale import errors
from workers.rescale.protocol import CommandKind

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
