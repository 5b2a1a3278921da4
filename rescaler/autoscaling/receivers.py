"""What the autoscaler does when the apps below it report (their signals; connected at
start-up by ``AutoscalingConfig.ready``)."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.dispatch import receiver

from rescaler.autoscaling import tasks
from rescaler.autoscaling.decisions import decision_carried_out
from rescaler.autoscaling.evaluation import AUTOSCALER, evaluation_due
from rescaler.autoscaling.model import Mode
from rescaler.autoscaling.models import AutoscalingDecision
from rescaler.autoscaling.provisioning import scale_in_release
from rescaler.cluster.models import Pipeline
from rescaler.cluster.signals import epoch_recorded
from rescaler.operations.models import RescaleOperation
from rescaler.operations.signals import operation_finished, operation_requested
from workers.rescale.protocol import OperationStatus

log = logging.getLogger(__name__)


@receiver(epoch_recorded, dispatch_uid="autoscaling.evaluation_queue")
def evaluation_queue(sender: Any, *, pipeline: Pipeline, **kwargs: Any) -> None:
    """An epoch of the pipeline was recorded: queue its evaluation, unless one was queued
    within the interval (``evaluation_due``) or its policy is off; once committed."""
    if evaluation_due(pipeline_id=pipeline.pk):
        transaction.on_commit(lambda: tasks.evaluate_later(pipeline.pk))


@receiver(operation_requested, dispatch_uid="autoscaling.decision_carried_out")
def decision_link(
    sender: Any,
    *,
    operation: RescaleOperation,
    plan_id: str | None = None,
    actor_name: str = "",
    **kwargs: Any,
) -> None:
    """An operation was requested: the decision it carries out, if any, is applied (or started).
    In a savepoint: a failure here (logged by the sender) never undoes the request."""
    with transaction.atomic():
        decision_carried_out(operation=operation, plan_id=plan_id, actor_name=actor_name)


@receiver(operation_finished, dispatch_uid="autoscaling.scale_in_release")
def scale_in_released(sender: Any, *, operation: RescaleOperation, **kwargs: Any) -> None:
    """An operation that auto mode started completed: once committed (its PUs released, its
    final mapping published), the workers it emptied are drained and removed
    (``provisioning.scale_in_release``). Any other operation: nothing. A failure is logged:
    the operation's end never rolls back for it, and the workers stay."""
    if operation.status != OperationStatus.COMPLETED:
        return
    if not AutoscalingDecision.objects.filter(operation=operation, mode=Mode.AUTO.value).exists():
        return
    pk, operation_id = operation.pk, operation.operation_id

    def release() -> None:
        try:
            scale_in_release(operation_pk=pk, actor_name=AUTOSCALER)
        except Exception:
            log.exception("releasing the workers emptied by %s failed", operation_id)

    transaction.on_commit(release)
