"""Preemption notices: a worker says it will leave soon (docs/elastic-workers.md, "Preemption").

A spot instance's interruption notice or a Kubernetes eviction reaches the control plane through a
platform hook (``POST /api/v1/workers/<name>/notice``). Seed 003 calls this *RemovedSoon*: the node
says it will leave, and the scheduler stops placing work there. So the worker is cordoned at once,
audited as self-reported, with the notice's deadline. Under ``RESCALER_PREEMPTION_POLICY=drain``
(the default) its drain starts with priority: all-at-once, the fastest granularity, and an
operation already running on its fragments is asked to cancel (its completed moves stay) so that
the drain can start as soon as it ends (``notice_drains_resume``, called when any operation
ends). If the deadline passes first, the worker's loss is the loss path's, as for any executor
that disappears: nothing here kills it.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from rescaler.audit.services import audit_record
from rescaler.cluster.models import Worker
from rescaler.cluster.reasons import clean_reason
from rescaler.operations.cancel import operation_cancel
from rescaler.operations.errors import OperationFinal
from rescaler.operations.models import OperationFragment, RescaleOperation
from rescaler.runner.workers.changes import (
    announce,
    audit_object,
    conflict,
    locked,
    worker_summary,
)
from rescaler.runner.workers.drains import worker_drain
from workers.control import WorkerStatus
from workers.rescale import errors
from workers.rescale.protocol import Event

log = logging.getLogger(__name__)

NOTICE_DEADLINE_MIN_S = 1
NOTICE_DEADLINE_MAX_S = 86_400
# where a notice comes from: a platform hook through the API, or Spark decommissioning an executor
NOTICE_ORIGINS = ("platform", "spark")
PRIORITY_GRANULARITY = "all_at_once"


class PreemptionPolicy:
    DRAIN = "drain"  # cordon, then drain at once with priority
    CORDON = "cordon"  # cordon only: an operator decides


@dataclass(frozen=True)
class WorkerNotice:
    """What a notice did: the worker (cordoned, or draining) and its drain, if one started;
    ``waiting_for``: the operations it asked to cancel first (their fragments are the
    worker's), or why no drain could start."""

    worker: Worker
    operation: RescaleOperation | None
    waiting_for: tuple[str, ...] = ()
    detail: str = ""


def deadline_parse(value: Any) -> float:
    """Seconds from now until the worker goes: a number from 1 to 86,400."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise errors.MalformedRequest(
            f"'deadline_s' must be a number of seconds, not {type(value).__name__}"
        )
    if not NOTICE_DEADLINE_MIN_S <= value <= NOTICE_DEADLINE_MAX_S:
        raise errors.MalformedRequest(
            f"'deadline_s' must be between {NOTICE_DEADLINE_MIN_S} and {NOTICE_DEADLINE_MAX_S:,} "
            f"seconds, not {value}"
        )
    return float(value)


def worker_notice(
    *,
    user: Any,
    name: str,
    deadline_s: float | None = None,
    reason: str = "",
    origin: str = "platform",
) -> WorkerNotice:
    """Record a preemption notice: cordon the worker now (audited as self-reported, with the
    deadline), then, under the drain policy, start its drain with priority. A second notice
    keeps the earlier deadline; a worker already draining keeps its drain."""
    reason = clean_reason(reason)
    deadline_s = deadline_parse(
        settings.RESCALER_PREEMPTION_DEADLINE_S if deadline_s is None else deadline_s
    )
    if origin not in NOTICE_ORIGINS:
        raise errors.MalformedRequest(f"a notice's origin must be one of {NOTICE_ORIGINS}")
    with transaction.atomic():
        worker = locked(name)
        if worker.status not in (
            WorkerStatus.ACTIVE,
            WorkerStatus.CORDONED,
            WorkerStatus.DRAINING,
        ):
            raise conflict(worker, "take a notice for", "it is already leaving or gone")
        now = timezone.now()
        deadline = now + dt.timedelta(seconds=deadline_s)
        before = worker_summary(worker)
        earlier = worker.notice_deadline is not None and worker.notice_deadline <= deadline
        if not earlier:
            worker.notice_at = worker.notice_at or now
            worker.notice_deadline = deadline
            worker.notice_origin = origin
        leaves = worker.notice_deadline
        assert leaves is not None
        words = f"preemption notice ({origin}): leaves by {leaves:%H:%M:%S} UTC" + (
            f": {reason}" if reason else ""
        )
        fields = ["notice_at", "notice_deadline", "notice_origin"]
        if worker.status == WorkerStatus.ACTIVE:
            worker.status = WorkerStatus.CORDONED
            worker.status_reason = words[:600]
            fields += ["status", "status_reason"]
        worker.save(update_fields=fields)
        if not earlier:
            audit_record(
                actor_name=f"worker {worker.name} (self-reported)"[:150],
                action="worker.notice",
                obj=audit_object(worker),
                before=before,
                after={
                    **worker_summary(worker),
                    "self_reported": True,
                    "origin": origin,
                    "deadline": leaves.isoformat(),
                    "deadline_s": deadline_s,
                    "reason": reason,
                    "reported_by": getattr(user, "username", "") or "",
                },
            )
            announce(Event.WORKER_STATUS, worker)
    if (
        settings.RESCALER_PREEMPTION_POLICY != PreemptionPolicy.DRAIN
        or worker.status == WorkerStatus.DRAINING
    ):
        return WorkerNotice(worker, None)
    return _drain_with_priority(worker, user=user)


def _drain_with_priority(worker: Worker, *, user: Any = None) -> WorkerNotice:
    """Drain the noticed worker all at once; if its fragments are busy, ask their operations to
    cancel and leave the drain to ``notice_drains_resume`` when they end."""
    reason = f"preemption notice: leaves by {worker.notice_deadline:%H:%M:%S} UTC"
    try:
        with transaction.atomic():
            drain = worker_drain(
                user=user, name=worker.name, reason=reason, granularity=PRIORITY_GRANULARITY
            )
        return WorkerNotice(drain.worker, drain.operation)
    except errors.FragmentBusy:
        busy = _busy_operations(worker)
        for op in busy:
            # the cancel decides on the row it locks (``operation_cancellable``): one already
            # cancelling records nothing, one that ended since it was read is refused
            try:
                operation_cancel(
                    operation=op,
                    actor_name=f"worker {worker.name} (preemption notice)"[:150],
                    reason=f"a preemption notice for worker {worker.name} takes priority: "
                    f"its drain starts when this operation ends",
                )
            except OperationFinal:
                pass  # it ended since it was read: nothing to cancel, its end resumes the drain
        worker.refresh_from_db()
        ids = tuple(op.operation_id for op in busy)
        return WorkerNotice(
            worker,
            None,
            ids,
            f"its drain starts once operation(s) {', '.join(ids)} end (asked to cancel)",
        )
    except errors.RescaleError as exc:  # DrainEmptiesFragment among them
        # cordoned, and no drain can start: the loss path takes over at the deadline
        log.warning("preemption notice for worker %s: no drain (%s)", worker.name, exc)
        audit_record(
            actor_name=f"worker {worker.name} (self-reported)"[:150],
            action="worker.notice_drain_refused",
            obj=audit_object(worker),
            after={**worker_summary(worker), "error": str(exc)},
        )
        worker.refresh_from_db()
        return WorkerNotice(worker, None, (), str(exc))


def _busy_operations(worker: Worker) -> list[RescaleOperation]:
    """The active operations holding a fragment that runs on the worker's PUs."""
    ids = (
        OperationFragment.objects.filter(
            active=True,
            fragment__pipeline_id=worker.pipeline_id,
            fragment__parallel_units__worker=worker,
        )
        .values_list("operation_id", flat=True)
        .distinct()
    )
    return list(RescaleOperation.objects.filter(pk__in=list(ids)).order_by("created_at"))


def notice_drains_resume(*, operation: RescaleOperation) -> list[WorkerNotice]:
    """An operation ended: start the drains of noticed workers of its pipeline that wait (their
    fragments were busy, or their own drain failed) while their deadline is ahead. Runs after
    the transaction that finished the operation has committed."""
    if settings.RESCALER_PREEMPTION_POLICY != PreemptionPolicy.DRAIN:
        return []
    waiting = Worker.objects.filter(
        pipeline_id=operation.pipeline_id,
        status=WorkerStatus.CORDONED,
        notice_deadline__gt=timezone.now(),
    ).order_by("notice_deadline")
    return [_drain_with_priority(worker) for worker in waiting]
