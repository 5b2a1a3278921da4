"""The history of the autoscaler's decisions (``AutoscalingDecision``): recorded when the decision
on a pipeline's signals differs from the last one recorded (not one row per look or per epoch),
then given its outcome as it is acted on: applied by an operator, started in ``auto`` mode,
superseded by the next decision, refused with the reason, awaiting the workers the provider was
asked for (``provisioning``), or failed when they did not join in time.

A decision "differs" when its mode, kind, or any fragment's PUs now or after differ: the
figures it rests on (rates, busy fractions) move every epoch and are kept from the decision
that was recorded. A decision whose operation has ended is done: the same figures again are a
new decision (the operation failed or was cancelled, and the autoscaler decides again). So is a
failed one once the policy's cooldown has passed since it failed: until then the same figures
are the same decision, which asks the provider nothing more.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from rescaler.audit.services import audit_record
from rescaler.autoscaling.model import Decision, DecisionKind, FragmentDecision, Mode
from rescaler.autoscaling.models import AutoscalingDecision, AutoscalingPolicy
from rescaler.cluster.models import Pipeline
from rescaler.operations.models import RescaleOperation
from workers.rescale import errors
from workers.rescale.protocol import AuditObject, OperationRequest

Outcome = AutoscalingDecision.Outcome
# outcomes of a decision not acted on yet: an operation may still carry it out
OPEN = (Outcome.PROPOSED, Outcome.REFUSED, Outcome.SUPERSEDED, Outcome.AWAITING_WORKERS)
# outcomes the next, different decision supersedes: nothing was started for them
SUPERSEDABLE = (Outcome.PROPOSED, Outcome.AWAITING_WORKERS)


def fragment_json(decision: FragmentDecision) -> dict[str, Any]:
    """A fragment's decision as the recommendation answers it and the history keeps it."""
    estimate = decision.estimate
    return {
        "fragment": decision.fragment,
        "kind": decision.kind.value,
        "parallel_units_now": decision.parallel_units_now,
        "parallel_units_after": decision.parallel_units_after,
        "parallel_units_needed": decision.parallel_units_needed,
        "predicted_utilisation": decision.predicted_utilisation,
        "predicted_skew": decision.predicted_skew,
        "load_per_pu_now": {str(pu): load for pu, load in decision.load_per_pu_now.items()},
        "reasons": list(decision.reasons),
        "estimate": vars(estimate) if estimate is not None else None,
    }


def _key(mode: str, kind: str, fragments: list[dict[str, Any]]) -> tuple[Any, ...]:
    """What makes a decision another one (module docstring)."""
    sizes = tuple(
        (f["fragment"], f["parallel_units_now"], f["parallel_units_after"]) for f in fragments
    )
    return (mode, kind, sizes)


def _done(row: AutoscalingDecision, *, now: dt.datetime, cooldown_s: float) -> bool:
    """Whether the decision was carried out and its operation has ended, or it failed at least
    ``cooldown_s`` ago (module docstring)."""
    if row.outcome == Outcome.FAILED:
        failed_at = row.outcome_at or row.decided_at
        return failed_at + dt.timedelta(seconds=cooldown_s) <= now
    return row.operation_id is not None and row.operation is not None and row.operation.is_final


def decision_record(
    *,
    pipeline: Pipeline,
    mode: Mode,
    decision: Decision,
    request: dict[str, Any] | None,
    now: dt.datetime,
) -> AutoscalingDecision | None:
    """The pipeline's decision as recorded: a new row when it differs from the last one (which,
    not acted on, is superseded by it), else the last one, given the request that applies it
    now if it has not been acted on. Nothing is recorded in mode off (nothing is decided).
    Serialised per pipeline on its policy's row."""
    if mode == Mode.OFF:
        return None
    fragments = [fragment_json(f) for f in decision.fragments.values()]
    with transaction.atomic():
        policy = (
            AutoscalingPolicy.objects.select_for_update(no_key=True)
            .filter(pipeline=pipeline)
            .first()
        )
        if policy is None:  # the default policy is off
            return None
        last = (
            AutoscalingDecision.objects.filter(pipeline=pipeline)
            .select_related("operation")
            .order_by("-decided_at", "-id")
            .first()
        )
        if (
            last is not None
            and _key(last.mode, last.kind, last.fragments)
            == _key(mode.value, decision.kind.value, fragments)
            and not _done(last, now=now, cooldown_s=policy.cooldown_s)
        ):
            if last.request != request and last.outcome in OPEN:
                # the same decision; what applies it follows the cluster (PUs free now)
                last.request = request
                last.save(update_fields=["request"])
            return last
        row = AutoscalingDecision.objects.create(
            pipeline=pipeline,
            decided_at=now,
            mode=mode.value,
            kind=decision.kind.value,
            reasons=list(decision.reasons),
            fragments=fragments,
            missing_signals=dict(decision.missing_signals),
            request=request,
            outcome=Outcome.NONE if decision.kind == DecisionKind.NO_CHANGE else Outcome.PROPOSED,
        )
        if last is not None and last.outcome in SUPERSEDABLE:
            asked = (
                f"; the {last.workers_requested} worker(s) asked of the provider for it stay"
                if last.workers_requested
                else ""
            )
            AutoscalingDecision.objects.filter(pk=last.pk, outcome=last.outcome).update(
                outcome=Outcome.SUPERSEDED,
                outcome_reason=f"superseded by decision {row.pk} ({row.kind}){asked}",
                outcome_at=now,
            )
    return row


def _changes(body: dict[str, Any] | None) -> dict[str, Any] | None:
    """A request's changes as an operation stores them (``RescaleOperation.changes``)."""
    if not body:
        return None
    try:
        request = OperationRequest.parse(body)
    except errors.RescaleError:
        return None
    return {name: change.to_json() for name, change in request.changes.items()}


def decision_carried_out(
    *, operation: RescaleOperation, plan_id: str | None = None, actor_name: str = ""
) -> None:
    """An operation was requested: if it is the request of one of the pipeline's decisions not
    acted on yet (its reason and changes), that decision was applied by the operation's
    requester, or, with no requester, started by ``actor_name`` (the autoscaler); a decision an
    operator applied by asking for its workers stays applied by them when the autoscaler starts
    it once they joined. Audited as
    ``autoscaling.decision_applied`` or ``autoscaling.decision_started``, with ``plan_id``, the
    plan it started from. In the transaction that created the operation (the receiver of
    ``operation_requested``); the newest such decision of the pipeline is the one."""
    if not operation.reason:
        return
    candidates = AutoscalingDecision.objects.select_for_update(of=("self",)).filter(
        pipeline_id=operation.pipeline_id,
        outcome__in=OPEN,
        kind=DecisionKind.SCALE,
        request__reason=operation.reason,
    )
    for row in candidates.order_by("-decided_at", "-id")[:5]:
        if _changes(row.request) != operation.changes:
            continue
        user = operation.requested_by
        applier = user if user is not None else row.applied_by
        row.outcome = Outcome.APPLIED if applier is not None else Outcome.STARTED
        row.applied_by = applier
        row.operation = operation
        row.plan_id = plan_id or ""
        joined = f"; its {row.workers_requested} worker(s) joined" if row.workers_requested else ""
        row.outcome_reason = (
            (f"applied by {applier.get_username()}" if applier is not None else "")
            + (f", started by the {actor_name or 'system'}" if user is None and applier else "")
            + (f"started by the {actor_name or 'system'}" if applier is None else "")
            + joined
            + f": operation {operation.operation_id}"
        )
        row.error_code = ""
        row.outcome_at = timezone.now()
        row.save(
            update_fields=[
                "outcome", "applied_by", "operation", "plan_id", "outcome_reason", "error_code",
                "outcome_at",
            ]
        )  # fmt: skip
        audit_record(
            actor=user,
            actor_name=actor_name if user is None else "",
            action=f"autoscaling.decision_{row.outcome}",
            obj=(AuditObject.PIPELINE, row.pipeline.name),
            after=decision_summary(row),
        )
        return


def decision_refused(*, row: AutoscalingDecision, code: str, reason: str) -> bool:
    """Record that the decision could not be started (auto mode): why, and the refusal's code.
    A decision carried out meanwhile keeps its outcome, and the same refusal again writes
    nothing (it is tried at each evaluation); answers whether this one was written."""
    reason = reason[:2000]
    return bool(
        AutoscalingDecision.objects.filter(pk=row.pk, outcome__in=OPEN)
        .exclude(outcome=Outcome.REFUSED, error_code=code[:64], outcome_reason=reason)
        .update(
            outcome=Outcome.REFUSED,
            outcome_reason=reason,
            error_code=code[:64],
            outcome_at=timezone.now(),
        )
    )


def decision_summary(row: AutoscalingDecision) -> dict[str, Any]:
    """A decision as its audit events show it."""
    return {
        "decision": row.pk,
        "kind": row.kind,
        "mode": row.mode,
        "parallel_units": {f["fragment"]: f["parallel_units_after"] for f in row.fragments},
        "plan_id": row.plan_id or None,
        "workers_requested": row.workers_requested,
        "operation_id": row.operation.operation_id if row.operation is not None else None,
    }


def decision_list(*, pipeline: Pipeline | None = None) -> QuerySet[AutoscalingDecision]:
    """The decisions, newest first (of one pipeline), with what the history shows of each."""
    rows = AutoscalingDecision.objects.select_related("pipeline", "applied_by", "operation")
    if pipeline is not None:
        rows = rows.filter(pipeline=pipeline)
    return rows.order_by("-decided_at", "-id")


def decision_newest() -> list[AutoscalingDecision]:
    """Each pipeline's newest decision (a pipeline that has one), by pipeline name."""
    return list(
        AutoscalingDecision.objects.select_related("pipeline")
        .order_by("pipeline__name", "pipeline_id", "-decided_at", "-id")
        .distinct("pipeline__name", "pipeline_id")
    )


def decision_pipelines() -> list[str]:
    """The names of the pipelines that have decisions, in order."""
    return list(
        AutoscalingDecision.objects.order_by("pipeline__name")
        .values_list("pipeline__name", flat=True)
        .distinct()
    )
