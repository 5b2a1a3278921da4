"""The history of decisions (``rescaler.autoscaling.decisions``) without HTTP: a row when the
decision differs from the last one, never one per look; its outcome as it is acted on."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone

from rescaler.audit.models import AuditEvent
from rescaler.autoscaling.decisions import decision_record
from rescaler.autoscaling.model import Decision, DecisionKind, FragmentDecision, Mode
from rescaler.autoscaling.models import AutoscalingDecision
from rescaler.autoscaling.recommendation import recommendation_apply, recommendation_get
from rescaler.autoscaling.services import autoscaling_policy_update
from rescaler.cluster.models import Pipeline
from rescaler.operations.models import RescaleOperation
from rescaler.operations.requests import operation_request
from tests.unit.api.fixtures import FRAGMENT, PIPELINE, make_user, register_cluster
from tests.unit.rescaler.autoscaling.fixtures import report_epochs

pytestmark = pytest.mark.django_db

Outcome = AutoscalingDecision.Outcome
RECOMMEND = {"mode": "recommend", "stabilisation_s": 60, "cooldown_s": 60, "catch_up_s": 120}


def stepped(admin: Any, *, end_at: float | None = None, **policy: Any) -> Pipeline:
    """word_count on 2 PUs whose signals call for 3 (tests/unit/api/test_autoscaling.py), the
    last of its 60 epochs committed at ``end_at`` (default: now)."""
    pipeline = register_cluster(epochs=0)
    report_epochs(
        count=60,
        records=lambda e, pu: 900 if e >= 5 else 300,
        busy_s_per_record=0.002,
        end_at=end_at,
    )
    autoscaling_policy_update(user=admin, pipeline=PIPELINE, changes={**RECOMMEND, **policy})
    return pipeline


@pytest.fixture
def admin(db: None) -> Any:
    return make_user("admin", rescale=True, policy=True)


def test_a_decision_is_recorded_once_with_its_signals(admin: Any) -> None:
    stepped(admin)
    first = recommendation_get(user=admin, pipeline=PIPELINE, plan=True)
    again = recommendation_get(user=admin, pipeline=PIPELINE, plan=False)
    assert first.recorded is not None and again.recorded == first.recorded
    row = AutoscalingDecision.objects.get()
    assert (row.mode, row.kind, row.outcome) == ("recommend", "scale", Outcome.PROPOSED)
    (fragment,) = row.fragments
    assert (fragment["fragment"], fragment["parallel_units_now"]) == (FRAGMENT, 2)
    assert fragment["parallel_units_after"] == 3
    assert fragment["predicted_utilisation"] == pytest.approx(900 / 1500)
    estimate = fragment["estimate"]
    assert estimate["input_rate"] == pytest.approx(900)
    assert estimate["true_rate_per_pu"] == pytest.approx(500)
    assert estimate["busy_fraction"] == pytest.approx(0.9)
    assert estimate["backlog"] is None
    assert set(row.missing_signals) == {"backlog"}
    assert row.request == first.request and row.plan_id == ""
    assert row.reasons[0].startswith(f"{FRAGMENT}: 2 → 3 PUs")


def test_mode_off_records_nothing(admin: Any) -> None:
    stepped(admin, mode="off")
    assert recommendation_get(user=admin, pipeline=PIPELINE, plan=True).recorded is None
    register_cluster()  # and a pipeline without a policy at all
    assert not AutoscalingDecision.objects.exists()


def test_apply_marks_the_decision_applied_by_whom_and_audits_it(admin: Any) -> None:
    stepped(admin)
    recommendation = recommendation_get(user=admin, pipeline=PIPELINE, plan=True)
    assert recommendation.plan is not None
    op = recommendation_apply(user=admin, pipeline=PIPELINE, plan_id=recommendation.plan.plan_id)
    row = AutoscalingDecision.objects.get()
    assert (row.outcome, row.applied_by, row.operation) == (Outcome.APPLIED, admin, op)
    assert row.plan_id == recommendation.plan.plan_id
    assert row.outcome_reason == f"applied by admin: operation {op.operation_id}"
    event = AuditEvent.objects.get(action="autoscaling.decision_applied")
    assert (event.actor, event.object_type, event.object_id) == (admin, "pipeline", PIPELINE)
    assert event.after == {
        "decision": row.pk, "kind": "scale", "mode": "recommend",
        "parallel_units": {FRAGMENT: 3}, "plan_id": row.plan_id,
        "operation_id": op.operation_id, "workers_requested": 0,
    }  # fmt: skip
    # while it runs: another decision (no change), and the applied one keeps its outcome
    during = recommendation_get(user=admin, pipeline=PIPELINE, plan=True).recorded
    assert during is not None and during.kind == "no_change" and during.fragments == []
    assert during.outcome == Outcome.NONE
    assert "is in progress" in during.reasons[0]
    row.refresh_from_db()
    assert row.outcome == Outcome.APPLIED


def test_the_api_s_apply_of_the_request_is_linked_too(admin: Any) -> None:
    """POST operations with the recommendation's request (and its plan_id, or none)."""
    stepped(admin)
    recommendation = recommendation_get(user=admin, pipeline=PIPELINE, plan=False)
    op = operation_request(user=admin, body=recommendation.request)
    assert isinstance(op, RescaleOperation)
    row = AutoscalingDecision.objects.get()
    assert (row.outcome, row.operation, row.plan_id) == (Outcome.APPLIED, op, "")


def test_another_rescale_is_not_the_decision(admin: Any) -> None:
    stepped(admin)
    recommendation_get(user=admin, pipeline=PIPELINE, plan=False)
    body = {"changes": {FRAGMENT: {"added_parallel_units": [3]}}, "reason": "by hand"}
    operation_request(user=admin, body=body)
    assert AutoscalingDecision.objects.get().outcome == Outcome.PROPOSED
    assert not AuditEvent.objects.filter(action__startswith="autoscaling.decision").exists()


def test_a_different_decision_supersedes_one_not_acted_on(admin: Any) -> None:
    stepped(admin)
    first = recommendation_get(user=admin, pipeline=PIPELINE, plan=False).recorded
    autoscaling_policy_update(user=admin, pipeline=PIPELINE, changes={"max_parallel_units": 2})
    second = recommendation_get(user=admin, pipeline=PIPELINE, plan=False).recorded
    assert first is not None and second is not None and second.pk != first.pk
    assert (second.kind, second.outcome) == ("no_change", Outcome.NONE)
    assert second.fragments[0]["parallel_units_after"] == 2
    first.refresh_from_db()
    assert first.outcome == Outcome.SUPERSEDED
    assert first.outcome_reason == f"superseded by decision {second.pk} (no_change)"


def _scale(now: int, after: int) -> Decision:
    fragment = FragmentDecision(FRAGMENT, DecisionKind.SCALE, now, after, ("why",))
    return Decision(PIPELINE, DecisionKind.SCALE, ("why",), {FRAGMENT: fragment})


def test_the_same_figures_after_the_operation_ended_are_a_new_decision(admin: Any) -> None:
    """A decision carried out by an operation that failed: the autoscaler decides again."""
    pipeline = stepped(admin)
    now = timezone.now()
    record = lambda at: decision_record(  # noqa: E731
        pipeline=pipeline, mode=Mode.RECOMMEND, decision=_scale(2, 3), request=None, now=at
    )
    first = record(now)
    assert first is not None and record(now + dt.timedelta(seconds=5)) == first
    op = operation_request(user=admin, body={"changes": {FRAGMENT: {"added_parallel_units": [2]}}})
    assert isinstance(op, RescaleOperation)
    AutoscalingDecision.objects.filter(pk=first.pk).update(operation=op, outcome=Outcome.APPLIED)
    assert record(now + dt.timedelta(seconds=10)) == first  # still running
    RescaleOperation.objects.filter(pk=op.pk).update(status="failed")
    again = record(now + dt.timedelta(seconds=15))
    assert again is not None and again.pk != first.pk
    assert AutoscalingDecision.objects.count() == 2
