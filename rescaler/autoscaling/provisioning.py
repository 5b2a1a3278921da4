"""The autoscaler and the worker provider (docs/autoscaling.md, "Workers").

A decision that needs more PUs than the live, open workers offer asks the provider for enough
workers, once: the ask is claimed on the decision's row (``workers_requested_at``), made through
the elastic workers' own ``worker_add`` (each worker audited as ``worker.add_requested``), and
audited as ``autoscaling.workers_requested``. The decision then awaits its workers; it starts
when they have joined (``evaluation``), or fails once ``RESCALER_AUTOSCALING_WORKER_JOIN_S`` has
passed without them. A scale-in that auto mode started drains and removes, once it completed,
each worker it emptied, through ``worker_drain`` (decommission, then the provider's release):
never a worker whose PUs still run a stateful fragment or own a vnode, never the last one.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import Count, Min, Q, Sum
from django.utils import timezone

from rescaler.audit.services import audit_record
from rescaler.autoscaling.decisions import OPEN, Outcome, decision_summary
from rescaler.autoscaling.model import Mode, Policy
from rescaler.autoscaling.models import AutoscalingDecision
from rescaler.cluster.models import ParallelUnit, Pipeline, Worker
from rescaler.operations.models import RescaleOperation
from rescaler.operations.selectors import cluster_view
from rescaler.runner.workers import (
    CORES_MAX,
    CORES_MIN,
    ProviderRefused,
    WorkerAdded,
    worker_add,
    worker_drain,
)
from workers.control import WorkerStatus
from workers.rescale import errors
from workers.rescale.protocol import AuditObject, OperationStatus

log = logging.getLogger(__name__)

WORKERS_DID_NOT_JOIN = "workers_did_not_join"  # the error code of a decision that failed so


@dataclass(frozen=True)
class WorkerShape:
    """What one more worker is asked for with, and what it is counted to bring: the cores and
    PUs of the pipeline's largest live, active worker (one PU of one core without one)."""

    cores: int
    parallel_units: int


def worker_shape(pipeline: Pipeline) -> WorkerShape:
    """The shape of the workers the autoscaler asks for (``WorkerShape``)."""
    largest = (
        Worker.objects.filter(pipeline=pipeline, alive=True, status=WorkerStatus.ACTIVE)
        .annotate(
            pus=Count("parallel_units", filter=Q(parallel_units__status=ParallelUnit.Status.ACTIVE))
        )
        .order_by("-pus", "name")
        .values_list("cores", "pus")
        .first()
    )
    if largest is None or largest[1] == 0:
        return WorkerShape(cores=1, parallel_units=1)
    cores, pus = largest
    return WorkerShape(cores=min(max(cores or pus, CORES_MIN), CORES_MAX), parallel_units=pus)


def workers_needed(
    *, parallel_units_short: dict[str, int], policy: Policy, shape: WorkerShape
) -> int:
    """The workers that bring the PUs the decision needs beyond the cluster's free ones. The
    fragments may share the new PUs, so the largest shortfall counts, never more PUs than the
    policy lets a fragment have."""
    if not parallel_units_short:
        return 0
    wanted = min(max(parallel_units_short.values()), policy.max_parallel_units)
    return math.ceil(wanted / shape.parallel_units)


def _in_flight(pipeline: Pipeline, *, now: dt.datetime, excluding: int) -> int:
    """The workers other decisions of the pipeline asked for within the join time that have
    not joined (bootstrapped) yet: a decision that supersedes one awaiting its workers does not
    ask for them again."""
    since = now - dt.timedelta(seconds=settings.RESCALER_AUTOSCALING_WORKER_JOIN_S)
    asks = (
        AutoscalingDecision.objects.filter(
            pipeline=pipeline, workers_requested__gt=0, workers_requested_at__gte=since
        )
        .exclude(pk=excluding)
        .aggregate(asked=Sum("workers_requested"), first=Min("workers_requested_at"))
    )
    asked = asks["asked"] or 0
    if not asked:
        return 0
    joined = Worker.objects.filter(
        pipeline=pipeline, joined_at__gte=asks["first"], bootstrapped_epoch__gte=0
    ).count()
    return max(asked - joined, 0)


def decision_workers_request(
    *,
    row: AutoscalingDecision,
    parallel_units_short: dict[str, int],
    policy: Policy,
    user: Any = None,
    actor_name: str = "",
    now: dt.datetime | None = None,
) -> AutoscalingDecision:
    """Ask the worker provider for the workers the decision needs (``parallel_units_short``:
    by fragment, the PUs the cluster lacks), once per decision: the ask is claimed on its row
    first, so a second evaluation or apply asks nothing. Asked by ``user`` (an operator's apply,
    who then applied it) or ``actor_name`` (the autoscaler). The decision awaits its workers,
    or, if the provider refused, is refused with the provider's reason
    (``worker_provider_refused``). Returns the row as recorded."""
    now = now or timezone.now()
    claimed = AutoscalingDecision.objects.filter(
        pk=row.pk, workers_requested_at__isnull=True, outcome__in=OPEN
    ).update(workers_requested_at=now)
    if not claimed:  # asked already, or acted on meanwhile
        row.refresh_from_db()
        return row
    pipeline = row.pipeline
    shape = worker_shape(pipeline)
    wanted = workers_needed(parallel_units_short=parallel_units_short, policy=policy, shape=shape)
    pending = _in_flight(pipeline, now=now, excluding=row.pk)
    to_ask = max(wanted - pending, 0)
    added: list[WorkerAdded] = []
    refused: ProviderRefused | None = None
    for _ in range(to_ask):
        try:
            added.append(worker_add(user=user, cores=shape.cores, actor_name=actor_name))
        except ProviderRefused as exc:
            refused = exc
            break
    short = max(parallel_units_short.values(), default=0)
    join_s = settings.RESCALER_AUTOSCALING_WORKER_JOIN_S
    if to_ask and not added:
        assert refused is not None
        outcome, code = Outcome.REFUSED, refused.code
        reason = (
            f"needs {short} more PU(s) than the cluster has free; the worker provider was "
            f"asked for {to_ask} worker(s) and refused: {refused}"
        )
    else:
        outcome, code = Outcome.AWAITING_WORKERS, ""
        reason = (
            f"needs {short} more PU(s) than the cluster has free: asked the worker provider "
            f"for {len(added)} worker(s) of {shape.cores} core(s)"
            + (f" ({refused})" if refused is not None else "")
            + (f", {pending} more already asked for by an earlier decision" if pending else "")
            + f"; it starts once they joined, within {join_s:g} s"
        )
    fields: dict[str, Any] = {
        "workers_requested": len(added),
        "outcome": outcome,
        "outcome_reason": reason[:2000],
        "error_code": code,
        "outcome_at": now,
    }
    if user is not None and user.is_authenticated:
        fields["applied_by"] = user
    AutoscalingDecision.objects.filter(pk=row.pk).update(**fields)
    row.refresh_from_db()
    audit_record(
        actor=user if user is not None and user.is_authenticated else None,
        actor_name=actor_name if user is None else "",
        action="autoscaling.workers_requested",
        obj=(AuditObject.PIPELINE, pipeline.name),
        after={
            **decision_summary(row),
            "parallel_units_short": dict(parallel_units_short),
            "cores": shape.cores,
            "answers": [a.answer for a in added],
            "already_asked": pending,
            "refused": str(refused) if refused is not None else None,
        },
    )
    return row


def decision_join_expired(row: AutoscalingDecision, *, now: dt.datetime) -> bool:
    """Whether the decision has waited for its workers longer than the join time."""
    if row.outcome != Outcome.AWAITING_WORKERS or row.workers_requested_at is None:
        return False
    waited = (now - row.workers_requested_at).total_seconds()
    return waited >= settings.RESCALER_AUTOSCALING_WORKER_JOIN_S


def decision_failed(
    *, row: AutoscalingDecision, actor_name: str, now: dt.datetime | None = None
) -> AutoscalingDecision:
    """The decision's workers did not join in time: it ends failed, with the reason, and
    nothing else changes (no rescale starts, no worker is touched). Audited as
    ``autoscaling.decision_failed``."""
    now = now or timezone.now()
    join_s = settings.RESCALER_AUTOSCALING_WORKER_JOIN_S
    reason = (
        f"the {row.workers_requested} worker(s) asked of the worker provider did not join "
        f"(their PUs bootstrapped) within {join_s:g} s: nothing was started"
    )
    failed = AutoscalingDecision.objects.filter(
        pk=row.pk, outcome=Outcome.AWAITING_WORKERS
    ).update(
        outcome=Outcome.FAILED, outcome_reason=reason, error_code=WORKERS_DID_NOT_JOIN,
        outcome_at=now,
    )  # fmt: skip
    row.refresh_from_db()
    if failed:
        audit_record(
            actor_name=actor_name,
            action="autoscaling.decision_failed",
            obj=(AuditObject.PIPELINE, row.pipeline.name),
            after={**decision_summary(row), "reason": reason},
        )
    return row


def scale_in_release(*, operation_pk: int, actor_name: str) -> list[str]:
    """A completed operation that auto mode started for a decision: each worker whose PUs it
    removed from a fragment and that now runs no stateful fragment and owns no vnode is
    drained and removed (``worker_drain``: decommissioned, then its machine released), while
    another worker stays. Recorded on the decision (``workers_released``); a drain refused is
    logged and the worker kept. Returns the workers drained."""
    operation = RescaleOperation.objects.select_related("pipeline").get(pk=operation_pk)
    if operation.status != OperationStatus.COMPLETED:
        return []
    row = AutoscalingDecision.objects.filter(operation=operation, mode=Mode.AUTO.value).first()
    removed = {
        pu for change in (operation.changes or {}).values()
        for pu in change.get("removed_parallel_units", [])
    }  # fmt: skip
    if row is None or not removed:
        return []
    cluster = cluster_view(operation.pipeline)
    holding = {
        pu
        for fragment in cluster.fragments.values()
        if fragment.stateful
        for pu in (*fragment.parallel_units, *fragment.mapping)
    }
    workers = list(
        Worker.objects.filter(pipeline=operation.pipeline)
        .exclude(status__in=[WorkerStatus.LOST, WorkerStatus.REMOVED])
        .prefetch_related("parallel_units")
        .order_by("-name")
    )
    staying = sum(
        1 for w in workers if w.alive and w.status in (WorkerStatus.ACTIVE, WorkerStatus.CORDONED)
    )
    released: list[str] = []
    for worker in workers:
        pus = {pu.number for pu in worker.parallel_units.all()}
        if worker.status != WorkerStatus.ACTIVE or not worker.alive or not pus & removed:
            continue
        if pus & holding:
            continue  # it still runs a fragment or owns a vnode
        if staying <= 1:
            log.info("worker %s emptied by %s kept: it is the last worker", worker.name,
                     operation.operation_id)  # fmt: skip
            break
        try:
            worker_drain(
                user=None,
                name=worker.name,
                reason=f"autoscaler: emptied by operation {operation.operation_id} "
                f"(decision {row.pk})",
                actor_name=actor_name,
            )
        except errors.RescaleError as exc:  # a fragment busy, the worker's status moved...
            log.warning("worker %s emptied by %s kept: %s", worker.name,
                        operation.operation_id, exc)  # fmt: skip
            continue
        released.append(worker.name)
        staying -= 1
    if released:
        AutoscalingDecision.objects.filter(pk=row.pk).update(
            workers_released=[*row.workers_released, *released],
            outcome_reason=(
                f"{row.outcome_reason}; the worker(s) it emptied drained and removed: "
                f"{', '.join(released)}"
            )[:2000],
        )
    return released
