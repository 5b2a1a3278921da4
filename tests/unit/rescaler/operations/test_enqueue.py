"""Queueing an operation's driver by the tasks' names (``rescaler.operations.enqueue``): the
names are the registered tasks', so a name that drifts from its task fails here, not in
production where the message would wait for a task nobody runs."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings

from rescaler.celery import DRIVE_OPERATION, RESUME_OPERATIONS, WATCH_OPERATION, app
from rescaler.operations import enqueue, tasks


def test_the_names_are_the_tasks_names() -> None:
    assert tasks.drive_operation.name == DRIVE_OPERATION
    assert tasks.watch_operation.name == WATCH_OPERATION
    assert tasks.resume_operations.name == RESUME_OPERATIONS
    assert {DRIVE_OPERATION, WATCH_OPERATION, RESUME_OPERATIONS} <= set(app.tasks)


def test_a_driver_and_its_watchdog_are_queued(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(app, "send_task", lambda name, **options: sent.append((name, options)))
    enqueue.operation_drive_enqueue(7)
    assert sent == [
        (DRIVE_OPERATION, {"args": (7,)}),
        (WATCH_OPERATION, {"args": (7,), "countdown": settings.RESCALER_LEASE_S + 1}),
    ]
