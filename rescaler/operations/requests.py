"""What is asked of rescale operations: plan or request one, cancel one.

Every cancel goes through :func:`operation_cancel`, whoever asks (a user through the API, the
orchestrator when a step times out), so each one is checked, audited and published the same way.
"""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction

from rescaler.cluster.models import Fragment, Pipeline
from rescaler.cluster.services import command_submit
from rescaler.events import CLUSTER_GROUP, operation_group, publish
from rescaler.operations.audit import audit_record, operation_summary
from rescaler.operations.models import OperationFragment, RescaleOperation, RescaleStep
from rescaler.operations.selectors import cluster_view, measured_rates
from workers.rescale import errors
from workers.rescale.planner import plan_request
from workers.rescale.protocol import (
    AuditObject,
    CommandKind,
    Event,
    OperationRef,
    OperationRequest,
    OperationStatus,
    Plan,
)
from workers.rescale.request import fragment_busy, validate


class OperationError(errors.RescaleError):
    """Base of the control plane's own refusals (beside the protocol's RescaleError codes)."""


class OperationFinal(OperationError):
    code = "operation_final"


def _pipeline_for(request: OperationRequest) -> Pipeline:
    """The pipeline the request is about: the one its known fragments belong to. Whether each
    fragment exists, is stateful, is busy... is decided by ``validate`` alone, against that
    pipeline's cluster view."""
    rows = Fragment.objects.filter(name__in=list(request.changes)).select_related("pipeline")
    pipelines = {f.pipeline for f in rows}
    if len(pipelines) > 1:
        raise errors.MalformedRequest("one request may only name fragments of one pipeline")
    if pipelines:
        return pipelines.pop()
    pipeline = Pipeline.objects.order_by("name").first()
    if pipeline is None:
        raise errors.UnknownFragment(
            "no pipeline has registered yet: start the pipeline runner (manage.py run_pipeline)"
        )
    return pipeline  # none of the fragments is known: validate says so, listing its fragments


def operation_plan(*, body: OperationRequest | Any) -> tuple[Pipeline, OperationRequest, Plan]:
    """Parse, validate and plan a request; raises a RescaleError subclass with its reason."""
    request = body if isinstance(body, OperationRequest) else OperationRequest.parse(body)
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
            changes={name: c.to_json() for name, c in request.changes.items()},
            weighted=request.weighted,
            reason=request.reason,
            strategy=request.strategy,
            granularity=request.granularity.to_json(),
            plan=plan.stored_json(),
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
            # another request won the race between validate and this insert: the same refusal
            raise (
                fragment_busy(busy.fragment.name, busy.operation.operation_id)
                if busy
                else errors.FragmentBusy("a fragment of the request is busy; try again")
            ) from None
        RescaleStep.objects.bulk_create(RescaleStep.planned(op, s) for s in plan.steps)
        audit_record(
            actor=user,
            action="operation.requested",
            obj=(AuditObject.OPERATION, op.operation_id),
            after={
                "request": request.to_json(),
                "reason": request.reason,
                "steps": len(plan.steps),
                "estimated_duration_s": op.plan.get("estimated_duration_s"),
            },
        )
        transaction.on_commit(lambda: _enqueue_drive(op.id))
    publish(CLUSTER_GROUP, Event.OPERATION_REQUESTED, operation_summary(op))
    return op


def _enqueue_drive(pk: int) -> None:
    from rescaler.operations.tasks import drive_operation  # the tasks import the drive loop

    drive_operation.delay(pk)


def operation_cancel(
    *,
    operation: RescaleOperation,
    user: Any = None,
    actor_name: str = "",
    reason: str = "",
) -> RescaleOperation:
    """Ask for a cancel: steps in flight finish, no new step starts (docs/rescale.md).

    ``user`` is who asked through the API; a component that cancels on its own (the orchestrator
    when a step times out) names itself in ``actor_name`` and says why in ``reason``, which the
    audit event and the operation's outcome keep. Cancelling twice is harmless: the second call
    records nothing.
    """
    with transaction.atomic():
        op = RescaleOperation.objects.select_for_update().get(pk=operation.pk)
        if op.is_final:
            raise OperationFinal(f"operation {op.operation_id} already ended: {op.status}")
        if op.status == OperationStatus.CANCELLING:
            return op
        before = operation_summary(op)
        op.status = OperationStatus.CANCELLING
        op.cancel_requested_by = user if user is not None and user.is_authenticated else None
        fields = ["status", "cancel_requested_by"]
        if reason:
            op.outcome = reason
            fields.append("outcome")
        op.save(update_fields=fields)
        after = operation_summary(op)
        audit_record(
            actor=user,
            actor_name=actor_name,
            action="operation.cancel_requested",
            obj=(AuditObject.OPERATION, op.operation_id),
            before=before,
            after={**after, "reason": reason} if reason else after,
        )
        if op.progress:  # the runner knows it: tell it now, whatever the orchestrator does
            command_submit(
                pipeline=op.pipeline.name,
                kind=CommandKind.OPERATION_CANCEL,
                payload=OperationRef(op.operation_id).to_json(),
                user=op.cancel_requested_by,
            )
        transaction.on_commit(lambda: _enqueue_drive(op.id))
    publish(
        operation_group(op.operation_id),
        Event.OPERATION_CANCELLING,
        OperationRef(op.operation_id).to_json(),
    )
    return op
