"""What the runner's side does when other apps report (their signals; connected at start-up)."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.dispatch import receiver

from rescaler.operations.models import RescaleOperation
from rescaler.operations.signals import operation_finished
from rescaler.runner.workers import notice_drains_resume, worker_drain_settled

log = logging.getLogger(__name__)


@receiver(operation_finished, dispatch_uid="runner.worker_drain_settled")
def drain_settled(sender: Any, *, operation: RescaleOperation, **kwargs: Any) -> None:
    """A drain's operation ended: its worker is decommissioned, or back to cordoned (in the
    transaction that finished the operation). Any other operation: nothing."""
    worker_drain_settled(operation=operation)


@receiver(operation_finished, dispatch_uid="runner.notice_drains_resume")
def notice_drains(sender: Any, *, operation: RescaleOperation, **kwargs: Any) -> None:
    """Any operation ended: a noticed worker whose drain waited for its fragments starts it,
    once the transaction that ended the operation (and released its fragments) commits."""

    def resume() -> None:
        try:
            notice_drains_resume(operation=operation)
        except Exception:  # the notice stays; the next operation's end tries again
            log.exception("resuming preemption drains after %s failed", operation.operation_id)

    transaction.on_commit(resume)
