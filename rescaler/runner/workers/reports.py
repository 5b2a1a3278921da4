"""What the runner reports at a barrier: its workers' joins, losses and removals, and its
refusals of a ``worker.decommission``."""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from rescaler.audit.services import audit_record
from rescaler.cluster.models import ParallelUnit, Pipeline, RunnerCommand, Worker
from rescaler.cluster.services import GONE, PipelineNotFound
from rescaler.runner.workers import tasks
from rescaler.runner.workers.changes import announce, audit_object, status_set, worker_summary
from rescaler.runner.workers.notices import worker_notice
from workers.control import WorkerInfo, WorkerStatus
from workers.rescale.protocol import CommandKind, Event

log = logging.getLogger(__name__)


@transaction.atomic
def workers_record(*, pipeline: str, epoch: int, workers: list[WorkerInfo]) -> list[Worker]:
    """The runner's whole view of its workers at the barrier of ``epoch``.

    A worker seen for the first time (or again, after it was lost or removed) joins as active;
    a known worker that is missing or not alive is removed if it was being decommissioned (and
    the provider is asked to give its machine back), else lost. Safe to repeat: a report that
    changes nothing records nothing. Returns the workers of the pipeline.
    """
    try:
        target = Pipeline.objects.locked().get(name=pipeline)
    except Pipeline.DoesNotExist:
        raise PipelineNotFound(f"no pipeline named {pipeline!r} has registered") from None
    now = timezone.now()
    alive = {info.name: info for info in workers if info.alive}
    known = {
        w.name: w
        for w in Worker.objects.select_for_update(of=("self",))
        .select_related("pipeline")
        .filter(Q(pipeline=target) | Q(name__in=list(alive)))
    }
    for info in alive.values():
        _worker_seen(target, known.get(info.name), info, epoch, now)
    for worker in known.values():
        if worker.name in alive or worker.pipeline_id != target.id or worker.status in GONE:
            continue
        _worker_gone(worker, epoch, now)
    return list(Worker.objects.filter(pipeline=target).select_related("pipeline"))


def _worker_seen(
    pipeline: Pipeline, worker: Worker | None, info: WorkerInfo, epoch: int, now: Any
) -> None:
    fields = {
        "pipeline": pipeline,
        "executor_id": info.executor_id[:64],
        "host": info.host[:255],
        "cores": max(info.cores, 0),
        "bootstrapped_epoch": info.bootstrapped_epoch,
        "alive": True,
        "last_seen": now,
    }
    # a join: a new worker, one that comes back after it was lost or removed, or one the
    # registered topology named and the runner reports for the first time
    if worker is None or worker.status in GONE or worker.joined_at is None:
        before = None if worker is None else worker_summary(worker)
        if worker is None:
            worker = Worker(name=info.name)
        if worker.status in GONE or worker.pk is None:
            worker.status = WorkerStatus.ACTIVE
            worker.status_reason = ""
            worker.drain_operation_id = ""
        for name, value in fields.items():
            setattr(worker, name, value)
        worker.joined_at, worker.left_at = now, None
        worker.save()
        _pus_record(worker, info.parallel_units)
        audit_record(
            actor_name="runner",
            action="worker.joined",
            obj=audit_object(worker),
            before=before,
            after={**worker_summary(worker), "epoch": epoch},
        )
        announce(Event.WORKER_JOINED, worker)
        return
    was_bootstrapped = worker.bootstrapped_epoch is None or worker.bootstrapped_epoch >= 0
    changed = any(
        getattr(worker, name) != value for name, value in fields.items() if name != "last_seen"
    )
    before = worker_summary(worker)
    for name, value in fields.items():
        setattr(worker, name, value)
    worker.save()
    # PUs of a lost worker that the runner gave this one (their stores rebuilt here)
    adopted = {
        pu.number: pu.worker.name
        for pu in ParallelUnit.objects.filter(number__in=info.parallel_units)
        .exclude(worker=worker)
        .select_related("worker")
    }
    pus_changed = _pus_record(worker, info.parallel_units)
    if adopted:
        audit_record(
            actor_name="runner",
            action="worker.adopted",
            obj=audit_object(worker),
            before=before,
            after={
                **worker_summary(worker),
                "epoch": epoch,
                "adopted": {str(n): name for n, name in sorted(adopted.items())},
            },
        )
    if not was_bootstrapped and info.bootstrapped_epoch >= 0:
        audit_record(
            actor_name="runner",
            action="worker.bootstrapped",
            obj=audit_object(worker),
            after={**worker_summary(worker), "epoch": epoch},
        )
    if changed or pus_changed:
        announce(Event.WORKER_STATUS, worker)
    if info.notice_at is not None and worker.notice_at is None:
        # Spark is decommissioning its executor: the worker's own notice, taken once this
        # report is committed (a drain is an operation request of its own)
        transaction.on_commit(partial(_spark_notice, worker.name))


def _spark_notice(name: str) -> None:
    try:
        worker_notice(user=None, name=name, origin="spark")
    except Exception:  # the worker left meanwhile, or the drain was refused: it is logged
        log.exception("the preemption notice of worker %s (from Spark) was not taken", name)


def _pus_record(worker: Worker, numbers: tuple[int, ...]) -> bool:
    """The worker's PUs are exactly ``numbers``, active; one it no longer has was removed by the
    runner. Returns whether anything changed."""
    existing = set(ParallelUnit.objects.filter(number__in=numbers).values_list("number", flat=True))
    created = ParallelUnit.objects.bulk_create(
        [ParallelUnit(number=n, worker=worker) for n in numbers if n not in existing]
    )
    moved = (
        ParallelUnit.objects.filter(number__in=numbers)
        .exclude(worker=worker, status=ParallelUnit.Status.ACTIVE)
        .update(worker=worker, status=ParallelUnit.Status.ACTIVE)
    )
    dropped = (
        ParallelUnit.objects.filter(worker=worker, status=ParallelUnit.Status.ACTIVE)
        .exclude(number__in=numbers)
        .update(status=ParallelUnit.Status.REMOVED)
    )
    return bool(created or moved or dropped)


def _worker_gone(worker: Worker, epoch: int, now: Any) -> None:
    before = worker_summary(worker)
    worker.alive = False
    worker.left_at = now
    if worker.status == WorkerStatus.DECOMMISSIONING:
        worker.status = WorkerStatus.REMOVED
        worker.status_reason = f"decommissioned; gone from the runner's report at epoch {epoch}"
        pu_status, action, event = (
            ParallelUnit.Status.REMOVED,
            "worker.removed",
            Event.WORKER_REMOVED,
        )
        transaction.on_commit(partial(tasks.release_later, worker.pk))
    else:
        # the runner gives a lost worker's PUs to live workers when it has any (their reports,
        # recorded before this, moved the PUs): then nothing is left for the operator to move
        kept = ParallelUnit.objects.filter(worker=worker).exclude(
            status=ParallelUnit.Status.REMOVED
        )
        worker.status_reason = (
            f"its executor disappeared without a drain (runner's report at epoch {epoch}); "
            + (
                "remove its PUs from their fragments to move their vnodes to live PUs"
                if kept.exists()
                else "its PUs went to live workers, where their stores are rebuilt from the "
                "durable copy"
            )
        )
        worker.status = WorkerStatus.LOST
        pu_status, action, event = ParallelUnit.Status.LOST, "worker.lost", Event.WORKER_LOST
    worker.save()
    ParallelUnit.objects.filter(worker=worker).exclude(status=ParallelUnit.Status.REMOVED).update(
        status=pu_status
    )
    audit_record(
        actor_name="runner",
        action=action,
        obj=audit_object(worker),
        before=before,
        after={**worker_summary(worker), "epoch": epoch},
    )
    announce(event, worker)


def worker_command_acked(*, command_id: int, status: str, detail: str = "") -> None:
    """A refused ``worker.decommission`` (its PUs still hold vnodes, say) puts the worker back to
    cordoned with the runner's reason, rather than leaving it decommissioning for ever."""
    if status != RunnerCommand.Status.FAILED:
        return
    command = RunnerCommand.objects.filter(
        id=command_id, kind=CommandKind.WORKER_DECOMMISSION
    ).first()
    if command is None:
        return
    with transaction.atomic():
        worker = (
            Worker.objects.select_for_update(of=("self",))
            .select_related("pipeline")
            .filter(
                name=str(command.payload.get("worker", "")), status=WorkerStatus.DECOMMISSIONING
            )
            .first()
        )
        if worker is None:
            return
        status_set(
            worker,
            WorkerStatus.CORDONED,
            f"the runner refused to decommission it: {detail}",
            "worker.decommission_refused",
            actor_name="runner",
            command=command_id,
            detail=detail,
        )
