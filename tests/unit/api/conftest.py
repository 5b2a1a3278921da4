"""Fixtures of the API tests: a registered cluster, a viewer, an operator, and their clients."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from rescaler.cluster.models import Pipeline
from tests.unit.api.fixtures import make_user, register_cluster, token_client


@pytest.fixture(autouse=True)
def _no_celery(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Operations are queued, never driven: no Celery worker takes part in these tests."""
    queued: list[int] = []
    monkeypatch.setattr("rescaler.operations.enqueue.operation_drive_enqueue", queued.append)
    return queued


@pytest.fixture(autouse=True)
def _no_evaluation(monkeypatch: pytest.MonkeyPatch) -> None:
    """The autoscaler's evaluations are not queued on a broker (tests/unit/rescaler/autoscaling
    tests them)."""
    monkeypatch.setattr("rescaler.autoscaling.tasks.evaluate_later", lambda pk: None)


@pytest.fixture(autouse=True)
def _state_dir(settings: Any, tmp_path: Path) -> Path:
    """An empty state directory per test: never the runner's real one."""
    settings.STATE_DIR = tmp_path / "state"
    return settings.STATE_DIR


@pytest.fixture(autouse=True)
def _no_worker_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test starts a Spark worker: "add a worker" meets no provider unless a test gives one."""
    monkeypatch.setenv("RESCALER_WORKER_PROVIDER", "none")


@pytest.fixture
def cluster(db: None) -> Pipeline:
    return register_cluster()


@pytest.fixture
def viewer(db: None) -> Any:
    return make_user("viewer")


@pytest.fixture
def operator(db: None) -> Any:
    return make_user("operator", rescale=True)


@pytest.fixture
def anon() -> APIClient:
    return APIClient()


@pytest.fixture
def viewer_client(viewer: Any) -> APIClient:
    return token_client(viewer)


@pytest.fixture
def operator_client(operator: Any) -> APIClient:
    return token_client(operator)
