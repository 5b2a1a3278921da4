"""The recommendation: the decision model's answer on a pipeline's current signals, and, when
it changes the size of a fragment, a binding dry run of exactly that change.

The dry run is the operations' own (``rescaler.operations.requests.operation_request`` with
``dry_run``): its ``plan_id`` and the request it answered are part of the recommendation, and
"apply" is ``POST /api/v1/operations`` with that request and ``plan_id``, which starts exactly
the plan shown or is refused as stale. A recommendation asked again while its plan may still
start answers the same plan (no new one per look).

A decision that needs more PUs than the cluster has free says how many workers it would ask the
worker provider for (``workers_needed``); "apply" is then that ask
(``recommendation_workers_request``), and the decision starts once they have joined.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from rescaler.autoscaling.decisions import decision_record
from rescaler.autoscaling.errors import NothingToStart
from rescaler.autoscaling.model import Decision, DecisionKind, Policy
from rescaler.autoscaling.models import AutoscalingDecision
from rescaler.autoscaling.provisioning import (
    decision_workers_request,
    worker_shape,
    workers_needed,
)
from rescaler.autoscaling.selectors import autoscaling_policy_get, pipeline_get
from rescaler.autoscaling.signals import pipeline_signals, read_window_s
from rescaler.autoscaling.sizing import decide
from rescaler.cluster.models import Pipeline
from rescaler.operations import plans
from rescaler.operations.models import OperationPlan, RescaleOperation
from rescaler.operations.requests import operation_request
from rescaler.operations.selectors import cluster_view
from workers.rescale import errors
from workers.rescale.protocol import OperationRequest
from workers.rescale.request import ClusterView

# a plan kept for a recommendation is answered again only while it has this long left to start
PLAN_REUSE_MARGIN = dt.timedelta(seconds=60)
REASON_PREFIX = "autoscaler"


@dataclass(frozen=True)
class Recommendation:
    pipeline: str
    policy: Policy
    decision: Decision
    computed_at: dt.datetime
    # the body POST /api/v1/operations takes (with plan_id) to apply it; None: nothing to apply
    request: dict[str, Any] | None = None
    plan: OperationPlan | None = None  # the binding dry run of ``request``
    notes: tuple[str, ...] = ()  # what kept the request or its plan from being what was decided
    # fragment -> the PUs it needs more than the cluster has free
    parallel_units_short: dict[str, int] = dataclasses.field(default_factory=dict)
    plan_refused: errors.RescaleError | None = None  # why ``request`` could not be planned
    # the workers "apply" (or auto mode) asks the worker provider for: the PUs short
    workers_needed: int = 0
    recorded: AutoscalingDecision | None = None  # the decision in the history (None: mode off)


def recommendation_get(
    *, user: Any, pipeline: str, plan: bool, now: dt.datetime | None = None
) -> Recommendation:
    """The decision on the pipeline's signals now under its policy, recorded in the history
    when it differs from the last one; with ``plan`` (the user may plan rescales), the binding
    dry run of a decision that changes a fragment's size (``user`` None: the autoscaler's
    own)."""
    row = pipeline_get(name=pipeline)
    now = now or timezone.now()
    found = _recommendation(user=user, pipeline=row, plan=plan, now=now)
    recorded = decision_record(
        pipeline=row, mode=found.policy.mode, decision=found.decision, request=found.request,
        now=now,
    )  # fmt: skip
    return dataclasses.replace(found, recorded=recorded)


def _recommendation(
    *, user: Any, pipeline: Pipeline, plan: bool, now: dt.datetime
) -> Recommendation:
    row = pipeline
    policy = autoscaling_policy_get(pipeline=row)
    signals = pipeline_signals(
        pipeline=row, window_s=read_window_s(policy.stabilisation_s), now=now
    )
    decision = decide(signals=signals, policy=policy)
    base = Recommendation(row.name, policy, decision, now)
    if decision.kind != DecisionKind.SCALE:
        notes: tuple[str, ...] = ()
        if decision.kind == DecisionKind.REBALANCE:
            notes = (
                "a rebalance at the same size has no request yet: POST operations takes a "
                "change of PUs, and its weighted plan balances bytes, not records",
            )
        return dataclasses.replace(base, notes=notes)
    cluster = cluster_view(row)
    changes, notes, short = _changes(decision, cluster)
    needed = workers_needed(parallel_units_short=short, policy=policy, shape=worker_shape(row))
    if needed:
        notes = (
            *notes,
            f"apply asks the worker provider for {needed} worker(s); the rescale starts once "
            f"they have joined",
        )
    base = dataclasses.replace(base, parallel_units_short=short, workers_needed=needed)
    if not changes:
        return dataclasses.replace(base, notes=notes)
    targets = ", ".join(f"{name} {n} PUs" for name, n in sorted(decision.parallel_units.items()))
    body: dict[str, Any] = {
        "changes": changes,
        "strategy": "live",
        "reason": f"{REASON_PREFIX}: {targets}"[:500],
    }
    if not plan:
        return dataclasses.replace(
            base,
            request=body,
            notes=(*notes, "planning it needs the operations.rescale permission"),
        )
    try:
        stored = _plan(user=user, body=body, now=now)
    except errors.RescaleError as exc:
        return dataclasses.replace(
            base,
            request=body,
            notes=(*notes, f"it cannot be planned now: {exc} ({exc.code})"),
            plan_refused=exc,
        )
    return dataclasses.replace(base, request=body, plan=stored, notes=notes)


def _changes(
    decision: Decision, cluster: ClusterView
) -> tuple[dict[str, dict[str, list[int]]], tuple[str, ...], dict[str, int]]:
    """The request's changes for the decision's sizes: the free PUs that may take vnodes (the
    lowest numbers first) to add, and the PUs that may not (cordoned, lost), then the highest,
    to remove; and what the cluster could not give (said, and by fragment the PUs short)."""
    changes: dict[str, dict[str, list[int]]] = {}
    notes: list[str] = []
    short: dict[str, int] = {}
    for name, after in sorted(decision.parallel_units.items()):
        frag = cluster.fragments[name]
        units = list(frag.parallel_units)
        if after > len(units):
            free = [
                pu
                for pu in sorted(cluster.pu_worker)
                if pu not in units and _may_take_vnodes(cluster, pu)
            ]
            wanted = after - len(units)
            added = free[:wanted]
            if len(added) < wanted:
                short[name] = wanted - len(added)
                notes.append(
                    f"{name} needs {wanted} more PU(s) and the cluster has {len(free)} free: "
                    f"the worker provider is asked for the rest"
                )
            if added:
                changes[name] = {"added_parallel_units": added, "removed_parallel_units": []}
        elif after < len(units):
            order = [pu for pu in sorted(units) if not cluster.open_to_vnodes(pu)] + [
                pu for pu in sorted(units, reverse=True) if cluster.open_to_vnodes(pu)
            ]
            removed = sorted(order[: len(units) - after])
            changes[name] = {"added_parallel_units": [], "removed_parallel_units": removed}
    return changes, tuple(notes), short


def _may_take_vnodes(cluster: ClusterView, pu: int) -> bool:
    """Whether validation would let ``pu`` be added: active, on a live and bootstrapped
    worker (``workers.rescale.request.check_open``'s rule)."""
    worker = cluster.pu_worker[pu]
    bootstrapped = cluster.worker_bootstrapped_epoch.get(worker)
    return (
        cluster.open_to_vnodes(pu)
        and cluster.worker_alive.get(worker, False)
        and (bootstrapped is None or bootstrapped >= 0)
    )


def _plan(*, user: Any, body: dict[str, Any], now: dt.datetime) -> OperationPlan:
    """The user's unused plan of exactly this request, if it may still start for a while; else
    a new dry run's."""
    request = OperationRequest.parse({**body, "dry_run": True})
    planned = {**request.to_json(), "dry_run": False}
    candidates = OperationPlan.objects.filter(
        requested_by=user,
        used_at__isnull=True,
        expires_at__gt=now + PLAN_REUSE_MARGIN,
        request=planned,
    ).order_by("-created_at")
    for stored in candidates[:1]:
        pipeline = stored.pipeline
        changed = plans.plan_changes(
            stored,
            request=OperationRequest.parse(body),
            cluster=cluster_view(pipeline),
            versions=plans.mapping_versions(pipeline, list(stored.mapping_versions)),
            now=now,
        )
        if not changed:
            return stored
    result = operation_request(user=user, body={**body, "dry_run": True})
    assert isinstance(result, OperationPlan)  # a dry run answers its plan
    return result


def recommendation_apply(
    *, user: Any, pipeline: str, plan_id: str, actor_name: str = ""
) -> RescaleOperation:
    """ "Apply": start the recommendation's plan ``plan_id`` (the user's own dry run of
    ``pipeline``; no user: the autoscaler's, ``actor_name`` saying who) with the very request
    it answered, so that exactly that plan starts or is refused (``plan_stale`` when the
    mapping moved since, ``fragment_busy``...). The decision it carries out is marked in the
    history (``decisions.decision_carried_out``)."""
    plan_id = plans.plan_id_parse(plan_id)
    stored = OperationPlan.objects.filter(
        plan_id=plan_id, pipeline__name=pipeline, requested_by=user
    ).first()
    if stored is None:
        raise plans.UnknownPlan(f"no plan {plan_id} of yours for pipeline {pipeline!r}")
    result = operation_request(
        user=user, body=dict(stored.request), plan_id=plan_id, actor_name=actor_name
    )
    assert isinstance(result, RescaleOperation)  # a plan_id starts its operation
    return result


def recommendation_workers_request(*, user: Any, pipeline: str) -> AutoscalingDecision:
    """ "Apply" on a recommendation that needs more PUs than the cluster has free: ask the
    worker provider for its workers (``workers_needed``), once per decision, as auto mode asks
    for them; the decision, applied by ``user``, then awaits them and starts once they joined
    (``evaluation``). Refused (``nothing_to_start``) when the cluster has the PUs: apply its
    plan then."""
    found = recommendation_get(user=user, pipeline=pipeline, plan=False)
    row = found.recorded
    if row is None or not found.parallel_units_short:
        raise NothingToStart(
            f"pipeline {pipeline!r}: the recommendation needs no PU the cluster does not have "
            f"free; apply its plan"
        )
    return decision_workers_request(
        row=row, parallel_units_short=found.parallel_units_short, policy=found.policy, user=user
    )
