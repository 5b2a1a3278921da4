"""Cancelling a rescale operation.

Every cancel goes through :func:`operation_cancel`, whoever asks (a user through the API or the
console, the orchestrator when a step times out, a worker's preemption notice), so each one is
checked, audited and published the same way; its command for the runner through
:func:`operation_cancel_command`, which writes it once.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import QuerySet

from rescaler.audit.services import audit_record
from rescaler.cluster.models import RunnerCommand
from rescaler.cluster.services import command_submit
from rescaler.events import operation_group, publish
from rescaler.operations import enqueue
from rescaler.operations.errors import OperationFinal
from rescaler.operations.models import RescaleOperation
from rescaler.operations.summary import operation_summary
from workers.rescale.protocol import (
    AuditObject,
    CommandKind,
    Event,
    OperationRef,
    OperationStatus,
)


def operation_cancellable(op: RescaleOperation) -> bool:
    """Whether ``op`` may be cancelled now: pending or running. A cancelling one is not (a
    second cancel records nothing), nor an ended one (a cancel is refused: ``OperationFinal``).
    The one rule: ``operation_cancel`` asks it of the row it locks, for whoever cancels (the
    API, the console's form, a preemption notice, the orchestrator), and the operation page's
    head asks it of the row it shows, to offer the cancel form or not."""
    return not op.is_final and op.status != OperationStatus.CANCELLING


def operation_runner_may_hold(op: RescaleOperation) -> bool:
    """Whether the runner may hold ``op``: it reported on it, or an ``operation.begin`` of it was
    written that the runner did not refuse (it may have taken one before its first report). Only
    the runner can then say the operation ended: a cancel tells it (``operation_cancel_command``);
    otherwise nothing can have moved, and the drive loop ends the cancel without asking it."""
    return bool(op.progress) or operation_begin_sent(op)


def operation_cancel(
    *,
    operation: RescaleOperation,
    user: Any = None,
    actor_name: str = "",
    reason: str = "",
) -> RescaleOperation:
    """Ask for a cancel: steps being acquired finish, held steps go back to their source, no new
    step starts (docs/rescale.md, "Cancel").

    ``user`` is who asked through the API; a component that cancels on its own (the orchestrator
    when a step times out) names itself in ``actor_name`` and says why in ``reason``, which the
    audit event and the operation's outcome keep. Cancelling twice is harmless: the second call
    records nothing.
    """
    with transaction.atomic():
        op = RescaleOperation.objects.select_for_update().get(pk=operation.pk)
        if not operation_cancellable(op):
            if op.is_final:
                raise OperationFinal(f"operation {op.operation_id} already ended: {op.status}")
            return op  # cancelling already
        before = operation_summary(op)
        op.status = OperationStatus.CANCELLING
        op.cancel_requested_by = user if user is not None and user.is_authenticated else None
        fields = ["status", "cancel_requested_by"]
        if reason:
            op.outcome = reason
            fields.append("outcome")
        op.save(update_fields=fields)
        after = operation_summary(op)
        audit_record(
            actor=user,
            actor_name=actor_name,
            action="operation.cancel_requested",
            obj=(AuditObject.OPERATION, op.operation_id),
            before=before,
            after={**after, "reason": reason} if reason else after,
        )
        if operation_runner_may_hold(op):
            # tell it now, whatever the orchestrator does; it applies the cancel after the begin
            operation_cancel_command(operation=op, user=user, actor_name=actor_name)
        transaction.on_commit(lambda: enqueue.operation_drive_enqueue(op.id))
    publish(
        operation_group(op.operation_id),
        Event.OPERATION_CANCELLING,
        OperationRef(op.operation_id).to_json(),
    )
    return op


def operation_begin_sent(op: RescaleOperation) -> bool:
    """Whether an ``operation.begin`` of ``op`` was written that the runner did not refuse: the
    runner may then hold the operation even before its first report, so only the runner can
    say it ended (a cancel is then sent, never assumed)."""
    return _commands_not_refused(op, CommandKind.OPERATION_BEGIN).exists()


def _commands_not_refused(op: RescaleOperation, kind: CommandKind) -> QuerySet[RunnerCommand]:
    """The operation's runner commands of ``kind`` that the runner did not refuse."""
    return RunnerCommand.objects.filter(
        pipeline_id=op.pipeline_id, kind=kind, payload__operation_id=op.operation_id
    ).exclude(status=RunnerCommand.Status.FAILED)


def operation_cancel_command(
    *, operation: RescaleOperation, user: Any = None, actor_name: str = ""
) -> RunnerCommand:
    """The operation's ``operation.cancel`` for the runner, written once whoever sends it (a
    user's cancel, the drive loop relaying it, the stuck-step watchdog): a pending or done one
    is returned as it is, so the runner is told once and the audit names the first asker.

    Its audit event names who asked: the operation's ``cancel_requested_by`` when a user did,
    else the sender (``user``, or a component's ``actor_name``). Only a command the runner
    refused lets another be written. The operation's row is locked, so two senders at once
    still write one command.
    """
    with transaction.atomic():
        op = (
            RescaleOperation.objects.select_for_update(of=("self",))
            .select_related("pipeline", "cancel_requested_by")
            .get(pk=operation.pk)
        )
        sent = _commands_not_refused(op, CommandKind.OPERATION_CANCEL).order_by("id").first()
        if sent is not None:
            return sent
        asker = op.cancel_requested_by  # a user asked: the command is theirs, whoever sends it
        return command_submit(
            pipeline=op.pipeline,
            kind=CommandKind.OPERATION_CANCEL,
            payload=OperationRef(op.operation_id).to_json(),
            user=asker or user,
            actor_name="" if asker is not None else actor_name,
            obj=(AuditObject.OPERATION, op.operation_id),
        )
