"""GET /api/v1/cluster?as_of= and ?fragment=&version=: the placement of the past, as the
selector of ``rescaler.operations.placements`` gives it, and its refusals."""

from __future__ import annotations

import datetime as dt

import pytest
from rest_framework.test import APIClient

from tests.unit.api.fixtures import FRAGMENT, PIPELINE, PlacementHistory, placement_history

pytestmark = pytest.mark.django_db

URL = "/api/v1/cluster"
MINUTE = dt.timedelta(minutes=1)


@pytest.fixture
def history(db: None) -> PlacementHistory:
    return placement_history()


def _at(moment: dt.datetime) -> str:
    return moment.isoformat()


def test_as_of_an_instant_between_versions(
    viewer_client: APIClient, history: PlacementHistory
) -> None:
    at = history.recorded[2] + 2 * MINUTE
    response = viewer_client.get(URL, {"as_of": _at(at)})
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["fragment"] is None and body["version"] is None
    assert body["before_first_version"] is False
    assert dt.datetime.fromisoformat(body["as_of"]) == at
    (fragment,) = body["fragments"]
    assert fragment["name"] == FRAGMENT and fragment["pipeline"] == PIPELINE
    assert fragment["mapping_version"] == 2 and fragment["mapping"] == history.mappings[2]
    assert fragment["parallel_units"] == [0, 1, 2]
    assert fragment["per_parallel_unit"] == [
        {"parallel_unit": 0, "vnodes": 4},
        {"parallel_unit": 1, "vnodes": 8},
        {"parallel_unit": 2, "vnodes": 4},
    ]
    assert fragment["operation_id"] == history.operation_id
    assert dt.datetime.fromisoformat(fragment["effective_at"]) == history.recorded[2]
    assert dt.datetime.fromisoformat(fragment["superseded_at"]) == history.recorded[3]
    assert (fragment["previous_version"], fragment["next_version"]) == (1, 3)


def test_a_fragment_s_version(viewer_client: APIClient, history: PlacementHistory) -> None:
    body = viewer_client.get(URL, {"fragment": FRAGMENT, "version": 5}).json()
    assert (body["fragment"], body["version"]) == (FRAGMENT, 5)
    assert dt.datetime.fromisoformat(body["as_of"]) == history.recorded[5]
    (fragment,) = body["fragments"]
    assert fragment["mapping"] == history.mappings[5]
    assert fragment["operation_id"] is None and fragment["superseded_at"] is None
    assert (fragment["previous_version"], fragment["next_version"]) == (3, None)


def test_a_time_without_an_offset_is_the_server_s(
    viewer_client: APIClient, history: PlacementHistory
) -> None:
    naive = (history.recorded[3] + MINUTE).astimezone(dt.UTC).replace(tzinfo=None)
    body = viewer_client.get(URL, {"as_of": naive.isoformat()}).json()  # TIME_ZONE is UTC
    assert body["fragments"][0]["mapping_version"] == 3


def test_before_the_first_version_the_answer_says_so(
    viewer_client: APIClient, history: PlacementHistory
) -> None:
    response = viewer_client.get(URL, {"as_of": _at(history.recorded[1] - MINUTE)})
    assert response.status_code == 200
    body = response.json()
    assert body["before_first_version"] is True
    assert dt.datetime.fromisoformat(body["first_version_at"]) == history.recorded[1]
    assert "no mapping version had taken effect" in body["detail"]
    (fragment,) = body["fragments"]
    assert fragment["mapping"] is None and fragment["mapping_version"] is None
    assert fragment["parallel_units"] == [] and fragment["per_parallel_unit"] == []


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"as_of": "yesterday"}, "as_of"),
        ({"as_of": "2026-13-40T99:00"}, "as_of"),
        ({"version": "2"}, "fragment"),
        ({"fragment": FRAGMENT}, "version"),
        ({"fragment": FRAGMENT, "version": "-1"}, "version"),
        ({"fragment": FRAGMENT, "version": "two"}, "version"),
        ({"as_of": "2026-11-21T14:00:00Z", "fragment": FRAGMENT, "version": "2"}, "as_of"),
    ],
)
def test_a_malformed_question_is_a_400_with_its_reason(
    viewer_client: APIClient, history: PlacementHistory, query: dict[str, str], field: str
) -> None:
    response = viewer_client.get(URL, query)
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid_parameters"
    assert field in body["errors"] and body["detail"]


def test_an_unknown_version_or_fragment_is_a_400_naming_what_is_kept(
    viewer_client: APIClient, history: PlacementHistory
) -> None:
    response = viewer_client.get(URL, {"fragment": FRAGMENT, "version": 4})
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "unknown_version" and body["field"] == "version"
    assert "kept: 1–3, 5" in body["detail"]
    response = viewer_client.get(URL, {"fragment": "nope", "version": 1})
    assert response.status_code == 400
    assert response.json()["code"] == "unknown_fragment"
    assert response.json()["field"] == "fragment"


def test_an_unknown_pipeline_is_a_404(viewer_client: APIClient, history: PlacementHistory) -> None:
    response = viewer_client.get(URL, {"as_of": "2026-11-21T14:00:00Z", "pipeline": "nope"})
    assert response.status_code == 404 and response.json()["code"] == "unknown_pipeline"


def test_without_a_question_of_the_past_the_answer_is_the_cluster_now(
    viewer_client: APIClient, history: PlacementHistory
) -> None:
    body = viewer_client.get(URL).json()
    assert "workers" in body and "as_of" not in body
    assert body["fragments"][1]["mapping_version"] == 5


def test_the_schema_documents_both_answers_and_the_parameters(viewer_client: APIClient) -> None:
    schema = viewer_client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert schema.status_code == 200
    document = schema.json()
    get = document["paths"]["/api/v1/cluster"]["get"]
    assert {"as_of", "fragment", "version", "pipeline"} <= {p["name"] for p in get["parameters"]}
    answer = get["responses"]["200"]["content"]["application/json"]["schema"]
    assert answer == {"$ref": "#/components/schemas/ClusterOrPlacement"}
    one_of = document["components"]["schemas"]["ClusterOrPlacement"]["oneOf"]
    assert {"$ref": "#/components/schemas/ClusterPlacement"} in one_of
    assert {"$ref": "#/components/schemas/Cluster"} in one_of
