"""Fixtures of the autoscaler's tests: no evaluation is queued on a broker, and no operation
is driven (no Celery worker takes part); each test may look at what would have been queued."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def evaluations(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The pipelines whose evaluation the epochs queued, in order."""
    queued: list[int] = []
    monkeypatch.setattr("rescaler.autoscaling.tasks.evaluate_later", queued.append)
    return queued


@pytest.fixture(autouse=True)
def _no_celery(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rescaler.operations.enqueue.operation_drive_enqueue", lambda pk: None)
