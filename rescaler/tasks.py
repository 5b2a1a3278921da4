"""Project-level Celery tasks: the probe (the tasks that drive rescale operations live in
rescaler.operations.tasks)."""

from __future__ import annotations

from typing import Any

from celery import Task, shared_task
from django.contrib.auth import get_user_model
from django.db import connection


@shared_task(bind=True, name="rescaler.health.probe", acks_late=False)
def probe(self: Task) -> dict[str, Any]:
    """Answer from a worker after a real database round trip.

    Used by the integration test to prove a worker reaches the broker, the result backend and
    the same database as the caller. Not acks_late: a lost probe is simply sent again.
    """
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        (one,) = cursor.fetchone() or (None,)
    return {
        "hostname": self.request.hostname,
        "database": connection.settings_dict["NAME"],
        "select_1": one,
        "users": get_user_model().objects.count(),
    }
