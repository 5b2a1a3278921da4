"""Cordon and uncordon: whether a worker's PUs take new vnodes, as operators ask."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from rescaler.cluster.models import Worker
from rescaler.cluster.reasons import clean_reason
from rescaler.runner.workers.changes import conflict, locked, status_set
from workers.control import WorkerStatus


@transaction.atomic
def worker_cordon(*, user: Any, name: str, reason: str = "") -> Worker:
    """No new vnodes go to the worker; it keeps what it has. Cordoning a cordoned worker
    changes nothing (and records nothing)."""
    reason = clean_reason(reason)
    worker = locked(name)
    if worker.status == WorkerStatus.CORDONED:
        return worker
    if worker.status != WorkerStatus.ACTIVE:
        raise conflict(worker, "cordon", "only an active worker can be cordoned")
    return status_set(
        worker, WorkerStatus.CORDONED, reason, "worker.cordoned", user=user, reason=reason
    )


@transaction.atomic
def worker_uncordon(*, user: Any, name: str, reason: str = "") -> Worker:
    """A cordoned worker takes vnodes again. Uncordoning an active worker changes nothing."""
    reason = clean_reason(reason)
    worker = locked(name)
    if worker.status == WorkerStatus.ACTIVE:
        return worker
    if worker.status != WorkerStatus.CORDONED:
        hint = (
            f"cancel its drain operation {worker.drain_operation_id} first: it goes back to "
            f"cordoned when the operation ends"
            if worker.status == WorkerStatus.DRAINING
            else "only a cordoned worker can be uncordoned"
        )
        raise conflict(worker, "uncordon", hint)
    return status_set(
        worker, WorkerStatus.ACTIVE, reason, "worker.uncordoned", user=user, reason=reason
    )
