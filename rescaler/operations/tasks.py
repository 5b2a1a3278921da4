"""Celery tasks of rescale operations: thin, ids only, the work is in rescaler.operations.drive."""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from django.conf import settings
from django.db import InterfaceError, OperationalError
from kombu.exceptions import OperationalError as BrokerUnavailable

from rescaler.operations import drive

log = logging.getLogger(__name__)

# Postgres restarting under a task: the task runs again (a new connection), with backoff up to
# half a minute, for about ten minutes; Celery's Django fix-up drops the broken connection.
DATABASE_DOWN = (OperationalError, InterfaceError)
RETRY = {
    "autoretry_for": DATABASE_DOWN,
    "retry_backoff": 1,
    "retry_backoff_max": 30,
    "retry_jitter": False,
    "max_retries": 25,
}


@shared_task(
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    name="rescaler.operations.drive_operation",
    **RETRY,
)
def drive_operation(self: Any, pk: int) -> str:
    """Drive an operation for a while; re-queue itself until it ends.

    Each run is bounded (RESCALER_DRIVE_BUDGET_S) so that no message stays unacknowledged for
    long; a killed worker's operation is picked up by the next worker (see resume below).
    """
    status = drive.operation_drive(pk=pk)
    if status == "continue":
        try:
            drive_operation.apply_async((pk,), countdown=0)
        except BrokerUnavailable:
            # the lease is handed back: the resume task of whichever worker reconnects first
            # picks the operation up (ResumeOnConnect in rescaler/celery.py)
            log.warning("operation %s: broker unavailable, left for the resume task", pk)
    return status


@shared_task(name="rescaler.operations.resume_operations", **RETRY)
def resume_operations() -> list[int]:
    """Queue a driver for every operation whose driver's lease expired; while any operation is
    unfinished, look again after one lease period (a worker killed with its lease still live)."""
    orphaned = drive.orphaned_operations()
    for pk in orphaned:
        drive_operation.delay(pk)
    if drive.unfinished_operations():
        resume_operations.apply_async(countdown=settings.RESCALER_LEASE_S + 1)
    return orphaned
