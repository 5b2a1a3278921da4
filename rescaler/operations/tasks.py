"""Celery tasks of rescale operations: thin, ids only, the work is in rescaler.operations.drive."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from celery.signals import worker_ready
from django.conf import settings

from rescaler.operations import drive


@shared_task(
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    name="rescaler.operations.drive_operation",
)
def drive_operation(self: Any, pk: int) -> str:
    """Drive an operation for a while; re-queue itself until it ends.

    Each run is bounded (RESCALER_DRIVE_BUDGET_S) so that no message stays unacknowledged for
    long; a killed worker's operation is picked up by the next worker (see resume below).
    """
    status = drive.operation_drive(pk=pk)
    if status == "continue":
        drive_operation.apply_async((pk,), countdown=0)
    return status


@shared_task(name="rescaler.operations.resume_operations")
def resume_operations() -> list[int]:
    """Queue a driver for every operation whose driver's lease expired; while any operation is
    unfinished, look again after one lease period (a worker killed with its lease still live)."""
    orphaned = drive.orphaned_operations()
    for pk in orphaned:
        drive_operation.delay(pk)
    if drive.unfinished_operations():
        resume_operations.apply_async(countdown=settings.RESCALER_LEASE_S + 1)
    return orphaned


@worker_ready.connect
def _resume_on_start(sender: Any = None, **kwargs: Any) -> None:
    # a worker that starts picks up operations whose driver died (their lease expired)
    resume_operations.delay()
