"""GET/PUT pipelines/{name}/autoscaling and GET pipelines/{name}/recommendation: the policy,
validated and audited; the recommendation on the stored signals, bound to a dry run whose
plan_id "apply" starts exactly."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from rescaler.audit.models import AuditEvent
from rescaler.autoscaling.models import AutoscalingDecision, AutoscalingPolicy
from rescaler.cluster.models import Pipeline
from rescaler.operations.models import OperationPlan, RescaleOperation
from tests.unit.api.fixtures import (
    FRAGMENT,
    PIPELINE,
    make_user,
    move_the_mapping,
    register_cluster,
    token_client,
)
from tests.unit.rescaler.autoscaling.fixtures import report_epochs

pytestmark = pytest.mark.django_db

POLICY_URL = f"/api/v1/pipelines/{PIPELINE}/autoscaling"
RECOMMENDATION_URL = f"/api/v1/pipelines/{PIPELINE}/recommendation"
RECOMMEND = {"mode": "recommend", "stabilisation_s": 60, "cooldown_s": 60, "catch_up_s": 120}


def _stepped(**cluster: Any) -> Pipeline:
    """word_count on PUs 0 and 1 at 2 ms a record (500 records per busy second of a PU): 300
    records per PU per 2 s epoch, then 900 (90 % busy): 900 records/s need 3 PUs at 70 %.
    The PU rows carry busy_s, as a runner whose PuLoad reports it would store them."""
    pipeline = register_cluster(epochs=0, **cluster)
    report_epochs(count=60, records=lambda e, pu: 900 if e >= 5 else 300, busy_s_per_record=0.002)
    return pipeline


def test_the_default_policy_is_off(cluster: Pipeline, viewer_client: APIClient) -> None:
    response = viewer_client.get(POLICY_URL)
    assert response.status_code == 200
    body = response.json()
    assert body["pipeline"] == PIPELINE and body["mode"] == "off"
    assert body["target_utilisation"] == 0.7
    assert body["scale_in_blackout_hours"] == []
    assert viewer_client.get("/api/v1/pipelines/nope/autoscaling").json()["code"] == (
        "unknown_pipeline"
    )


@pytest.fixture
def admin(db: None) -> Any:
    """Who sets policies: the admin role's permission, with an operator's."""
    return make_user("admin", rescale=True, policy=True)


@pytest.fixture
def admin_client(admin: Any) -> APIClient:
    return token_client(admin)


def test_an_operator_may_not_set_a_policy(cluster: Pipeline, operator: Any) -> None:
    """A policy in auto mode starts rescales by itself: setting one is an admin's."""
    response = token_client(operator).put(POLICY_URL, {"mode": "auto"}, format="json")
    assert response.status_code == 403, response.content
    assert "autoscaling.change_autoscalingpolicy" in response.json()["detail"]
    assert not AuditEvent.objects.filter(action="autoscaling.policy_updated").exists()


def test_put_sets_the_policy_and_audits_it(
    cluster: Pipeline, admin: Any, admin_client: APIClient
) -> None:
    response = admin_client.put(
        POLICY_URL,
        {"mode": "recommend", "min_parallel_units": 2, "scale_in_blackout_hours": [9, 8]},
        format="json",
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["mode"] == "recommend" and body["min_parallel_units"] == 2
    assert body["scale_in_blackout_hours"] == [8, 9]
    assert body["max_parallel_units"] == 64  # left out: kept
    row = AutoscalingPolicy.objects.get(pipeline=cluster)
    assert (row.mode, row.min_parallel_units, row.updated_by) == ("recommend", 2, admin)
    event = AuditEvent.objects.get(action="autoscaling.policy_updated")
    assert (event.actor_name, event.object_type, event.object_id) == (
        "admin",
        "pipeline",
        PIPELINE,
    )
    assert event.before["mode"] == "off" and event.after["mode"] == "recommend"
    assert event.after["scale_in_blackout_hours"] == [8, 9]
    # the same again changes nothing and records nothing
    assert admin_client.put(POLICY_URL, {"mode": "recommend"}, format="json").status_code == 200
    assert AuditEvent.objects.filter(action="autoscaling.policy_updated").count() == 1
    assert admin_client.get(POLICY_URL).json() == body


@pytest.mark.parametrize(
    ("sent", "status", "code", "field"),
    [
        ({"min_parallel_units": 5, "max_parallel_units": 2}, 400, "invalid_policy", "min_parallel_units"),
        ({"target_utilisation": 0}, 400, "invalid_policy", "target_utilisation"),
        ({"target_utilisation": 1.5}, 400, "invalid_policy", "target_utilisation"),
        ({"max_step": 0}, 400, "invalid_policy", "max_step"),
        ({"catch_up_s": -1}, 400, "invalid_policy", "catch_up_s"),
        ({"max_parallel_units": 2**40}, 400, "invalid_policy", "max_parallel_units"),
        ({"scale_in_blackout_hours": [24]}, 400, "invalid_policy", "scale_in_blackout_hours"),
        ({"min_parallel_units": 2**70, "max_parallel_units": 2**70}, 400, "invalid_policy", "max_parallel_units"),
        ({"cooldown_s": 10**400}, 400, "invalid_parameters", None),
        ({"mode": "sometimes"}, 400, "invalid_parameters", None),
        ({"scale_in_blackout_hours": ["8", True]}, 400, "invalid_parameters", None),
        ({"target_utilisation": "high"}, 400, "invalid_parameters", None),
        ({"speed": 3}, 400, "malformed_request", None),
        ([1, 2], 400, "malformed_request", None),
    ],
)  # fmt: skip
def test_a_bad_policy_is_refused_with_its_reason_and_changes_nothing(
    cluster: Pipeline,
    admin_client: APIClient,
    sent: Any,
    status: int,
    code: str,
    field: str | None,
) -> None:
    response = admin_client.put(POLICY_URL, sent, format="json")
    assert response.status_code == status, response.content
    body = response.json()
    assert body["code"] == code
    if field is not None:
        assert body["field"] == field
        assert field in body["errors"] and field in body["detail"]
    assert not AuditEvent.objects.filter(action="autoscaling.policy_updated").exists()
    assert admin_client.get(POLICY_URL).json()["mode"] == "off"


def test_a_viewer_may_not_set_a_policy(cluster: Pipeline, viewer_client: APIClient) -> None:
    response = viewer_client.put(POLICY_URL, {"mode": "recommend"}, format="json")
    assert response.status_code == 403
    assert "autoscaling.change_autoscalingpolicy" in response.json()["detail"]
    assert not AutoscalingPolicy.objects.exists()


def test_off_recommends_nothing(cluster: Pipeline, admin_client: APIClient) -> None:
    body = admin_client.get(RECOMMENDATION_URL).json()
    assert body["kind"] == "no_change" and body["decision_id"] is None
    assert "off" in body["reasons"][0]
    assert body["request"] is None and body["plan"] is None


def test_reports_without_busy_seconds_size_nothing_and_say_what_is_missing(
    admin_client: APIClient,
) -> None:
    """Reports without busy seconds (an older runner's) and without a backlog: no size is
    proposed, and the answer names the two signals and what is missing."""
    register_cluster(epochs=0)
    report_epochs(count=60, records=lambda e, pu: 900 if e >= 5 else 300)
    admin_client.put(POLICY_URL, RECOMMEND, format="json")
    body = admin_client.get(RECOMMENDATION_URL).json()
    assert body["kind"] == "no_change"
    assert set(body["missing_signals"]) == {"busy_s", "backlog"}
    assert "PuLoad.busy_s" in body["missing_signals"]["busy_s"]
    (fragment,) = body["fragments"]
    assert fragment["fragment"] == FRAGMENT
    assert fragment["parallel_units_needed"] is None
    assert "true processing rate is unknown" in fragment["reasons"][0]
    assert fragment["estimate"]["input_rate"] == pytest.approx(900)
    assert fragment["estimate"]["true_rate_per_pu"] is None


def test_a_recommendation_is_a_binding_dry_run_that_apply_starts(
    admin_client: APIClient,
) -> None:
    _stepped()
    admin_client.put(POLICY_URL, RECOMMEND, format="json")
    body = admin_client.get(RECOMMENDATION_URL).json()
    assert body["kind"] == "scale", body["reasons"]
    (fragment,) = body["fragments"]
    assert (fragment["parallel_units_now"], fragment["parallel_units_after"]) == (2, 3)
    assert fragment["estimate"]["true_rate_per_pu"] == pytest.approx(500)
    assert fragment["predicted_utilisation"] == pytest.approx(900 / 1500)
    assert body["request"]["changes"] == {
        FRAGMENT: {"added_parallel_units": [2], "removed_parallel_units": []}
    }
    plan = body["plan"]
    assert plan["plan_id"] and plan["fragments"][FRAGMENT]["parallel_units_after"] == [0, 1, 2]
    assert body["decision_id"] == AutoscalingDecision.objects.get().pk  # in the history
    # asked again: the same plan, not one more per look
    again = admin_client.get(RECOMMENDATION_URL).json()
    assert again["plan"]["plan_id"] == plan["plan_id"]
    assert OperationPlan.objects.count() == 1
    # apply: the request and its plan_id start exactly that plan
    response = admin_client.post(
        "/api/v1/operations", {**body["request"], "plan_id": plan["plan_id"]}, format="json"
    )
    assert response.status_code == 202, response.content
    op = RescaleOperation.objects.get()
    assert op.steps.count() == plan["steps_total"]
    assert op.reason.startswith("autoscaler: ")
    requested = AuditEvent.objects.get(action="operation.requested")
    assert requested.after["plan_id"] == plan["plan_id"]
    # and while it runs, nothing more is decided
    body = admin_client.get(RECOMMENDATION_URL).json()
    assert body["kind"] == "no_change"
    assert f"operation {op.operation_id} is in progress" in body["reasons"][0]


def test_a_plan_gone_stale_is_planned_again(admin_client: APIClient) -> None:
    _stepped()
    admin_client.put(POLICY_URL, RECOMMEND, format="json")
    first = admin_client.get(RECOMMENDATION_URL).json()
    move_the_mapping()  # the runner records a new mapping of word_count
    stale = admin_client.post(
        "/api/v1/operations",
        {**first["request"], "plan_id": first["plan"]["plan_id"]},
        format="json",
    )
    assert stale.status_code == 409 and stale.json()["code"] == "plan_stale"
    second = admin_client.get(RECOMMENDATION_URL).json()
    assert second["plan"]["plan_id"] != first["plan"]["plan_id"]
    assert second["plan"]["mapping_versions"] == {FRAGMENT: 2}


def test_a_viewer_sees_the_decision_without_a_plan(
    admin_client: APIClient, viewer_client: APIClient
) -> None:
    _stepped()
    admin_client.put(POLICY_URL, RECOMMEND, format="json")
    body = viewer_client.get(RECOMMENDATION_URL).json()
    assert body["kind"] == "scale"
    assert body["request"] is not None and body["plan"] is None
    assert any("operations.rescale" in n for n in body["notes"])
    assert not OperationPlan.objects.exists()


def test_without_free_pus_the_recommendation_says_to_add_workers(
    admin_client: APIClient,
) -> None:
    _stepped(workers={"local-0": [0, 1]})
    admin_client.put(POLICY_URL, RECOMMEND, format="json")
    body = admin_client.get(RECOMMENDATION_URL).json()
    assert body["kind"] == "scale"
    assert body["request"] is None and body["plan"] is None
    assert "needs 1 more PU(s) and the cluster has 0 free" in body["notes"][0]


def test_the_recommendation_of_an_unknown_pipeline_is_404(viewer_client: APIClient) -> None:
    response = viewer_client.get("/api/v1/pipelines/nope/recommendation")
    assert response.status_code == 404 and response.json()["code"] == "unknown_pipeline"
