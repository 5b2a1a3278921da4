"""Progress from the runner: recorded on the operation and its steps, audited, published.

Called in the runner process through ``rescaler.runner.control.OrmControl``; the drive loop reads
what this records (``operation_progress``).

Each fact is stored once: the report without its steps on the operation (``progress``, and the
counters in their columns), each step in its ``RescaleStep`` row. The runner reports only the
steps that changed since the report the control plane acknowledged (``workers.rescale.reports``):
only those rows are read and, where their figures changed, written (one UPDATE), so a barrier
costs the same few queries whatever the number of steps. The stored report keeps the runner's
``session`` and ``version``: a delta on a report not held (a gap) is refused with a request for
a full report, which the runner sends at once (``ProgressAck``).

Each report also moves the operation's ``progress_version`` one on, and what changed (its
columns, the changed step rows, the appended audit events) goes to the apps above through
``signals.operation_progressed``: the dashboard publishes it as the operation's delta event
(docs/api.md, "Websocket events"). The cluster group gets the report without its steps.
"""

from __future__ import annotations

import logging
from dataclasses import MISSING, fields
from typing import Any

from django.db import transaction
from django.utils import timezone

from rescaler import events
from rescaler.audit.models import AuditEvent
from rescaler.audit.services import audit_record_many
from rescaler.bulk import rows_update
from rescaler.events import CLUSTER_GROUP
from rescaler.operations.models import RescaleOperation, RescaleStep
from rescaler.operations.signals import operation_progressed
from workers.cycles import cycle_collection_paused
from workers.rescale.protocol import (
    AuditObject,
    Event,
    OperationProgress,
    ProgressAck,
    ReportFit,
    StepPhase,
    StepProgress,
)

# what the runner reports of a step (the rest of the row is the plan's)
REPORTED = (
    "phase",
    "keys_moved",
    "bytes_moved",
    "hold_queue",
    "hold_bytes",
    "collect_epoch",
    "acquire_epoch",
    "drop_epoch",
    "per_vnode",
    "timings",
    "error",
)
# the operation's columns a report writes
RECORDED = ("progress", "vnodes_moved", "keys_moved", "bytes_moved")
# what the stored report says of the report itself, not of the operation
REPORT_IDENTITY = ("session", "version", "base_version")

logger = logging.getLogger(__name__)


def _reported(step: StepProgress) -> dict[str, Any]:
    return {
        "phase": str(step.phase),
        "keys_moved": step.keys_moved,
        "bytes_moved": step.bytes_moved,
        "hold_queue": step.hold_queue,
        "hold_bytes": step.hold_bytes,
        "collect_epoch": step.collect_epoch,
        "acquire_epoch": step.acquire_epoch,
        "drop_epoch": step.drop_epoch,
        "per_vnode": step.per_vnode,
        "timings": step.timings,
        "error": step.error,
    }


def _said(column: str, value: Any) -> Any:
    """What a column says that no other does: the stored report less the counters (they are
    columns of their own)."""
    if column == "progress" and isinstance(value, dict):
        return {k: v for k, v in value.items() if k not in RECORDED and k not in REPORT_IDENTITY}
    return value


def _held(op: RescaleOperation) -> tuple[str, int]:
    """The runner's report the operation holds: its session and version ("", 0: none, or one
    of a runner that did not number them)."""
    stored = op.progress or {}
    return str(stored.get("session") or ""), int(stored.get("version") or 0)


def operation_progress_record(*, pipeline: str, progress: dict[str, Any]) -> ProgressAck:
    """Record one progress report of an operation: the report without its steps on the
    operation, the reported steps whose figures changed in their rows; a step whose phase
    changed is audited. Then tell the apps above what changed (``operation_progressed``), under
    the operation's next ``progress_version``. A delta on a report the operation does not hold
    changes nothing and asks for a full report; one it holds already changes nothing.

    Runs with the cycle collector paused (``workers.cycles``): a barrier of 768 changed steps
    reads them as rows, audits them and builds the page's delta, tens of thousands of objects
    freed together at the end; with the collector on, they set off full collections of the
    runner's whole process, 100-250 ms each (docs/benchmarks.md, "Control plane at scale")."""
    with cycle_collection_paused():
        return _record(progress)


def _record(progress: dict[str, Any]) -> ProgressAck:
    report = OperationProgress.from_json(progress)
    operation_id = report.operation_id
    changes: list[tuple[RescaleStep, str]] = []  # (step, its phase before)
    audited: list[AuditEvent] = []
    with transaction.atomic():
        op = (
            RescaleOperation.objects.select_for_update()
            .defer("plan")  # megabytes in a large operation; a report needs none of it
            .filter(operation_id=operation_id)
            .first()
        )
        if op is None:  # an operation started without the control plane (python -m workers)
            events.publish(CLUSTER_GROUP, Event.OPERATION_PROGRESS, report.summary_json())
            return ProgressAck(operation_id, report.session, report.version)
        session, version = _held(op)
        fit = report.fit(session, version)
        if fit != ReportFit.APPLY:
            if fit == ReportFit.GAP:
                logger.info(
                    "progress of %s: a delta on report %s of %s, holding %s of %s: asking for "
                    "a full report",
                    operation_id, report.base_version, report.session, version, session,
                )  # fmt: skip
            return ProgressAck(operation_id, session, version, full_wanted=fit == ReportFit.GAP)
        recorded = {
            # what the operation holds is whole: the report's steps merged into its rows
            "progress": {**report.summary_json(), "base_version": None},
            "vnodes_moved": report.vnodes_moved,
            "keys_moved": report.keys_moved,
            "bytes_moved": report.bytes_moved,
        }
        columns = [
            name
            for name in RECORDED
            if _said(name, getattr(op, name)) != _said(name, recorded[name])
        ]
        for name, value in recorded.items():
            setattr(op, name, value)
        op.progress_version += 1
        op.save(update_fields=[*RECORDED, "progress_version"])
        reported = {s.step: s for s in report.steps}
        # the rows of the reported steps only: a delta carries the steps that changed, a full
        # report (after a runner's start or a gap) every one
        rows = RescaleStep.objects.filter(operation=op, step__in=list(reported)) if reported else ()
        changed: list[RescaleStep] = []
        now = timezone.now()
        for step in rows:
            figures = _reported(reported[step.step])
            if all(getattr(step, name) == value for name, value in figures.items()):
                continue
            if step.phase != figures["phase"]:
                changes.append((step, step.phase))
            for name, value in figures.items():
                setattr(step, name, value)
            step.updated_at = now  # as auto_now would
            step.progress_version = op.progress_version
            changed.append(step)
        written = [*REPORTED, "updated_at", "progress_version"]
        rows_update(
            RescaleStep,
            written,
            {s.pk: tuple(getattr(s, name) for name in written) for s in changed},
        )
        audited = audit_record_many(
            [
                {
                    "actor_name": "runner",
                    "action": f"step.{step.phase}",
                    "obj": (AuditObject.STEP, f"{operation_id}/{step.step}"),
                    "before": {"phase": old},
                    "after": {
                        "phase": step.phase,
                        "vnodes": step.vnodes,
                        "source_pu": step.source_pu,
                        "target_pu": step.target_pu,
                        "collect_epoch": step.collect_epoch,
                        "acquire_epoch": step.acquire_epoch,
                        "drop_epoch": step.drop_epoch,
                        "keys_moved": step.keys_moved,
                    },
                }
                for step, old in sorted(changes, key=lambda c: c[0].step)
            ]
        )
    for receiver, failure in operation_progressed.send_robust(
        sender=RescaleOperation,
        operation=op,
        version=op.progress_version,
        columns=columns,
        steps=sorted(changed, key=lambda s: s.step),
        events=audited,
    ):
        if isinstance(failure, Exception):
            logger.warning(
                "%s failed on the progress of %s", receiver, operation_id, exc_info=failure
            )
    events.publish(CLUSTER_GROUP, Event.OPERATION_PROGRESS, report.summary_json())
    return ProgressAck(operation_id, report.session, report.version)


# a step as the runner reports it (``StepProgress.to_json``), read straight from its row; a
# figure the row does not store is the record's default
_COLUMNS = {f.name for f in RescaleStep._meta.get_fields()}
STEP_PROGRESS = tuple(f.name for f in fields(StepProgress) if f.name in _COLUMNS)
STEP_UNSTORED = {
    f.name: f.default if f.default is not MISSING else f.default_factory()  # type: ignore[operator]
    for f in fields(StepProgress)
    if f.name not in _COLUMNS
}


def operation_progress(op: RescaleOperation) -> dict[str, Any] | None:
    """The runner's last report put back together (``OperationProgress.to_json``): the stored
    report and the rows of the steps the runner knows (every step it was sent); None before
    its first report."""
    progress, _ = operation_progress_since(op, 0)
    return progress


def operation_progress_since(
    op: RescaleOperation, version: int
) -> tuple[dict[str, Any] | None, int]:
    """The runner's last report with only the steps recorded after the operation's
    ``progress_version`` ``version`` (0: every step the runner knows), and the version read;
    (None, 0) before its first report. Who follows the operation (the orchestrator, at every
    tick) keeps the steps it read and asks for those written since: a barrier's few, not the
    thousands of a large operation. The version is read before the rows: a report recorded
    in between is read again next time, never missed."""
    stored, now = RescaleOperation.objects.values_list("progress", "progress_version").get(pk=op.pk)
    if not stored:
        return None, 0
    rows = RescaleStep.objects.filter(operation_id=op.pk).exclude(phase=StepPhase.PLANNED)
    if version:
        rows = rows.filter(progress_version__gt=version)
    steps = [
        {**STEP_UNSTORED, **dict(zip(STEP_PROGRESS, row, strict=True))}
        for row in rows.order_by("step").values_list(*STEP_PROGRESS)
    ]
    return {**stored, "steps": steps}, now
