"""Celery tasks of rescale operations: thin, ids only, the work is in rescaler.operations.drive."""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from django.conf import settings
from kombu.exceptions import OperationalError as BrokerUnavailable

from rescaler.celery import DRIVE_OPERATION, RESUME_OPERATIONS, WATCH_OPERATION
from rescaler.operations import drive
from rescaler.retries import database_retry

log = logging.getLogger(__name__)


@shared_task(
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    name=DRIVE_OPERATION,
    **database_retry(),  # Postgres restarting under it: it runs again
)
def drive_operation(self: Any, pk: int) -> str:
    """Drive an operation for a while; re-queue itself until it ends.

    Each run is bounded (RESCALER_DRIVE_BUDGET_S) so that no message stays unacknowledged for
    long; a killed worker's operation is picked up by the operation's watchdog (below).
    """
    # the owner is the task's id, which its retries keep: a run that Postgres's restart broke
    # with the lease taken runs again as the same driver, not as one the lease keeps out
    task_id = self.request.id
    status = drive.operation_drive(pk=pk, owner=f"drive:{task_id}" if task_id else "")
    if status == "continue":
        try:
            drive_operation.apply_async((pk,), countdown=0)
        except BrokerUnavailable:
            # the lease is handed back: the resume task of whichever worker reconnects first
            # picks the operation up (ResumeOnConnect in rescaler/celery.py)
            log.warning("operation %s: broker unavailable, left for the resume task", pk)
    return status


@shared_task(name=WATCH_OPERATION, **database_retry())
def watch_operation(pk: int) -> str:
    """The operation's watchdog, queued with its first driver: once per lease period until the
    operation ends, queue a driver if the last one's lease expired (its worker was killed, or
    it failed or gave up holding the lease).

    Each operation has its own, so no moment without unfinished operations can stop the
    watching of the next one (the one resume chain for all operations did stop there, and an
    operation whose driver was lost after that stayed running, in the soak)."""
    state = drive.operation_watch(pk)
    if state == drive.Watch.ORPHANED:
        drive_operation.delay(pk)
    if state != drive.Watch.FINAL:
        watch_operation.apply_async((pk,), countdown=settings.RESCALER_LEASE_S + 1)
    return state


@shared_task(name=RESUME_OPERATIONS, **database_retry())
def resume_operations() -> list[int]:
    """A watchdog for every unfinished operation: queued each time a worker (re)connects to the
    broker, which may have come back empty (a Redis without persistence keeps no message)."""
    unfinished = drive.unfinished_operations()
    for pk in unfinished:
        watch_operation.delay(pk)
    return unfinished
