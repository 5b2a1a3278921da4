"""Queueing an operation's driver, by the tasks' names: the services that start or cancel an
operation (``requests``, ``cancel``) queue it without importing ``rescaler.operations.tasks``,
which imports the drive loop, which cancels: the import circle that the imports hidden inside
functions made (issue 48)."""

from __future__ import annotations

from django.conf import settings

from rescaler.celery import DRIVE_OPERATION, WATCH_OPERATION, app


def operation_drive_enqueue(pk: int) -> None:
    """A driver for the operation, and its watchdog, which queues a new driver whenever the
    driver's lease expires before the operation ends (a driver killed, or given up). Called once
    the transaction that wrote the operation (or its cancel) has committed."""
    app.send_task(DRIVE_OPERATION, args=(pk,))
    app.send_task(WATCH_OPERATION, args=(pk,), countdown=settings.RESCALER_LEASE_S + 1)
