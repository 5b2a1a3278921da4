"""The workers endpoints: list, add, cordon, uncordon, drain (docs/api.md, "Workers")."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from rescaler.audit.models import AuditEvent
from rescaler.cluster.models import Pipeline, RunnerCommand, Worker
from rescaler.operations.models import RescaleOperation
from rescaler.runner.workers import machines as worker_machines
from rescaler.runner.workers import workers_record
from tests.unit.api.fixtures import PIPELINE, register_cluster
from workers.control import WorkerInfo
from workers.provider import ProviderError

pytestmark = pytest.mark.django_db

URL = "/api/v1/workers"


@pytest.fixture
def workers(db: None) -> Pipeline:
    """word_count on PUs 0, 1 (worker w1) and 2 (w2); w2's PU 3 runs nothing."""
    pipeline = register_cluster(workers={"w1": [0, 1], "w2": [2, 3]}, initial_pus=(0, 1, 2))
    workers_record(
        pipeline=PIPELINE,
        epoch=0,
        workers=[
            WorkerInfo("w1", "1", "host-a", 2, (0, 1), True, 0),
            WorkerInfo("w2", "2", "host-b", 2, (2, 3), True, 0),
        ],
    )
    return pipeline


def status_of(name: str) -> str:
    return Worker.objects.get(name=name).status


def test_the_list_shows_status_executor_and_pus(
    viewer_client: APIClient, workers: Pipeline
) -> None:
    response = viewer_client.get(URL)
    assert response.status_code == 200
    rows = {w["name"]: w for w in response.json()}
    assert set(rows) == {"w1", "w2"}
    w2 = rows["w2"]
    assert w2["status"] == "active" and w2["alive"] is True
    assert (w2["executor_id"], w2["host"], w2["cores"]) == ("2", "host-b", 2)
    assert w2["bootstrapped_epoch"] == 0 and w2["parallel_units"] == [2, 3]
    assert w2["drain_operation_id"] is None
    assert w2["locality"] == {"tasks_total": 0, "tasks_home": 0, "share": None}
    assert viewer_client.get(URL, {"pipeline": "nope"}).status_code == 404


def test_anonymous_is_told_to_authenticate(anon: APIClient, workers: Pipeline) -> None:
    assert anon.get(URL).status_code == 401
    assert anon.post(f"{URL}/w2/cordon").status_code == 401


@pytest.mark.parametrize("action", ["cordon", "uncordon", "drain"])
def test_a_viewer_may_not_change_a_worker(
    viewer_client: APIClient, workers: Pipeline, action: str
) -> None:
    response = viewer_client.post(f"{URL}/w2/{action}", {}, format="json")
    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"
    assert (
        not AuditEvent.objects.filter(action__startswith="worker.")
        .exclude(action="worker.joined")
        .exists()
    )


def test_cordon_then_uncordon(operator_client: APIClient, operator: Any, workers: Pipeline) -> None:
    response = operator_client.post(f"{URL}/w2/cordon", {"reason": "disk"}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "cordoned"
    assert response.json()["status_reason"] == "disk"
    event = AuditEvent.objects.get(action="worker.cordoned")
    assert event.actor == operator and event.object_type == "worker" and event.object_id == "w2"
    # a cordoned worker's PU cannot be added
    refused = operator_client.post(
        "/api/v1/operations",
        {"changes": {"word_count": {"added_parallel_units": [3]}}},
        format="json",
    )
    assert refused.status_code == 400 and refused.json()["code"] == "worker_not_active"
    response = operator_client.post(f"{URL}/w2/uncordon", format="json")
    assert response.status_code == 200 and response.json()["status"] == "active"
    assert AuditEvent.objects.filter(action="worker.uncordoned").count() == 1


def test_drain_answers_the_worker_and_its_operation(
    operator_client: APIClient, workers: Pipeline
) -> None:
    response = operator_client.post(
        f"{URL}/w2/drain", {"reason": "scale down", "granularity": "batched"}, format="json"
    )
    assert response.status_code == 202, response.content
    data = response.json()
    assert data["worker"]["status"] == "draining"
    op = data["operation"]
    assert op["request"]["changes"] == {
        "word_count": {"added_parallel_units": [], "removed_parallel_units": [2]}
    }
    assert data["worker"]["drain_operation_id"] == op["operation_id"]
    assert response["Location"].endswith(f"/api/v1/operations/{op['operation_id']}")
    assert RescaleOperation.objects.count() == 1
    # twice: refused, with the reason
    again = operator_client.post(f"{URL}/w2/drain", {}, format="json")
    assert again.status_code == 409 and again.json()["code"] == "worker_status_conflict"
    assert "draining" in again.json()["detail"]


def test_drain_of_a_worker_without_stateful_fragments_decommissions_it(
    operator_client: APIClient, workers: Pipeline
) -> None:
    workers_record(
        pipeline=PIPELINE,
        epoch=1,
        workers=[
            WorkerInfo("w1", "1", "host-a", 2, (0, 1), True, 0),
            WorkerInfo("w2", "2", "host-b", 2, (2, 3), True, 0),
            WorkerInfo("w3", "3", "host-c", 1, (4,), True, 1),
        ],
    )
    response = operator_client.post(f"{URL}/w3/drain", format="json")
    assert response.status_code == 202
    assert response.json()["operation"] is None
    assert response.json()["worker"]["status"] == "decommissioning"
    assert RunnerCommand.objects.get(kind="worker.decommission").payload == {"worker": "w3"}


@pytest.mark.parametrize("action", ["cordon", "uncordon", "drain"])
def test_an_unknown_worker_is_404(
    operator_client: APIClient, workers: Pipeline, action: str
) -> None:
    response = operator_client.post(f"{URL}/nope/{action}", format="json")
    assert response.status_code == 404
    assert response.json()["code"] == "unknown_worker"


def test_refused_transitions_are_409_and_record_nothing(
    operator_client: APIClient, workers: Pipeline
) -> None:
    Worker.objects.filter(name="w2").update(status="lost")
    events = AuditEvent.objects.count()
    for action in ("cordon", "uncordon", "drain"):
        response = operator_client.post(f"{URL}/w2/{action}", format="json")
        assert response.status_code == 409, action
        assert response.json()["code"] == "worker_status_conflict"
        assert "lost" in response.json()["detail"]
    assert AuditEvent.objects.count() == events


def test_a_drain_that_empties_a_fragment_is_409(operator_client: APIClient, db: None) -> None:
    register_cluster(workers={"w1": [0, 1], "w2": [2, 3]}, initial_pus=(0, 1))
    response = operator_client.post(f"{URL}/w1/drain", format="json")
    assert response.status_code == 409
    assert response.json()["code"] == "drain_empties_fragment"
    assert status_of("w1") == "active"


@pytest.mark.parametrize(
    "body",
    [
        {"reason": 3},
        {"reason": "x" * 501},
        {"reason": "ok", "force": True},
        ["reason"],
        {"granularity": "slowly"},
        {"granularity": {"vnodes_per_step": 0}},
    ],
)
def test_malformed_drain_bodies_are_400(
    operator_client: APIClient, workers: Pipeline, body: Any
) -> None:
    response = operator_client.post(f"{URL}/w2/drain", body, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "malformed_request"
    assert status_of("w2") == "active"


@pytest.mark.parametrize("body", [{"reason": "a", "granularity": "fluid"}, {"cause": "x"}])
def test_cordon_takes_only_a_reason(
    operator_client: APIClient, workers: Pipeline, body: Any
) -> None:
    response = operator_client.post(f"{URL}/w2/cordon", body, format="json")
    assert response.status_code == 400 and response.json()["code"] == "malformed_request"


class FakeProvider:
    name = "fake"

    def __init__(self, error: str = "") -> None:
        self.error = error

    def add(self, cores: int = 1) -> str:
        if self.error:
            raise ProviderError(self.error)
        return f"started a {cores}-core worker"

    def release(self, worker: WorkerInfo) -> str:
        return "released"


def test_add_asks_the_provider(
    operator_client: APIClient, operator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker_machines, "provider_from_env", lambda: FakeProvider())
    response = operator_client.post(URL, {"cores": 2}, format="json")
    assert response.status_code == 202, response.content
    assert response.json() == {"provider": "fake", "cores": 2, "answer": "started a 2-core worker"}
    event = AuditEvent.objects.get(action="worker.add_requested")
    assert event.actor == operator and event.after["cores"] == 2
    assert operator_client.post(URL, format="json").json()["cores"] == 1


def test_add_without_a_provider_is_409_with_the_reason(
    operator_client: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        worker_machines, "provider_from_env", lambda: FakeProvider("no provider: local mode")
    )
    response = operator_client.post(URL, {"cores": 1}, format="json")
    assert response.status_code == 409
    assert response.json() == {
        "code": "worker_provider_refused",
        "detail": "cannot add a worker: no provider: local mode",
    }
    assert not AuditEvent.objects.exists()


@pytest.mark.parametrize(
    "body", [{"cores": 0}, {"cores": 65}, {"cores": "2"}, {"cores": True}, {"n": 1}]
)
def test_malformed_add_bodies_are_400(
    operator_client: APIClient, monkeypatch: pytest.MonkeyPatch, body: Any
) -> None:
    monkeypatch.setattr(worker_machines, "provider_from_env", lambda: FakeProvider())
    response = operator_client.post(URL, body, format="json")
    assert response.status_code == 400
    assert response.json()["code"] == "malformed_request"


def test_a_viewer_may_not_add(viewer_client: APIClient) -> None:
    assert viewer_client.post(URL, {"cores": 1}, format="json").status_code == 403
