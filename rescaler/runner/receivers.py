"""What the runner's side does when other apps report (their signals; connected at start-up)."""

from __future__ import annotations

from typing import Any

from django.dispatch import receiver

from rescaler.operations.models import RescaleOperation
from rescaler.operations.signals import operation_finished
from rescaler.runner.workers import worker_drain_settled


@receiver(operation_finished, dispatch_uid="runner.worker_drain_settled")
def drain_settled(sender: Any, *, operation: RescaleOperation, **kwargs: Any) -> None:
    """A drain's operation ended: its worker is decommissioned, or back to cordoned (in the
    transaction that finished the operation). Any other operation: nothing."""
    worker_drain_settled(operation=operation)
