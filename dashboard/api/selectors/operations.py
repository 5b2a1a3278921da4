"""Operations (listed, and one with its steps, vnodes, events and the runner's progress) and the
audit log."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import Prefetch, Q, QuerySet

from dashboard.api.errors import not_found
from rescaler.audit.models import AuditEvent
from rescaler.operations.counts import with_step_counts
from rescaler.operations.models import RescaleOperation, RescaleStep
from workers.rescale.protocol import ROUTING_BY_PHASE, AuditObject, Routing, StopStartPhase


def operation_list() -> QuerySet[RescaleOperation]:
    """Operations, newest first, without their large JSON (plan, progress), with step counts."""
    return with_step_counts(
        RescaleOperation.objects.select_related("pipeline", "requested_by", "cancel_requested_by")
        .defer("plan", "progress")
        .order_by("-created_at", "-id")
    )


def audit_list() -> QuerySet[AuditEvent]:
    """The audit log, newest first: what ``GET /api/v1/audit`` and the audit page filter."""
    return AuditEvent.objects.order_by("-at", "-id")


def operation_get(*, operation_id: str) -> RescaleOperation:
    """One operation with its steps; ``unknown_operation`` (404) if there is none."""
    op = (
        with_step_counts(
            RescaleOperation.objects.select_related(
                "pipeline", "requested_by", "cancel_requested_by"
            ).prefetch_related(Prefetch("steps", queryset=RescaleStep.objects.order_by("step")))
        )
        .filter(operation_id=operation_id)
        .first()
    )
    if op is None:
        raise not_found("unknown_operation", f"no operation {operation_id!r}")
    return op


def operation_events(*, operation: RescaleOperation) -> QuerySet[AuditEvent]:
    """The audit events of the operation and of its steps, oldest first."""
    return AuditEvent.objects.filter(
        Q(object_type=AuditObject.OPERATION, object_id=operation.operation_id)
        | Q(object_type=AuditObject.STEP, object_id__startswith=f"{operation.operation_id}/")
    ).order_by("at", "id")


def operation_vnodes(*, operation: RescaleOperation) -> list[dict[str, Any]]:
    """Per vnode of the operation: its step, where its records go, and its own figures (the
    step's PUs and phase are said once, by the step)."""
    return step_vnodes(operation.steps.all())


def step_vnodes(steps: Iterable[RescaleStep]) -> list[dict[str, Any]]:
    """``operation_vnodes`` of these steps only (a delta event's changed steps)."""
    rows = []
    for step in steps:
        routing = ROUTING_BY_PHASE.get(step.phase, Routing.SOURCE)  # type: ignore[call-overload]
        for vnode in step.vnodes:
            figures = (step.per_vnode or {}).get(str(vnode)) or {}
            rows.append(
                {
                    "fragment": step.fragment,
                    "vnode": vnode,
                    "step": step.step,
                    "key_range_index": step.key_range_index,
                    "key_range_count": step.key_range_count,
                    "routing": routing,
                    "keys": figures.get("keys"),
                    "bytes": figures.get("bytes"),
                    "hold_queue": figures.get("hold_queue", 0),
                    "hold_bytes": figures.get("hold_bytes", 0),
                }
            )
    return sorted(rows, key=lambda r: (r["fragment"], r["vnode"], r["key_range_index"] or 0))


def operation_runner_progress(op: RescaleOperation) -> dict[str, Any]:
    """What the runner's last report (stored without its steps) says beyond the operation's
    columns and steps."""
    report = op.progress or {}
    return {
        "status": report.get("status", op.status),
        "phase": report.get("phase", StopStartPhase.BEGUN),
        "cancel_requested": bool(report.get("cancel_requested", False)),
        "begun_epoch": report.get("begun_epoch"),
        "finished_epoch": report.get("finished_epoch"),
        "error": report.get("error", ""),
        "executors": list(report.get("executors", ())),
        "hold_queue_full": list(report.get("hold_queue_full", ())),
    }
