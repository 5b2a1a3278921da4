"""GET pipelines/{name}/autoscaling/decisions: the history of the autoscaler's decisions,
newest first, paginated and filtered like the other lists, each with its signals and outcome."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from dashboard.api.csv import DECISION_COLUMNS
from rescaler.autoscaling.recommendation import recommendation_apply, recommendation_get
from rescaler.autoscaling.services import autoscaling_policy_update
from tests.unit.api.fixtures import FRAGMENT, PIPELINE, make_user, token_client
from tests.unit.rescaler.autoscaling.test_decisions import stepped
from tests.unit.rescaler.autoscaling.test_provisioning import FakeProvider, short_of_one_pu

pytestmark = pytest.mark.django_db

URL = f"/api/v1/pipelines/{PIPELINE}/autoscaling/decisions"


@pytest.fixture
def admin(db: None) -> Any:
    return make_user("admin", rescale=True, policy=True)


def test_the_decisions_with_their_signals_and_outcome(admin: Any, viewer_client: APIClient) -> None:
    stepped(admin)
    recommendation = recommendation_get(user=admin, pipeline=PIPELINE, plan=True)
    assert recommendation.plan is not None
    op = recommendation_apply(user=admin, pipeline=PIPELINE, plan_id=recommendation.plan.plan_id)
    recommendation_get(user=admin, pipeline=PIPELINE, plan=False)  # no change while it runs
    response = viewer_client.get(URL)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["count"] == 2 and body["next"] is None
    during, applied = body["results"]
    assert (during["kind"], during["outcome"], during["fragments"]) == ("no_change", "none", [])
    assert applied["pipeline"] == PIPELINE and applied["mode"] == "recommend"
    assert (applied["kind"], applied["outcome"], applied["applied_by"]) == (
        "scale",
        "applied",
        "admin",
    )
    assert applied["plan_id"] == recommendation.plan.plan_id
    assert applied["operation"] == {
        "operation_id": op.operation_id,
        "status": "pending",
        "outcome": "",
    }
    (fragment,) = applied["fragments"]
    assert (fragment["fragment"], fragment["parallel_units_now"]) == (FRAGMENT, 2)
    assert fragment["parallel_units_after"] == 3
    assert fragment["estimate"]["true_rate_per_pu"] == pytest.approx(500)
    assert applied["request"]["changes"] == {
        FRAGMENT: {"added_parallel_units": [2], "removed_parallel_units": []}
    }
    assert during["plan_id"] is None and during["operation"] is None
    assert during["applied_by"] is None


def test_filters_and_pages(admin: Any, viewer_client: APIClient) -> None:
    stepped(admin)
    recommendation_get(user=admin, pipeline=PIPELINE, plan=False)
    autoscaling_policy_update(user=admin, pipeline=PIPELINE, changes={"max_parallel_units": 2})
    recommendation_get(user=admin, pipeline=PIPELINE, plan=False)
    assert viewer_client.get(URL, {"outcome": "superseded"}).json()["count"] == 1
    assert viewer_client.get(URL, {"kind": "no_change"}).json()["count"] == 1
    assert viewer_client.get(URL, {"mode": "auto"}).json()["count"] == 0
    page = viewer_client.get(URL, {"page_size": 1}).json()
    assert page["count"] == 2 and len(page["results"]) == 1 and page["next"]
    assert viewer_client.get(URL, {"decided_after": "2999-01-01T00:00:00Z"}).json()["count"] == 0
    bad = viewer_client.get(URL, {"outcome": "maybe"})
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_parameters"


def test_an_unknown_pipeline_is_404(viewer_client: APIClient) -> None:
    response = viewer_client.get("/api/v1/pipelines/nope/autoscaling/decisions")
    assert response.status_code == 404 and response.json()["code"] == "unknown_pipeline"


def test_anonymous_is_401(cluster: Any) -> None:
    assert token_client(None).get(URL).status_code == 401


def _csv(response: Any) -> list[dict[str, str]]:
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/csv")
    assert f'filename="decisions-{PIPELINE}.csv"' in response["Content-Disposition"]
    text = b"".join(response.streaming_content).decode()
    return list(csv.DictReader(io.StringIO(text)))


def test_csv_has_every_matching_decision_unpaginated(admin: Any, viewer_client: APIClient) -> None:
    stepped(admin)
    recommendation = recommendation_get(user=admin, pipeline=PIPELINE, plan=True)
    assert recommendation.plan is not None
    op = recommendation_apply(user=admin, pipeline=PIPELINE, plan_id=recommendation.plan.plan_id)
    recommendation_get(user=admin, pipeline=PIPELINE, plan=False)  # no change while it runs
    rows = _csv(viewer_client.get(URL, {"format": "csv", "page_size": 1}))
    assert list(rows[0]) == list(DECISION_COLUMNS)
    assert len(rows) == 2  # never paginated
    during, applied = rows
    assert (during["kind"], during["outcome"], during["parallel_units"]) == (
        "no_change",
        "none",
        "",
    )
    assert during["operation_id"] == "" and during["applied_by"] == ""
    assert applied["pipeline"] == PIPELINE and applied["mode"] == "recommend"
    assert (applied["kind"], applied["outcome"], applied["applied_by"]) == (
        "scale",
        "applied",
        "admin",
    )
    assert applied["parallel_units"] == f"{FRAGMENT} 2 → 3"
    assert (applied["operation_id"], applied["operation_status"]) == (op.operation_id, "pending")
    assert applied["plan_id"] == recommendation.plan.plan_id
    assert applied["decided_at"] == viewer_client.get(URL).json()["results"][1][
        "decided_at"
    ].replace("Z", "+00:00")
    (fragment,) = json.loads(applied["fragments"])
    assert fragment["estimate"]["true_rate_per_pu"] == pytest.approx(500)
    assert json.loads(applied["reasons"])[0].startswith(f"{FRAGMENT}: 2 → 3 PUs")
    assert json.loads(applied["request"])["changes"] == {
        FRAGMENT: {"added_parallel_units": [2], "removed_parallel_units": []}
    }
    assert "backlog" in json.loads(applied["missing_signals"])
    # the same filters as the JSON list; by the Accept header too
    only = _csv(viewer_client.get(URL, {"format": "csv", "outcome": "applied"}))
    assert [r["id"] for r in only] == [applied["id"]]
    assert len(_csv(viewer_client.get(URL, HTTP_ACCEPT="text/csv"))) == 2


def test_csv_refusals_are_json(viewer_client: APIClient, anon: APIClient, admin: Any) -> None:
    stepped(admin)
    response = anon.get(URL, {"format": "csv"})
    assert response.status_code == 401 and response.json()["code"] == "not_authenticated"
    response = viewer_client.get(URL, {"format": "csv", "outcome": "maybe"})
    assert response.status_code == 400 and response.json()["code"] == "invalid_parameters"
    response = viewer_client.get("/api/v1/pipelines/nope/autoscaling/decisions", {"format": "csv"})
    assert response.status_code == 404 and response.json()["code"] == "unknown_pipeline"


def test_apply_short_of_pus_asks_for_workers_and_the_history_says_so(
    admin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """POST pipelines/{name}/recommendation/workers: the worker provider (faked at its
    boundary) is asked once; the recommendation and the decision say how many."""
    provider = FakeProvider()
    monkeypatch.setattr("rescaler.runner.workers.machines.provider_from_env", lambda: provider)
    short_of_one_pu(admin, "recommend")
    client = token_client(admin)
    recommendation = client.get(f"/api/v1/pipelines/{PIPELINE}/recommendation").json()
    assert recommendation["workers_needed"] == 1 and provider.added == []
    url = f"/api/v1/pipelines/{PIPELINE}/recommendation/workers"
    asked = client.post(url)
    assert asked.status_code == 202, asked.content
    body = asked.json()
    assert (body["outcome"], body["workers_requested"], body["applied_by"]) == (
        "awaiting_workers",
        1,
        "admin",
    )
    assert body["workers_requested_at"] is not None and body["workers_released"] == []
    assert client.post(url).json()["id"] == body["id"] and provider.added == [2]
    (listed,) = client.get(URL, {"outcome": "awaiting_workers"}).json()["results"]
    assert listed["id"] == body["id"] and listed["workers_requested"] == 1
    (row,) = _csv(client.get(URL, {"format": "csv"}))
    assert (row["outcome"], row["workers_requested"]) == ("awaiting_workers", "1")


def test_asking_for_workers_when_none_are_short_is_409(
    admin: Any, viewer_client: APIClient
) -> None:
    stepped(admin)  # 4 PUs on the cluster, 2 free: nothing short
    response = token_client(admin).post(f"/api/v1/pipelines/{PIPELINE}/recommendation/workers")
    assert response.status_code == 409 and response.json()["code"] == "nothing_to_start"
    assert (
        viewer_client.post(f"/api/v1/pipelines/{PIPELINE}/recommendation/workers").status_code
        == 403
    )
