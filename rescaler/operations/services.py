"""Services of rescale operations: request, cancel, drive (the Celery task's body), progress."""

from __future__ import annotations

import datetime as dt
import logging
import socket
import time
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from rescaler.cluster.models import Fragment, Pipeline, RunnerCommand
from rescaler.cluster.services import command_submit
from rescaler.events import publish
from rescaler.operations.models import (
    AuditEvent,
    OperationFragment,
    RescaleOperation,
    RescaleStep,
)
from rescaler.operations.selectors import cluster_view, measured_rates
from workers.rescale import errors
from workers.rescale.orchestrator import Orchestrator
from workers.rescale.planner import Plan, plan_request
from workers.rescale.request import RescheduleRequest, validate

log = logging.getLogger("rescaler.operations")


class OperationError(errors.RescaleError):
    """Base of the control plane's own refusals (beside the protocol's RescaleError codes)."""


class OperationFinal(OperationError):
    code = "operation_final"


# -- audit ---------------------------------------------------------------------------------------
def audit_record(
    *,
    actor: Any = None,
    actor_name: str = "",
    action: str,
    obj: tuple[str, str],
    before: Any = None,
    after: Any = None,
) -> AuditEvent:
    """Append one event; ``actor`` is a user, else ``actor_name`` says which component acted."""
    name = actor_name or (actor.get_username() if actor is not None else "system")
    return AuditEvent.objects.create(
        actor=actor if actor is not None and actor.is_authenticated else None,
        actor_name=name,
        action=action,
        object_type=obj[0],
        object_id=obj[1],
        before=before,
        after=after,
    )


def _summary(op: RescaleOperation) -> dict[str, Any]:
    return {
        "status": op.status,
        "strategy": op.strategy,
        "fragments": op.fragments,
        "vnodes_moved": op.vnodes_moved,
        "keys_moved": op.keys_moved,
    }


# -- request -------------------------------------------------------------------------------------
def _pipeline_for(request: RescheduleRequest) -> Pipeline:
    names = list(request.changes)
    rows = Fragment.objects.filter(name__in=names).select_related("pipeline")
    pipelines = {f.pipeline for f in rows}
    found = {f.name for f in rows}
    missing = [n for n in names if n not in found]
    if missing:
        known = ", ".join(
            sorted(
                Fragment.objects.filter(kind=Fragment.Kind.STATEFUL).values_list("name", flat=True)
            )
        )
        raise errors.UnknownFragment(
            f"no fragment {missing[0]!r}; stateful fragments: {known or 'none'}"
        )
    if len(pipelines) != 1:
        raise errors.MalformedRequest("one request may only name fragments of one pipeline")
    return pipelines.pop()


def operation_plan(*, body: Any) -> tuple[Pipeline, RescheduleRequest, Plan]:
    """Parse, validate and plan a request; raises a RescaleError subclass with its reason."""
    request = RescheduleRequest.parse(body)
    pipeline = _pipeline_for(request)
    cluster = cluster_view(pipeline)
    validate(request, cluster)
    rates = measured_rates(pipeline)
    return pipeline, request, plan_request(request, cluster, **rates)


def operation_request(*, user: Any, body: Any) -> RescaleOperation | Plan:
    """A dry run returns the plan; otherwise the operation, queued for the orchestrator."""
    pipeline, request, plan = operation_plan(body=body)
    if request.dry_run:
        return plan
    with transaction.atomic():
        op = RescaleOperation.objects.create(
            pipeline=pipeline,
            requested_by=user if user is not None and user.is_authenticated else None,
            request=request.to_json(),
            strategy=request.strategy,
            granularity=request.granularity.to_json(),
            plan=plan.to_json(),
            fragments=sorted(request.changes),
        )
        try:
            with transaction.atomic():
                for fragment in Fragment.objects.filter(
                    pipeline=pipeline, name__in=request.changes
                ):
                    OperationFragment.objects.create(operation=op, fragment=fragment)
        except IntegrityError:
            busy = (
                OperationFragment.objects.filter(
                    active=True, fragment__pipeline=pipeline, fragment__name__in=request.changes
                )
                .select_related("operation", "fragment")
                .first()
            )
            detail = (
                f"{busy.fragment.name}: operation {busy.operation.uid}" if busy else "a fragment"
            )
            raise errors.FragmentBusy(
                f"{detail} is still in progress; wait for it or cancel it"
            ) from None
        RescaleStep.objects.bulk_create(
            RescaleStep(
                operation=op,
                number=s.id,
                fragment=s.fragment,
                source_pu=s.source,
                target_pu=s.target,
                vnodes=list(s.vnodes),
                keys=s.keys,
                bytes=s.bytes,
            )
            for s in plan.steps
        )
        audit_record(
            actor=user,
            action="operation.requested",
            obj=("rescale_operation", op.uid),
            after={
                "request": op.request,
                "steps": len(plan.steps),
                "estimated_duration_s": op.plan.get("estimated_duration_s"),
            },
        )
        transaction.on_commit(lambda: _enqueue_drive(op.id))
    publish("cluster", "rescale.requested", {"operation": op.uid, **_summary(op)})
    return op


def _enqueue_drive(operation_id: int) -> None:
    from rescaler.operations.tasks import drive_operation

    drive_operation.delay(operation_id)


def operation_cancel(*, user: Any, operation: RescaleOperation) -> RescaleOperation:
    """Ask for a cancel: steps in flight finish, no new step starts (docs/rescale.md)."""
    with transaction.atomic():
        op = RescaleOperation.objects.select_for_update().get(pk=operation.pk)
        if op.is_final:
            raise OperationFinal(f"operation {op.uid} already ended: {op.status}")
        if op.status == RescaleOperation.Status.CANCELLING:
            return op
        before = _summary(op)
        op.status = RescaleOperation.Status.CANCELLING
        op.cancel_requested_by = user if user is not None and user.is_authenticated else None
        op.save(update_fields=["status", "cancel_requested_by"])
        audit_record(
            actor=user,
            action="operation.cancel_requested",
            obj=("rescale_operation", op.uid),
            before=before,
            after=_summary(op),
        )
        if op.progress:  # the runner knows it: tell it now, whatever the orchestrator does
            command_submit(
                pipeline=op.pipeline.name,
                kind="rescale.cancel",
                payload={"operation": op.uid},
                user=op.cancel_requested_by,
            )
        transaction.on_commit(lambda: _enqueue_drive(op.id))
    publish(f"operation_{op.uid}", "rescale.cancelling", {"operation": op.uid})
    return op


# -- driving (the Celery task's body) -------------------------------------------------------------
class OrmChannel:
    """The orchestrator's channel to the runner: RunnerCommand rows out, progress rows in."""

    def __init__(self, op: RescaleOperation) -> None:
        self.op = op

    def submit(self, kind: str, payload: dict[str, Any]) -> int:
        command = RunnerCommand.objects.create(
            pipeline=self.op.pipeline, kind=kind, payload=payload
        )
        audit_record(
            actor_name="orchestrator",
            action=f"command.{kind}",
            obj=("rescale_operation", self.op.uid),
            after={"command": command.id, **{k: v for k, v in payload.items() if k != "operation"}},
        )
        return command.id

    def progress(self, operation: str) -> dict[str, Any] | None:
        progress = RescaleOperation.objects.values_list("progress", flat=True).get(uid=operation)
        return progress or None

    def command_status(self, command_id: int) -> tuple[str, str] | None:
        row = RunnerCommand.objects.filter(id=command_id).values("status", "detail").first()
        if row is None or row["status"] == RunnerCommand.Status.PENDING:
            return None
        return row["status"], row["detail"]


def _take_lease(operation_id: int, owner: str, seconds: float) -> bool:
    now = timezone.now()
    taken = RescaleOperation.objects.filter(
        Q(lease_until__isnull=True) | Q(lease_until__lt=now) | Q(lease_owner=owner),
        pk=operation_id,
    ).update(lease_owner=owner, lease_until=now + dt.timedelta(seconds=seconds))
    return taken == 1


def _finalize(op: RescaleOperation, status: str, outcome: str, code: str = "") -> None:
    with transaction.atomic():
        op = RescaleOperation.objects.select_for_update().get(pk=op.pk)
        if op.is_final:
            return
        before = _summary(op)
        op.status = status
        op.outcome = outcome
        op.error_code = code
        op.finished_at = timezone.now()
        op.lease_owner, op.lease_until = "", None
        op.save()
        OperationFragment.objects.filter(operation=op).update(active=False)
        audit_record(
            actor_name="orchestrator",
            action=f"operation.{status}",
            obj=("rescale_operation", op.uid),
            before=before,
            after={**_summary(op), "outcome": outcome},
        )
    publish("cluster", "rescale.finished", {"operation": op.uid, **_summary(op)})
    publish(f"operation_{op.uid}", "rescale.finished", {"operation": op.uid, **_summary(op)})


def operation_drive(
    *, operation_id: int, budget_s: float | None = None, poll_s: float = 0.25
) -> str:
    """Drive an operation for up to ``budget_s``; returns its status ("continue" if not done).

    Safe to run twice (a second driver finds the lease taken) and after a crash (a new driver
    takes the expired lease and rebuilds everything from the runner's progress).
    """
    budget_s = budget_s or settings.RESCALER_DRIVE_BUDGET_S
    owner = f"{socket.gethostname()}:{time.monotonic_ns()}"
    lease_s = settings.RESCALER_LEASE_S
    if not _take_lease(operation_id, owner, lease_s):
        return "leased"
    op = RescaleOperation.objects.select_related("pipeline").get(pk=operation_id)
    if op.is_final:
        return op.status
    if op.status == RescaleOperation.Status.CANCELLING and not op.progress:
        _finalize(
            op, RescaleOperation.Status.CANCELLED, "cancelled before it started: nothing moved"
        )
        return RescaleOperation.Status.CANCELLED
    if op.status == RescaleOperation.Status.PENDING:
        RescaleOperation.objects.filter(pk=op.pk).update(
            status=RescaleOperation.Status.RUNNING, started_at=timezone.now()
        )
        audit_record(
            actor_name="orchestrator", action="operation.started", obj=("rescale_operation", op.uid)
        )
    plan = Plan.from_json(RescheduleRequest.parse(op.request), op.plan)
    orchestrator = Orchestrator(
        OrmChannel(op), op.uid, plan, step_timeout_s=settings.RESCALER_STEP_TIMEOUT_S
    )
    deadline = time.monotonic() + budget_s
    cancel_sent = False
    while time.monotonic() < deadline:
        _take_lease(operation_id, owner, lease_s)
        status = RescaleOperation.objects.values_list("status", flat=True).get(pk=op.pk)
        if status == RescaleOperation.Status.CANCELLING and not cancel_sent:
            orchestrator.cancel()
            cancel_sent = True
        tick = orchestrator.tick()
        if tick["status"] in ("completed", "cancelled"):
            progress = tick["progress"] or {}
            outcome = (
                f"{progress.get('vnodes_moved', 0)} vnodes and {progress.get('keys_moved', 0)} keys "
                f"moved" + (f"; {tick['error']}" if tick["error"] else "")
            )
            final: str = tick["status"]
            _finalize(op, final, outcome, "step_timeout" if tick["error"] else "")
            return final
        if tick["status"] == "failed":
            _finalize(op, RescaleOperation.Status.FAILED, tick["error"], "runner_refused")
            return RescaleOperation.Status.FAILED
        if tick["error"] and not cancel_sent:  # a stuck step: the orchestrator cancels
            log.warning("operation %s: %s", op.uid, tick["error"])
            RescaleOperation.objects.filter(pk=op.pk).update(
                status=RescaleOperation.Status.CANCELLING, outcome=tick["error"]
            )
            audit_record(
                actor_name="orchestrator",
                action="operation.step_timeout",
                obj=("rescale_operation", op.uid),
                after={"error": tick["error"]},
            )
            cancel_sent = True
        time.sleep(poll_s)
    # hand the lease back: the re-queued run (or any worker) takes over without waiting
    RescaleOperation.objects.filter(pk=operation_id, lease_owner=owner).update(
        lease_owner="", lease_until=None
    )
    return "continue"


def unfinished_operations() -> bool:
    return RescaleOperation.objects.exclude(status__in=RescaleOperation.FINAL).exists()


def resume_operations() -> list[int]:
    """Operations left without a driver (a Celery worker died): queue a driver for each."""
    stale = RescaleOperation.objects.exclude(status__in=RescaleOperation.FINAL).filter(
        Q(lease_until__isnull=True) | Q(lease_until__lt=timezone.now())
    )
    ids = list(stale.values_list("id", flat=True))
    for operation_id in ids:
        _enqueue_drive(operation_id)
    return ids


# -- progress from the runner (called in the runner process through OrmControl) ------------------
def operation_progress_record(*, pipeline: str, progress: dict[str, Any]) -> None:
    uid = progress["operation"]
    changes: list[tuple[int, str, str]] = []
    with transaction.atomic():
        op = RescaleOperation.objects.select_for_update().filter(uid=uid).first()
        if op is None:  # an operation started without the control plane (python -m workers)
            publish(
                "cluster", "rescale.progress", {k: v for k, v in progress.items() if k != "steps"}
            )
            return
        op.progress = progress
        op.vnodes_moved = progress.get("vnodes_moved", 0)
        op.keys_moved = progress.get("keys_moved", 0)
        op.bytes_moved = progress.get("bytes_moved", 0)
        op.save(update_fields=["progress", "vnodes_moved", "keys_moved", "bytes_moved"])
        steps = {s.number: s for s in RescaleStep.objects.filter(operation=op)}
        for data in progress.get("steps", []):
            step = steps.get(data["step"])
            if step is None:
                continue
            if step.phase != data["phase"]:
                changes.append((step.number, step.phase, data["phase"]))
            step.phase = data["phase"]
            step.keys_moved = data.get("keys_moved", 0)
            step.bytes_moved = data.get("bytes_moved", 0)
            step.hold_queue = data.get("hold_queue", 0)
            step.collect_epoch = data.get("collect_epoch")
            step.acquire_epoch = data.get("acquire_epoch")
            step.drop_epoch = data.get("drop_epoch")
            step.per_vnode = data.get("per_vnode", {})
            step.timings = data.get("timings", {})
            step.error = data.get("error", "")
            step.save()
        for number, old, new in changes:
            step = steps[number]
            audit_record(
                actor_name="runner",
                action=f"step.{new}",
                obj=("rescale_step", f"{uid}/{number}"),
                before={"phase": old},
                after={
                    "phase": new,
                    "vnodes": step.vnodes,
                    "source": step.source_pu,
                    "target": step.target_pu,
                    "collect_epoch": step.collect_epoch,
                    "acquire_epoch": step.acquire_epoch,
                    "drop_epoch": step.drop_epoch,
                    "keys_moved": step.keys_moved,
                },
            )
    publish(f"operation_{uid}", "rescale.progress", progress)
    publish("cluster", "rescale.progress", {k: v for k, v in progress.items() if k != "steps"})
