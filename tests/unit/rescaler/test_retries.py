"""How a Celery task rides out Postgres restarting under it: one policy
(``rescaler.retries.database_retry``) that every task working on the database carries (issue
48): the operations' driver, watchdog and resume task, the release of a removed worker's
machine, and the autoscaler's evaluation. The release's own retries of a failing provider are counted apart, so that a database
outage never spends them."""

from __future__ import annotations

from typing import Any

import pytest
from celery.utils.time import get_exponential_backoff_interval
from django.db import InterfaceError, OperationalError

import rescaler.autoscaling.tasks
import rescaler.operations.tasks
import rescaler.runner.tasks
import rescaler.tasks
from rescaler.celery import app
from rescaler.dbwait import DATABASE_DOWN
from rescaler.retries import database_retry
from rescaler.runner.workers import machines
from rescaler.runner.workers import tasks as worker_tasks
from tests.unit.rescaler.test_workers_tasks import FlakyProvider, removed  # noqa: F401

# a lost probe is simply sent again (rescaler/tasks.py): it is the one task without the policy
WITHOUT_THE_POLICY = {"rescaler.health.probe"}


def _ours() -> dict[str, Any]:
    return {name: task for name, task in app.tasks.items() if name.startswith("rescaler.")}


def test_every_task_that_works_on_the_database_carries_the_policy() -> None:
    ours = _ours()
    assert {
        rescaler.operations.tasks.drive_operation.name,
        rescaler.operations.tasks.watch_operation.name,
        rescaler.operations.tasks.resume_operations.name,
        rescaler.runner.tasks.release_worker.name,
        rescaler.autoscaling.tasks.autoscaling_evaluate.name,
    } | WITHOUT_THE_POLICY == set(ours)
    policy = database_retry()
    for name, task in ours.items():
        if name in WITHOUT_THE_POLICY:
            continue
        carried = {option: getattr(task, option) for option in policy}
        assert carried == policy, name


def test_the_database_down_is_what_the_http_side_waits_out() -> None:
    assert database_retry()["autoretry_for"] == DATABASE_DOWN == (OperationalError, InterfaceError)


def test_the_policy_waits_about_ten_minutes_at_most_half_a_minute_apart() -> None:
    policy = database_retry()
    waits = [
        get_exponential_backoff_interval(
            policy["retry_backoff"], n, policy["retry_backoff_max"], policy["retry_jitter"]
        )
        for n in range(policy["max_retries"])
    ]
    assert waits[:6] == [1, 2, 4, 8, 16, 30] and max(waits) == 30
    assert 600 <= sum(waits) <= 660


@pytest.mark.django_db
def test_a_database_outage_spends_none_of_the_provider_s_attempts(
    monkeypatch: pytest.MonkeyPatch,
    removed: Any,  # noqa: F811
) -> None:
    """Three runs that find Postgres down, then a provider that always fails: the provider is
    still asked ``RELEASE_ATTEMPTS`` times before the failure is recorded (the task's retries
    count both, and a release that met the outage gave up after two provider attempts)."""
    provider = FlakyProvider(failures=100)
    monkeypatch.setattr(machines, "provider_from_env", lambda: provider)
    release = machines.worker_release
    outage = iter(range(3))

    def database_down_first(**kwargs: Any) -> str:
        if next(outage, None) is not None:
            raise OperationalError("the database system is shutting down")
        return release(**kwargs)

    monkeypatch.setattr(machines, "worker_release", database_down_first)
    answer = worker_tasks.release_worker.apply(args=(removed.pk,)).get()
    assert len(provider.calls) == worker_tasks.RELEASE_ATTEMPTS, provider.calls
    assert answer == f"ProviderError: attempt {worker_tasks.RELEASE_ATTEMPTS}: no answer"
