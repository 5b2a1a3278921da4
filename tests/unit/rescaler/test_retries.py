"""How a Celery task rides out Postgres restarting under it: one policy
(``rescaler.retries.database_retry``) that every task working on the database carries (issue
48): the operations' driver, watchdog and resume task, and the release of a removed worker's
machine."""

from __future__ import annotations

from typing import Any

from celery.utils.time import get_exponential_backoff_interval
from django.db import InterfaceError, OperationalError

import rescaler.operations.tasks
import rescaler.runner.tasks
import rescaler.tasks
from rescaler.celery import app
from rescaler.dbwait import DATABASE_DOWN
from rescaler.retries import database_retry

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
