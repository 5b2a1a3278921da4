"""What the autoscaler does when the apps below it report (their signals; connected at
start-up by ``AutoscalingConfig.ready``)."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.dispatch import receiver

from rescaler.autoscaling.decisions import decision_carried_out
from rescaler.operations.models import RescaleOperation
from rescaler.operations.signals import operation_requested


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
