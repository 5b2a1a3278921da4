"""The autoscaler acting by itself: a pipeline in ``recommend`` or ``auto`` mode is evaluated
when its epochs arrive (at most once per ``RESCALER_AUTOSCALING_INTERVAL_S``, queued by the
receiver of ``rescaler.cluster.signals.epoch_recorded``, run by the Celery task
``rescaler.autoscaling.evaluate``): its decision is recorded in the history, and in ``auto``
mode a change of size is started as a live rescale, as "apply" starts it
(``recommendation_apply``), by the autoscaler (``AUTOSCALER``, the audit's actor).

The guard rails are the decision model's and the policy's, not repeated here: nothing is
decided while an operation runs, while a worker drains, or within the cooldown
(``sizing.decide``), and no step goes past the policy's bounds. A decision that needs PUs the
cluster does not have free asks the worker provider for them, once (``provisioning``), and
starts when they have joined, or fails after ``RESCALER_AUTOSCALING_WORKER_JOIN_S``; a decision
an operator applied so in recommend mode is carried on the same way. What the autoscaler cannot
start is recorded as refused with the reason: a rebalance (no request yet), a plan refused, the
provider's refusal. A decision refused is tried again at the next evaluation while it stays
the pipeline's decision.
"""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from rescaler.autoscaling.decisions import Outcome, decision_refused
from rescaler.autoscaling.errors import NotEnoughParallelUnits, NothingToStart
from rescaler.autoscaling.model import DecisionKind, Mode
from rescaler.autoscaling.models import AutoscalingDecision, AutoscalingPolicy
from rescaler.autoscaling.provisioning import (
    decision_failed,
    decision_join_expired,
    decision_workers_request,
)
from rescaler.autoscaling.recommendation import (
    Recommendation,
    recommendation_apply,
    recommendation_get,
)
from rescaler.autoscaling.selectors import autoscaling_policy_get, pipeline_get
from rescaler.runner.workers import ProviderRefused
from workers.rescale import errors

AUTOSCALER = "autoscaler"  # who the audit says started what auto mode started
EVALUATED_MODES = (Mode.RECOMMEND.value, Mode.AUTO.value)


def evaluation_due(*, pipeline_id: int, now: dt.datetime | None = None) -> bool:
    """Whether an evaluation of the pipeline should be queued now, taking the turn if so: its
    policy is in recommend or auto mode and none was queued in the last
    ``RESCALER_AUTOSCALING_INTERVAL_S``. One conditional UPDATE, so that of several processes
    reporting epochs one queues it; a pipeline without a policy (off) matches nothing."""
    now = now or timezone.now()
    since = now - dt.timedelta(seconds=settings.RESCALER_AUTOSCALING_INTERVAL_S)
    taken = (
        AutoscalingPolicy.objects.filter(pipeline_id=pipeline_id, mode__in=EVALUATED_MODES)
        .filter(Q(evaluation_queued_at__isnull=True) | Q(evaluation_queued_at__lte=since))
        .update(evaluation_queued_at=now)
    )
    return bool(taken)


def autoscaling_evaluate(
    *, pipeline: str, now: dt.datetime | None = None
) -> AutoscalingDecision | None:
    """Decide for the pipeline now and record the decision (None in mode off); in auto mode,
    start it when it changes a fragment's size and is not acted on yet, asking the worker
    provider first for the PUs the cluster lacks; a decision awaiting its workers starts once
    they have joined, or fails once it has waited too long."""
    now = now or timezone.now()
    row_of = pipeline_get(name=pipeline)
    policy = autoscaling_policy_get(pipeline=row_of)
    if policy.mode == Mode.OFF:
        return None
    awaiting = AutoscalingDecision.objects.filter(
        pipeline=row_of, outcome=Outcome.AWAITING_WORKERS
    ).exists()
    # auto mode plans, and a decision awaiting its workers; in recommend mode each operator
    # plans their own on looking
    recommendation = recommendation_get(
        user=None, pipeline=pipeline, plan=policy.mode == Mode.AUTO or awaiting, now=now
    )
    row = recommendation.recorded
    if row is not None and row.outcome == Outcome.AWAITING_WORKERS:
        return _await_workers(row, recommendation, now=now)
    if (
        row is None
        or recommendation.policy.mode != Mode.AUTO
        or row.mode != Mode.AUTO.value
        or row.outcome not in (Outcome.PROPOSED, Outcome.REFUSED)
    ):
        return row
    if recommendation.parallel_units_short:
        if row.workers_requested_at is None:
            return decision_workers_request(
                row=row,
                parallel_units_short=recommendation.parallel_units_short,
                policy=recommendation.policy,
                actor_name=AUTOSCALER,
                now=now,
            )
        if row.error_code == ProviderRefused.code:
            return row  # the provider's refusal stands: it is asked once per decision
    return _start_unless_refused(row, recommendation)


def _await_workers(
    row: AutoscalingDecision, recommendation: Recommendation, *, now: dt.datetime
) -> AutoscalingDecision:
    """A decision awaiting the workers it asked for: started once the cluster has the PUs
    (they joined and bootstrapped), failed once it has waited past the join time, else left
    waiting (nothing written)."""
    if not recommendation.parallel_units_short:
        return _start_unless_refused(row, recommendation)
    if decision_join_expired(row, now=now):
        return decision_failed(row=row, actor_name=AUTOSCALER, now=now)
    return row


def _start_unless_refused(
    row: AutoscalingDecision, recommendation: Recommendation
) -> AutoscalingDecision:
    """Start the decision, or record why auto mode cannot start it as it stands."""
    try:
        _startable(recommendation)
    except errors.RescaleError as refused:
        decision_refused(row=row, code=refused.code, reason=str(refused))
        row.refresh_from_db()
        return row
    return _start(row, recommendation)


def _startable(recommendation: Recommendation) -> None:
    """Refuse a decision that auto mode cannot start as it stands."""
    decision = recommendation.decision
    if decision.kind == DecisionKind.REBALANCE:
        raise NothingToStart("; ".join(recommendation.notes) or "a rebalance has no request yet")
    if recommendation.parallel_units_short:
        raise NotEnoughParallelUnits("; ".join(recommendation.notes))
    if recommendation.plan_refused is not None:
        raise recommendation.plan_refused
    if recommendation.plan is None:
        raise NothingToStart("; ".join(recommendation.notes) or "nothing to start")


def _start(row: AutoscalingDecision, recommendation: Recommendation) -> AutoscalingDecision:
    """Start the decision's bound plan as "apply" does, by the autoscaler; its operation is
    linked to the decision when requested (``decisions.decision_carried_out``, which audits it
    as ``autoscaling.decision_started``). A refusal (the plan went stale or was used by another
    evaluation, a fragment became busy) is recorded, unless the decision was carried out
    meanwhile. No lock is taken on the decision first: the plan's own lock and the fragments'
    keep two starts apart, and taking the decision's row before the fragments would be the
    reverse of the order an operator's apply takes them in."""
    assert recommendation.plan is not None
    try:
        with transaction.atomic():
            recommendation_apply(
                user=None,
                pipeline=recommendation.pipeline,
                plan_id=recommendation.plan.plan_id,
                actor_name=AUTOSCALER,
            )
    except errors.RescaleError as refused:
        decision_refused(row=row, code=refused.code, reason=str(refused))
    row.refresh_from_db()
    return row
