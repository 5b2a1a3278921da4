"""Celery tasks of the elastic workers: thin, ids only; the work is in ``machines``.

A removed worker's machine is released by a task queued once the removal is committed, with
retries: the provider's command may take a minute, and neither the runner's barrier (which
reports the removal) nor an HTTP request waits for it.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from kombu.exceptions import OperationalError as BrokerUnavailable

from rescaler.retries import database_retry
from rescaler.runner.workers import machines

log = logging.getLogger(__name__)

# A provider's failure is tried this many times in all, backing off up to two minutes, then
# recorded as ``worker.release_failed``. Postgres restarting under the task: it runs again
# (rescaler.retries).
RELEASE_ATTEMPTS = 5
RELEASE_BACKOFF_S, RELEASE_BACKOFF_MAX_S = 5, 120


@shared_task(
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    name="rescaler.runner.release_worker",
    **database_retry(),
)
def release_worker(self: Any, worker_pk: int, attempt: int = 0) -> str:
    """Give a removed worker's machine back (``machines.worker_release``). ``attempt`` counts
    the provider's failures so far, apart from the task's retries: a run again for the database
    down (``database_retry``) keeps it, so an outage spends none of the provider's attempts."""
    try:
        return machines.worker_release(
            worker_pk=worker_pk, last_attempt=attempt >= RELEASE_ATTEMPTS - 1
        )
    except machines.ReleaseFailed as exc:
        countdown = min(RELEASE_BACKOFF_S * 2**attempt, RELEASE_BACKOFF_MAX_S)
        raise self.retry(
            exc=exc,
            countdown=countdown,
            kwargs={**(self.request.kwargs or {}), "attempt": attempt + 1},
            # bounded by RELEASE_ATTEMPTS, not by what the database's retries left
            max_retries=self.request.retries + 1,
        ) from exc


def release_later(worker_pk: int) -> None:
    """Queue the release (called once the worker's removal is committed). A broker that is
    down is recorded as a failed release, so the operator knows the machine is still there."""
    try:
        release_worker.delay(worker_pk)
    except BrokerUnavailable as exc:
        log.exception("worker %s: the release could not be queued", worker_pk)
        machines.worker_release_failed(
            worker_pk=worker_pk, error=f"the release could not be queued: {exc}"
        )
