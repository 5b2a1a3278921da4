"""Driving an operation (the Celery task's body): the orchestrator over the ORM, under a lease.

Postgres is the channel between the orchestrator and the runner: commands go out as RunnerCommand
rows, progress comes back on the operation. A lease on the operation keeps a second driver out and
lets a new one take over once a dead driver's lease expires.
"""

from __future__ import annotations

import datetime as dt
import logging
import socket
import time
from enum import StrEnum
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import BooleanField, ExpressionWrapper, Q
from django.utils import timezone

from rescaler.audit.services import audit_record
from rescaler.cluster.models import RunnerCommand
from rescaler.cluster.services import command_submit, commands_submit
from rescaler.events import CLUSTER_GROUP, operation_group, publish
from rescaler.operations.cancel import (
    operation_cancel,
    operation_cancel_command,
    operation_runner_may_hold,
)
from rescaler.operations.models import OperationFragment, RescaleOperation
from rescaler.operations.progress import operation_progress, operation_progress_since
from rescaler.operations.signals import operation_finished
from rescaler.operations.summary import operation_summary
from workers.cycles import cycle_collection_paused
from workers.rescale.orchestrator import Orchestrator
from workers.rescale.protocol import (
    FINAL,
    AuditObject,
    CommandKind,
    Event,
    OperationStatus,
    Tick,
    TickStatus,
)

log = logging.getLogger("rescaler.operations")


class OrmChannel:
    """The orchestrator's channel to the runner: RunnerCommand rows out, progress rows in."""

    def __init__(self, op: RescaleOperation) -> None:
        self.op = op

    def submit(self, kind: CommandKind, payload: dict[str, Any]) -> int:
        if kind == CommandKind.OPERATION_CANCEL:
            # the orchestrator's (relaying a cancel, or a stuck step's): the one writer of the
            # cancel's command, which sends it once whoever asks
            return operation_cancel_command(operation=self.op, actor_name="orchestrator").id
        command = command_submit(
            pipeline=self.op.pipeline,
            kind=kind,
            payload=payload,
            actor_name="orchestrator",
            obj=(AuditObject.OPERATION, self.op.operation_id),
        )
        return command.id

    def submit_many(self, kind: CommandKind, payloads: list[dict[str, Any]]) -> list[int]:
        """Commands of one kind in one write (a wave of steps), each audited as ``submit``'s."""
        commands = commands_submit(
            pipeline=self.op.pipeline,
            kind=kind,
            payloads=payloads,
            actor_name="orchestrator",
            obj=(AuditObject.OPERATION, self.op.operation_id),
        )
        return [c.id for c in commands]

    def progress(self, operation_id: str) -> dict[str, Any] | None:
        return operation_progress(self.op)

    def progress_since(self, operation_id: str, version: int) -> tuple[dict[str, Any] | None, int]:
        """The progress with the steps recorded after ``version`` only (the orchestrator keeps
        the others from its earlier ticks)."""
        return operation_progress_since(self.op, version)

    def command_status(self, command_id: int) -> tuple[str, str] | None:
        row = RunnerCommand.objects.filter(id=command_id).values("status", "detail").first()
        if row is None or row["status"] == RunnerCommand.Status.PENDING:
            return None
        return row["status"], row["detail"]


def orchestrator_tick(orchestrator: Orchestrator) -> Tick:
    """One tick of the orchestrator in one transaction: the commands it writes (up to two
    waves of steps) commit together, once rather than once each, and the runner polls all of
    them or none. A tick that fails writes nothing; the drive loop's next run rebuilds the
    orchestrator from the runner's progress, so nothing it thought sent is lost. The cycle
    collector is paused meanwhile (``workers.cycles``): a tick reads a barrier's changed steps
    and writes a wave of commands, objects that all go when it returns."""
    with cycle_collection_paused(), transaction.atomic():
        return orchestrator.tick()


def _lease_free(now: dt.datetime) -> Q:
    """An operation no driver holds: it has no lease, or its lease expired."""
    return Q(lease_until__isnull=True) | Q(lease_until__lt=now)


def _take_lease(pk: int, owner: str, seconds: float) -> bool:
    now = timezone.now()
    taken = RescaleOperation.objects.filter(_lease_free(now) | Q(lease_owner=owner), pk=pk).update(
        lease_owner=owner, lease_until=now + dt.timedelta(seconds=seconds)
    )
    return taken == 1


def _finalize(op: RescaleOperation, status: OperationStatus, outcome: str, code: str = "") -> None:
    with transaction.atomic():
        op = RescaleOperation.objects.select_for_update().get(pk=op.pk)
        if op.is_final:
            return
        before = operation_summary(op)
        op.status = status
        op.outcome = outcome
        op.error_code = code
        op.finished_at = timezone.now()
        op.lease_owner, op.lease_until = "", None
        op.save()
        OperationFragment.objects.filter(operation=op).update(active=False)
        audit_record(
            actor_name="orchestrator",
            action=f"operation.{status}",
            obj=(AuditObject.OPERATION, op.operation_id),
            before=before,
            after={**operation_summary(op), "outcome": outcome},
        )
        # in the same transaction, so no crash can leave a finished drain's worker draining for
        # ever (the runner app's receiver decommissions it, or puts it back to cordoned)
        operation_finished.send(sender=RescaleOperation, operation=op)
    summary = operation_summary(op)
    publish(CLUSTER_GROUP, Event.OPERATION_FINISHED, summary)
    publish(operation_group(op.operation_id), Event.OPERATION_FINISHED, summary)


def operation_drive(
    *, pk: int, owner: str = "", budget_s: float | None = None, poll_s: float = 0.25
) -> str:
    """Drive an operation for up to ``budget_s``; returns its status ("continue" if not done).

    Safe to run twice (a second driver finds the lease taken) and after a crash (a new driver
    takes the expired lease and rebuilds everything from the runner's progress). ``owner``
    names the driver: a run that failed (Postgres restarting under it) and runs again under the
    same owner takes its own lease back at once, where another owner would find it taken.
    """
    budget_s = budget_s or settings.RESCALER_DRIVE_BUDGET_S
    owner = owner or f"{socket.gethostname()}:{time.monotonic_ns()}"
    lease_s = settings.RESCALER_LEASE_S
    if not _take_lease(pk, owner, lease_s):
        return "leased"
    # held as long as this drives it: without its plan, which the orchestrator's record holds
    op = RescaleOperation.objects.select_related("pipeline").defer("plan").get(pk=pk)
    if op.is_final:
        return op.status
    if op.status == OperationStatus.CANCELLING and not operation_runner_may_hold(op):
        # never sent to the runner (or refused by it): nothing can have moved. A begin it may
        # have taken is cancelled through it like any running operation, below
        _finalize(op, OperationStatus.CANCELLED, "cancelled before it started: nothing moved")
        return OperationStatus.CANCELLED
    if op.status == OperationStatus.PENDING:
        RescaleOperation.objects.filter(pk=op.pk).update(
            status=OperationStatus.RUNNING, started_at=timezone.now()
        )
        audit_record(
            actor_name="orchestrator",
            action="operation.started",
            obj=(AuditObject.OPERATION, op.operation_id),
        )
    # the stored operation is the single source of its plan: nothing is parsed again
    orchestrator = Orchestrator(
        OrmChannel(op),
        op.operation_id,
        op.plan_record(),
        step_timeout_s=settings.RESCALER_STEP_TIMEOUT_S,
    )
    deadline = time.monotonic() + budget_s
    cancel_sent = False
    while time.monotonic() < deadline:
        _take_lease(pk, owner, lease_s)
        status = RescaleOperation.objects.values_list("status", flat=True).get(pk=op.pk)
        if status == OperationStatus.CANCELLING and not cancel_sent:
            orchestrator.cancel()
            cancel_sent = True
        tick = orchestrator_tick(orchestrator)
        if tick.status in (TickStatus.COMPLETED, TickStatus.CANCELLED):
            vnodes = tick.progress.vnodes_moved if tick.progress else 0
            keys = tick.progress.keys_moved if tick.progress else 0
            outcome = f"{vnodes} vnodes and {keys} keys moved" + (
                f"; {tick.error}" if tick.error else ""
            )
            final = OperationStatus(tick.status)
            # an error with a final report is the runner's: a step it refused cancelled it
            _finalize(op, final, outcome, "runner_refused" if tick.error else "")
            return final
        if tick.status == TickStatus.FAILED:
            _finalize(op, OperationStatus.FAILED, tick.error, "runner_refused")
            return OperationStatus.FAILED
        if tick.error and not cancel_sent:  # a stuck step: the orchestrator cancels
            log.warning("operation %s: %s", op.operation_id, tick.error)
            operation_cancel(operation=op, actor_name="orchestrator", reason=tick.error)
            cancel_sent = True
        time.sleep(poll_s)
    # hand the lease back: the re-queued run (or any worker) takes over without waiting
    RescaleOperation.objects.filter(pk=pk, lease_owner=owner).update(
        lease_owner="", lease_until=None
    )
    return "continue"


def unfinished_operations() -> list[int]:
    """The operations that have yet to end."""
    return list(
        RescaleOperation.objects.exclude(status__in=FINAL)
        .order_by("id")
        .values_list("id", flat=True)
    )


class Watch(StrEnum):
    """What an operation's watchdog found."""

    FINAL = "final"  # the operation ended: the watchdog stops
    DRIVEN = "driven"  # a driver holds a live lease
    ORPHANED = "orphaned"  # unfinished and no live lease: a driver is needed


def operation_watch(pk: int) -> Watch:
    """What the operation's watchdog finds: ended, driven under a live lease, or orphaned."""
    free = (
        RescaleOperation.objects.filter(pk=pk)
        .exclude(status__in=FINAL)
        .annotate(free=ExpressionWrapper(_lease_free(timezone.now()), BooleanField()))
        .values_list("free", flat=True)
        .first()
    )
    if free is None:
        return Watch.FINAL
    return Watch.ORPHANED if free else Watch.DRIVEN
