"""A binding dry run: POST /api/v1/operations with the plan_id of a dry run starts exactly that
plan, or answers 409 plan_stale with what changed (docs/api.md, "A binding dry run")."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from rescaler.audit.models import AuditEvent
from rescaler.cluster.models import Fragment, ParallelUnit, Pipeline, Worker
from rescaler.operations.models import OperationPlan, RescaleOperation
from tests.unit.api.fixtures import (
    FRAGMENT,
    make_user,
    move_the_mapping,
    request_body,
    skew_the_load,
    token_client,
)

pytestmark = pytest.mark.django_db

URL = "/api/v1/operations"


def dry_run(client: APIClient, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post(URL, {**body, "dry_run": True}, format="json")
    assert response.status_code == 200, response.content
    return dict(response.json())


def start(client: APIClient, body: dict[str, Any], plan_id: str) -> Any:
    return client.post(URL, {**body, "plan_id": plan_id}, format="json")


def stale(response: Any) -> list[dict[str, Any]]:
    assert response.status_code == 409, response.content
    error = response.json()
    assert error["code"] == "plan_stale" and error["field"] == "plan_id", error
    assert "Plan again" in error["detail"]
    return list(error["changed"])


def test_a_dry_run_answers_a_plan_id_bound_to_its_mapping_versions(
    operator_client: APIClient, cluster: Pipeline
) -> None:
    plan = dry_run(operator_client, request_body(added_parallel_units=[2, 3]))
    assert len(plan["plan_id"]) == 32
    assert plan["mapping_versions"] == {FRAGMENT: 1}
    expires = dt.datetime.fromisoformat(plan["expires_at"])
    assert dt.timedelta(minutes=14) < expires - timezone.now() <= dt.timedelta(minutes=15)
    stored = OperationPlan.objects.get(plan_id=plan["plan_id"])
    assert stored.requested_by.username == "operator" and stored.used_at is None
    assert stored.request["dry_run"] is False
    assert not RescaleOperation.objects.exists()
    assert not AuditEvent.objects.exists(), "a dry run still changes nothing in the cluster"


def test_plan_id_starts_exactly_the_plan_shown_not_a_new_one(
    operator_client: APIClient, cluster: Pipeline
) -> None:
    body = {**request_body(added_parallel_units=[2, 3]), "weighted": True, "reason": "peak"}
    shown = dry_run(operator_client, body)
    planned = OperationPlan.objects.get(plan_id=shown["plan_id"]).plan_record()
    skew_the_load()
    replanned = dry_run(operator_client, body)
    again = OperationPlan.objects.get(plan_id=replanned["plan_id"]).plan_record()
    assert again.steps != planned.steps, "the new load makes a different plan"
    assert replanned["fragments"] != shown["fragments"]

    response = start(operator_client, body, shown["plan_id"])
    assert response.status_code == 202, response.content
    op = response.json()
    assert [{k: s[k] for k in ("step", "fragment", "source_pu", "target_pu", "vnodes", "keys",
             "bytes")} for s in op["steps"]] == [
        {k: v for k, v in s.to_json().items() if k != "key_range"} for s in planned.steps
    ]  # fmt: skip
    assert all(s["key_range_index"] is None for s in op["steps"]), "no vnode over a cap"
    assert op["plan"]["fragments"] == planned.to_json()["fragments"]
    assert op["plan"]["estimated_duration_s"] == shown["estimated_duration_s"]
    # and it is the plan the dry run summed up
    fragment, summary = op["plan"]["fragments"][FRAGMENT], shown["fragments"][FRAGMENT]
    per_pu = ("sources", "targets", "vnodes_cut", "key_range_steps")  # the last two: of steps
    assert {k: fragment[k] for k in summary if k not in per_pu} == {
        k: v for k, v in summary.items() if k not in per_pu
    }
    for side in per_pu[:2]:
        assert sum(s["vnodes"] for s in summary[side]) == len(fragment["moves"])
    assert len(op["steps"]) == shown["steps_total"]
    stored = OperationPlan.objects.get(plan_id=shown["plan_id"])
    assert stored.used_at is not None and stored.operation.operation_id == op["operation_id"]
    requested = AuditEvent.objects.get(action="operation.requested")
    assert requested.after["plan_id"] == shown["plan_id"]
    assert requested.after["reason"] == "peak"


def test_a_plan_is_stale_once_its_fragments_mapping_moved(
    operator_client: APIClient, cluster: Pipeline
) -> None:
    body = request_body(added_parallel_units=[2, 3])
    plan = dry_run(operator_client, body)
    move_the_mapping(version=2)
    changed = stale(start(operator_client, body, plan["plan_id"]))
    assert changed == [
        {"what": "mapping_version", "fragment": FRAGMENT, "planned": 1, "now": 2},
    ]
    assert not RescaleOperation.objects.exists() and not AuditEvent.objects.exists()
    assert OperationPlan.objects.get(plan_id=plan["plan_id"]).used_at is None
    # a new dry run binds to the new version and starts
    fresh = dry_run(operator_client, body)
    assert fresh["mapping_versions"] == {FRAGMENT: 2}
    assert start(operator_client, body, fresh["plan_id"]).status_code == 202


def test_a_plan_is_stale_once_its_fragments_parallel_units_changed(
    operator_client: APIClient, cluster: Pipeline
) -> None:
    body = request_body(added_parallel_units=[2])
    plan = dry_run(operator_client, body)
    Fragment.objects.get(name=FRAGMENT).parallel_units.remove(ParallelUnit.objects.get(number=1))
    assert stale(start(operator_client, body, plan["plan_id"])) == [
        {"what": "parallel_units", "fragment": FRAGMENT, "planned": [0, 1], "now": [0]},
    ]


def test_an_expired_plan_is_stale(
    operator_client: APIClient, cluster: Pipeline, settings: Any
) -> None:
    body = request_body(added_parallel_units=[2])
    plan = dry_run(operator_client, body)
    gone = timezone.now() - dt.timedelta(seconds=1)
    OperationPlan.objects.filter(plan_id=plan["plan_id"]).update(expires_at=gone)
    (change,) = stale(start(operator_client, body, plan["plan_id"]))
    assert change == {"what": "expired", "at": gone.isoformat()}
    # the time to live is a setting
    settings.RESCALER_PLAN_TTL_S = 60
    short = dry_run(operator_client, body)
    left = dt.datetime.fromisoformat(short["expires_at"]) - timezone.now()
    assert dt.timedelta(seconds=50) < left <= dt.timedelta(seconds=60)


def test_a_plan_starts_once(operator_client: APIClient, cluster: Pipeline) -> None:
    body = request_body(added_parallel_units=[2])
    plan = dry_run(operator_client, body)
    first = start(operator_client, body, plan["plan_id"])
    assert first.status_code == 202
    operation_id = first.json()["operation_id"]
    changed = stale(start(operator_client, body, plan["plan_id"]))
    assert changed[0]["what"] == "used" and changed[0]["operation_id"] == operation_id
    assert RescaleOperation.objects.count() == 1


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        ({"changes": {FRAGMENT: {"added_parallel_units": [3]}}}, "changes"),
        ({"granularity": "all_at_once"}, "granularity"),
        ({"strategy": "stop_start"}, "strategy"),
        ({"weighted": True}, "weighted"),
        ({"reason": "another reason"}, "reason"),
    ],
)
def test_a_body_that_is_not_the_planned_one_is_stale(
    operator_client: APIClient, cluster: Pipeline, edit: dict[str, Any], field: str
) -> None:
    body = {**request_body(added_parallel_units=[2]), "reason": "planned"}
    plan = dry_run(operator_client, body)
    (change,) = stale(start(operator_client, {**body, **edit}, plan["plan_id"]))
    assert change["what"] == "body" and change["field"] == field
    assert change["planned"] != change["sent"]
    assert not RescaleOperation.objects.exists()


def test_the_same_request_written_differently_is_the_planned_one(
    operator_client: APIClient, cluster: Pipeline
) -> None:
    """The body is compared as parsed: a preset and its object, a default and its absence."""
    body = {"changes": {FRAGMENT: {"added_parallel_units": [2]}}, "granularity": "batched"}
    plan = dry_run(operator_client, body)
    spelled_out = {
        "changes": {FRAGMENT: {"added_parallel_units": [2], "removed_parallel_units": []}},
        "granularity": {"vnodes_per_step": 8, "steps_in_flight": 2},
        "strategy": "live",
        "weighted": False,
        "dry_run": False,
    }
    assert start(operator_client, spelled_out, plan["plan_id"]).status_code == 202


@pytest.mark.parametrize("plan_id", ["0" * 32, "f" * 32])
def test_an_unknown_plan_id_is_refused(
    operator_client: APIClient, cluster: Pipeline, plan_id: str
) -> None:
    response = start(operator_client, request_body(added_parallel_units=[2]), plan_id)
    assert response.status_code == 400, response.content
    error = response.json()
    assert error["code"] == "unknown_plan" and error["field"] == "plan_id"
    assert plan_id in error["detail"]


def test_another_users_plan_is_unknown(operator_client: APIClient, cluster: Pipeline) -> None:
    body = request_body(added_parallel_units=[2])
    plan = dry_run(operator_client, body)
    other = token_client(make_user("other", rescale=True))
    assert start(other, body, plan["plan_id"]).json()["code"] == "unknown_plan"
    assert start(operator_client, body, plan["plan_id"]).status_code == 202


@pytest.mark.parametrize("plan_id", ["abc", "G" * 32, 12, None, "A" * 32, ["x"]])
def test_a_malformed_plan_id_is_malformed(
    operator_client: APIClient, cluster: Pipeline, plan_id: Any
) -> None:
    response = start(operator_client, request_body(added_parallel_units=[2]), plan_id)
    assert response.status_code == 400
    assert response.json()["code"] == "malformed_request"


def test_plan_id_with_dry_run_is_malformed(operator_client: APIClient, cluster: Pipeline) -> None:
    body = request_body(added_parallel_units=[2])
    plan = dry_run(operator_client, body)
    response = start(operator_client, {**body, "dry_run": True}, plan["plan_id"])
    assert response.status_code == 400
    assert response.json()["code"] == "malformed_request" and "plan_id" in response.json()["detail"]


def test_a_fresh_plan_is_still_validated_when_it_starts(
    operator_client: APIClient, cluster: Pipeline
) -> None:
    """What the plan is not bound to is checked as for any request: a target PU's worker
    cordoned since the dry run is refused with its own code, and the plan stays unused."""
    body = request_body(added_parallel_units=[2])
    plan = dry_run(operator_client, body)
    Worker.objects.filter(name="local-0").update(status="cordoned")
    response = start(operator_client, body, plan["plan_id"])
    assert response.status_code == 400 and response.json()["code"] == "worker_not_active"
    assert OperationPlan.objects.get(plan_id=plan["plan_id"]).used_at is None


def test_a_request_without_plan_id_plans_and_starts_as_before(
    operator_client: APIClient, cluster: Pipeline
) -> None:
    response = operator_client.post(URL, request_body(added_parallel_units=[2]), format="json")
    assert response.status_code == 202
    assert "plan_id" not in AuditEvent.objects.get(action="operation.requested").after
    assert not OperationPlan.objects.exists()


@pytest.mark.parametrize("weighted", [False, True])
def test_the_answer_does_not_grow_with_the_moves(db: None, weighted: bool) -> None:
    """A dry run answers a summary: moving 32 times more vnodes between the same PUs answers
    as many bytes, give or take the digits of the figures (issue 23: 4.4 MB at 16,384 moves,
    every move, both mappings and every vnode's load); the plan_id still starts all of them."""
    from tests.unit.api.fixtures import register_cluster

    operator = token_client(make_user("operator", rescale=True))
    body = {**request_body(added_parallel_units=[2, 3]), "weighted": weighted}
    sizes = {}
    for vnodes in (128, 4096):
        RescaleOperation.objects.all().delete()
        Pipeline.objects.all().delete()
        register_cluster(vnodes=vnodes, workers={"w0": [0, 1, 2, 3]})
        response = operator.post(URL, {**body, "dry_run": True}, format="json")
        assert response.status_code == 200, response.content
        sizes[vnodes] = len(response.content)
        plan = response.json()
        assert plan["fragments"][FRAGMENT]["vnodes_moved"] == vnodes // 2
        started = start(operator, body, plan["plan_id"])
        assert started.status_code == 202, started.content
        assert len(started.json()["steps"]) == plan["steps_total"] == vnodes // 4
    assert sizes[4096] < sizes[128] + 200, sizes


def test_a_plan_kept_before_its_detail_was_still_starts(
    operator_client: APIClient, cluster: Pipeline
) -> None:
    """A plan kept whole as JSON (before ``OperationPlan.detail``) starts as it was planned."""
    body = request_body(added_parallel_units=[2, 3])
    shown = dry_run(operator_client, body)
    kept = OperationPlan.objects.get(plan_id=shown["plan_id"])
    planned = kept.plan_record()
    OperationPlan.objects.filter(pk=kept.pk).update(plan=planned.to_json(), detail=b"")
    assert OperationPlan.objects.get(pk=kept.pk).plan_record() == planned
    response = start(operator_client, body, shown["plan_id"])
    assert response.status_code == 202, response.content
    assert [s["vnodes"] for s in response.json()["steps"]] == [
        list(s.vnodes) for s in planned.steps
    ]


def test_a_key_cap_cuts_hot_vnodes_into_key_ranges_shown_by_the_dry_run_and_the_operation(
    operator_client: APIClient, operator: Any, cluster: Pipeline
) -> None:
    from django.test import Client

    skew_the_load()  # vnode v holds 1000 * (v + 1) keys
    body = {
        "changes": {FRAGMENT: {"added_parallel_units": [2, 3]}},
        "granularity": {"vnodes_per_step": 1, "steps_in_flight": 1, "max_keys_per_step": 6000},
    }
    shown = dry_run(operator_client, body)
    summary = shown["fragments"][FRAGMENT]
    load = {v: 1000 * (v + 1) for v in range(16)}
    planned = OperationPlan.objects.get(plan_id=shown["plan_id"]).plan_record()
    moved = {m.vnode for m in planned.fragments[FRAGMENT].moves}
    hot = sorted(v for v in moved if load[v] > 6000)
    assert hot and summary["vnodes_cut"] == len(hot)
    assert summary["key_range_steps"] == sum(-(-load[v] // 6000) for v in hot)

    response = start(operator_client, body, shown["plan_id"])
    assert response.status_code == 202, response.content
    op = response.json()
    cut = [s for s in op["steps"] if s["key_range_count"] is not None]
    assert len(cut) == summary["key_range_steps"]
    for s in cut:
        assert len(s["vnodes"]) == 1 and s["keys"] <= 6000
        assert s["key_range_count"] == -(-load[s["vnodes"][0]] // 6000)
    rows = [r for r in op["vnodes"] if r["vnode"] == hot[0]]
    assert [r["key_range_index"] for r in rows] == list(range(len(rows))), "a row per range"

    page = Client()
    page.force_login(operator)
    html = page.get(f"/operations/{op['operation_id']}/").content.decode()
    assert f"{len(hot)} hot vnodes cut by key: 0 of {len(cut)} key ranges moved" in html
    assert f"{hot[0]}, key range 1/{rows[0]['key_range_count']}" in html


def test_hot_vnodes_first_moves_the_vnodes_the_stream_measured_hottest_first(
    operator_client: APIClient, cluster: Pipeline
) -> None:
    """The runner's measured records per epoch reach the planner through ``Fragment.vnode_load``
    (keys grow with the vnode here, records do not: the order follows the records)."""
    records = {3: 700.0, 8: 900.0, 14: 5.0}
    skew_the_load(records=records)
    stored = Fragment.objects.get(name=FRAGMENT).vnode_load
    assert stored["8"] == [9000, 450_000, 900.0] and stored["0"] == [1000, 50_000, 0.0]
    body = {
        "changes": {FRAGMENT: {"added_parallel_units": [2, 3]}},
        "granularity": {"vnodes_per_step": 1, "steps_in_flight": 2, "hot_vnodes": "first"},
    }
    shown = dry_run(operator_client, body)
    assert shown["granularity"]["hot_vnodes"] == "first"
    response = start(operator_client, body, shown["plan_id"])
    assert response.status_code == 202, response.content
    op = response.json()
    order = [s["vnodes"][0] for s in op["steps"]]
    moved = set(order)
    measured = [v for v in sorted(records, key=records.__getitem__, reverse=True) if v in moved]
    assert measured and order[0] == measured[0]
    assert op["granularity"]["hot_vnodes"] == "first"
    body["granularity"]["hot_vnodes"] = "hottest"
    refused = operator_client.post(URL, {**body, "dry_run": True}, format="json")
    assert refused.status_code == 400 and "hot_vnodes" in refused.json()["detail"]
