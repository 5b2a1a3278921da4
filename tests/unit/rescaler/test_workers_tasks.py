"""The release of a removed worker's machine as a Celery task (rescaler/runner/workers/tasks.py):
queued once the removal commits, a failing provider tried again, then recorded. Run eagerly
(``apply``): the broker is not needed to test the task's own logic."""

from __future__ import annotations

from typing import Any

import pytest
from kombu.exceptions import OperationalError as BrokerUnavailable

from rescaler.audit.models import AuditEvent
from rescaler.cluster import services as cluster_services
from rescaler.cluster.models import Worker
from rescaler.runner.workers import machines, tasks
from workers.control import Topology, WorkerInfo
from workers.provider import ProviderError

pytestmark = pytest.mark.django_db


class FlakyProvider:
    """Fails its first ``failures`` releases."""

    name = "flaky"

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls: list[str] = []

    def release(self, worker: WorkerInfo) -> str:
        self.calls.append(worker.name)
        if len(self.calls) <= self.failures:
            raise ProviderError(f"attempt {len(self.calls)}: no answer")
        return f"stopped {worker.name}"


@pytest.fixture
def removed() -> Worker:
    cluster_services.topology_register(
        topology=Topology(
            pipeline="wordcount",
            workers={"w1": [0], "w2": [1]},
            fragments={"source": {"kind": "source", "parallel_units": [0, 1]}},
            spark={"alive": True},
        )
    )
    return Worker.objects.get(name="w2")


def actions() -> list[str]:
    return list(AuditEvent.objects.order_by("id").values_list("action", flat=True))


def test_a_provider_that_fails_then_answers_is_released_once(
    monkeypatch: pytest.MonkeyPatch, removed: Worker
) -> None:
    provider = FlakyProvider(failures=2)
    monkeypatch.setattr(machines, "provider_from_env", lambda: provider)
    result = tasks.release_worker.apply(args=(removed.pk,))
    assert result.get() == "stopped w2"
    assert provider.calls == ["w2"] * 3
    assert [a for a in actions() if a.startswith("worker.release")] == ["worker.released"]


def test_a_provider_that_always_fails_is_recorded_once_after_the_last_attempt(
    monkeypatch: pytest.MonkeyPatch, removed: Worker
) -> None:
    provider = FlakyProvider(failures=100)
    monkeypatch.setattr(machines, "provider_from_env", lambda: provider)
    answer = tasks.release_worker.apply(args=(removed.pk,)).get()
    assert len(provider.calls) == tasks.RELEASE_ATTEMPTS
    assert answer == f"ProviderError: attempt {tasks.RELEASE_ATTEMPTS}: no answer"
    failed = AuditEvent.objects.get(action="worker.release_failed")
    assert failed.after == {"error": answer} and failed.object_id == "w2"
    assert "worker.released" not in actions()


def test_a_release_that_cannot_be_queued_is_recorded(
    monkeypatch: pytest.MonkeyPatch, removed: Worker
) -> None:
    def down(*args: Any, **kwargs: Any) -> None:
        raise BrokerUnavailable("Error 111 connecting to redis")

    monkeypatch.setattr(tasks.release_worker, "delay", down)
    tasks.release_later(removed.pk)
    failed = AuditEvent.objects.get(action="worker.release_failed")
    assert "could not be queued" in failed.after["error"]
