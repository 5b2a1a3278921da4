"""What is asked of rescale operations: plan or request one (a cancel is
``rescaler.operations.cancel``'s)."""

from __future__ import annotations

import logging
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from rescaler.audit.services import audit_record
from rescaler.cluster.models import Fragment, Pipeline
from rescaler.events import CLUSTER_GROUP, publish
from rescaler.operations import enqueue, plans
from rescaler.operations.models import (
    OperationFragment,
    OperationPlan,
    RescaleOperation,
    RescaleStep,
)
from rescaler.operations.selectors import cluster_view, measured_rates
from rescaler.operations.signals import operation_requested
from rescaler.operations.summary import operation_summary
from workers.cycles import cycle_collection_paused
from workers.rescale import errors
from workers.rescale.planner import plan_request
from workers.rescale.protocol import (
    AuditObject,
    Event,
    OperationRequest,
    Plan,
)
from workers.rescale.request import fragment_busy, validate

log = logging.getLogger(__name__)


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


def operation_plan(
    *, body: OperationRequest | Any
) -> tuple[Pipeline, OperationRequest, Plan, dict[str, int]]:
    """Parse, validate and plan a request; raises a RescaleError subclass with its reason. Also
    answers the mapping versions the plan was computed from, read before the mappings: a
    version that moves meanwhile makes the plan look stale, never fresh."""
    request = body if isinstance(body, OperationRequest) else OperationRequest.parse(body)
    pipeline = _pipeline_for(request)
    versions = plans.mapping_versions(pipeline, list(request.changes))
    cluster = cluster_view(pipeline)
    validate(request, cluster)
    rates = measured_rates(pipeline)
    return pipeline, request, plan_request(request, cluster, **rates), versions


def operation_request(
    *, user: Any, body: Any, plan_id: str | None = None, actor_name: str = ""
) -> RescaleOperation | OperationPlan:
    """A dry run keeps its plan and returns it (with its ``plan_id``); otherwise the
    operation, queued for the orchestrator: the plan of ``plan_id`` exactly, when given (the
    body must then be the planned one), else a plan made now. ``user`` is who asks; a
    component of the control plane asking by itself (no user) names itself in ``actor_name``,
    which its audit events carry (the autoscaler in auto mode)."""
    if plan_id is not None:
        return _operation_start_planned(
            user=user, body=body, plan_id=plan_id, actor_name=actor_name
        )
    with cycle_collection_paused():  # a plan of 16,384 steps and its JSON: no cycle made
        pipeline, request, plan, versions = operation_plan(body=body)
        if request.dry_run:
            stored = plans.plan_store(
                user=user, pipeline=pipeline, request=request, plan=plan, versions=versions
            )
            # freed while the collector is off: alive when it resumes, the plan's 100,000
            # objects would all be scanned by its next collection (~100 ms of a dry run)
            del plan
            return stored
    with transaction.atomic():
        op = _operation_create(
            user=user, pipeline=pipeline, request=request, plan=plan, actor_name=actor_name
        )
    publish(CLUSTER_GROUP, Event.OPERATION_REQUESTED, operation_summary(op))
    return op


def _operation_start_planned(
    *, user: Any, body: Any, plan_id: str, actor_name: str = ""
) -> RescaleOperation:
    """Start the stored plan of ``plan_id`` as it was answered, if nothing it was bound to
    changed (else 409 plan_stale saying what did) and the request still validates now."""
    request = body if isinstance(body, OperationRequest) else OperationRequest.parse(body)
    if request.dry_run:
        raise errors.MalformedRequest(
            "'plan_id' starts a planned operation: send it without dry_run (a dry run plans anew)"
        )
    with transaction.atomic():
        stored = plans.plan_locked(user=user, plan_id=plan_id)
        pipeline = stored.pipeline
        # the fragments' rows, locked: their mapping cannot move between this check and the
        # operation's insert (the runner records a new mapping on the same rows)
        list(
            Fragment.objects.select_for_update()
            .filter(pipeline=pipeline, name__in=list(stored.mapping_versions))
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        cluster = cluster_view(pipeline)
        now = timezone.now()
        changed = plans.plan_changes(
            stored,
            request=request,
            cluster=cluster,
            versions=plans.mapping_versions(pipeline, list(stored.mapping_versions)),
            now=now,
        )
        if changed:
            raise plans.plan_stale(plan_id, changed)
        validate(request, cluster)  # whatever else changed: a worker cordoned, a fragment busy
        op = _operation_create(
            user=user,
            pipeline=pipeline,
            request=request,
            plan=stored.plan_record(),
            plan_id=plan_id,
            actor_name=actor_name,
        )
        plans.plan_use(stored, operation=op, now=now)
    publish(CLUSTER_GROUP, Event.OPERATION_REQUESTED, operation_summary(op))
    return op


def _operation_create(
    *,
    user: Any,
    pipeline: Pipeline,
    request: OperationRequest,
    plan: Plan,
    plan_id: str | None = None,
    actor_name: str = "",
) -> RescaleOperation:
    """The operation of a validated request and its plan, its fragments held, its steps
    stored, audited, told to the apps above (``operation_requested``) and queued for the
    orchestrator once committed (in the caller's transaction)."""
    op = RescaleOperation.objects.create(
        pipeline=pipeline,
        requested_by=user if user is not None and user.is_authenticated else None,
        changes={name: c.to_json() for name, c in request.changes.items()},
        weighted=request.weighted,
        reason=request.reason,
        strategy=request.strategy,
        granularity=plan.granularity.to_json(),
        plan=plan.stored_json(),
        fragments=sorted(request.changes),
    )
    try:
        with transaction.atomic():
            for fragment in Fragment.objects.filter(pipeline=pipeline, name__in=request.changes):
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
    if len(plan.steps) >= ANALYZE_STEPS_AT:
        # robust: statistics that could not be refreshed are logged, and never keep the
        # driver's own callback below from running
        transaction.on_commit(steps_analyze, robust=True)
    after: dict[str, Any] = {
        "request": request.to_json(),
        "reason": request.reason,
        "steps": len(plan.steps),
        "estimated_duration_s": op.plan.get("estimated_duration_s"),
    }
    if plan_id is not None:
        after["plan_id"] = plan_id
    audit_record(
        actor=user,
        actor_name=actor_name,
        action="operation.requested",
        obj=(AuditObject.OPERATION, op.operation_id),
        after=after,
    )
    for receiver, failure in operation_requested.send_robust(
        sender=RescaleOperation, operation=op, plan_id=plan_id, actor_name=actor_name
    ):
        if isinstance(failure, Exception):
            log.warning(
                "%s failed on the request of %s", receiver, op.operation_id, exc_info=failure
            )
    transaction.on_commit(lambda: enqueue.operation_drive_enqueue(op.id))
    return op


# From this many steps, an operation's rows are a bulk load of the steps table: analyzed once
# stored (Postgres' "Populating a Database": run ANALYZE afterwards), or the query planner goes
# on counting a new operation's steps as a handful until autovacuum analyzes the table, up to a
# minute or more later, and its barriers' counts sort thousands of rows where they would hash.
ANALYZE_STEPS_AT = 1_000


def steps_analyze() -> None:
    """Refresh the query planner's statistics of the steps table (about 40 ms at 16,384 steps);
    Postgres only. It waits at most a second for the table's lock (a vacuum running on it)."""
    if connection.vendor != "postgresql":
        return
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL lock_timeout = '1s'")
        cursor.execute(f"ANALYZE {connection.ops.quote_name(RescaleStep._meta.db_table)}")
