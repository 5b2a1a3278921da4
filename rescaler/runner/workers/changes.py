"""One change of a worker, recorded the same way by every action: the worker's summary, its
audit event (object type ``worker``) and its ``worker.*`` event, published once committed."""

from __future__ import annotations

from functools import partial
from typing import Any

from django.db import transaction

from rescaler.audit.services import audit_record
from rescaler.cluster.models import Worker
from rescaler.events import CLUSTER_GROUP, publish
from rescaler.runner.workers.errors import UnknownWorker, WorkerStatusConflict
from workers.control import WorkerStatus
from workers.rescale.protocol import AuditObject, Event


def worker_summary(worker: Worker) -> dict[str, Any]:
    """What an audit event's before/after and a ``worker.*`` event say of a worker."""
    return {
        "name": worker.name,
        "pipeline": worker.pipeline.name,
        "status": worker.status,
        "status_reason": worker.status_reason,
        "alive": worker.alive,
        "executor_id": worker.executor_id,
        "host": worker.host,
        "cores": worker.cores,
        "bootstrapped_epoch": worker.bootstrapped_epoch,
        "drain_operation_id": worker.drain_operation_id or None,
        "notice_deadline": worker.notice_deadline.isoformat() if worker.notice_deadline else None,
        "parallel_units": sorted(worker.parallel_units.values_list("number", flat=True)),
    }


def audit_object(worker: Worker) -> tuple[str, str]:
    return (AuditObject.WORKER, worker.name[:64])


def announce(event: Event, worker: Worker) -> None:
    """Publish once the change is committed: a client never hears of a status that rolled back."""
    summary = worker_summary(worker)
    transaction.on_commit(partial(publish, CLUSTER_GROUP, event, summary))


def actor_of(user: Any) -> Any:
    return user if user is not None and user.is_authenticated else None


def worker_get(*, name: str) -> Worker:
    """A worker by name; ``unknown_worker`` (404) if there is none."""
    worker = Worker.objects.select_related("pipeline").filter(name=name).first()
    if worker is None:
        raise UnknownWorker(f"no worker {name!r}")
    return worker


def locked(name: str) -> Worker:
    worker = (
        Worker.objects.select_for_update(of=("self",))
        .select_related("pipeline")
        .filter(name=name)
        .first()
    )
    if worker is None:
        raise UnknownWorker(f"no worker {name!r}")
    return worker


def conflict(worker: Worker, action: str, hint: str = "") -> WorkerStatusConflict:
    reason = f" ({worker.status_reason})" if worker.status_reason else ""
    return WorkerStatusConflict(
        f"cannot {action} worker {worker.name!r}: it is {worker.status}{reason}"
        + (f"; {hint}" if hint else "")
    )


def status_set(
    worker: Worker,
    status: WorkerStatus,
    status_reason: str,
    action: str,
    *,
    user: Any = None,
    actor_name: str = "",
    **after: Any,
) -> Worker:
    """One change of a worker's status: saved, audited (``after``: what the event adds to the
    worker's summary) and announced once committed."""
    before = worker_summary(worker)
    worker.status = status
    worker.status_reason = status_reason[:600]
    worker.save(update_fields=["status", "status_reason"])
    audit_record(
        actor=actor_of(user),
        actor_name=actor_name,
        action=action,
        obj=audit_object(worker),
        before=before,
        after={**worker_summary(worker), **after},
    )
    announce(Event.WORKER_STATUS, worker)
    return worker
