"""Why an unfinished operation is not moving right now, in the words an operator needs.

An operation advances only at the runner's epoch barriers, driven by an orchestrator. When it
seems stuck, the operator's first question is "what is it waiting for?": the answer is derived
here from facts the control plane already has (the operation's status and last progress, the
runner's heartbeat, the last committed epoch), never guessed, and shown by the API and console.
"""

from __future__ import annotations

import enum
import time
from dataclasses import asdict, dataclass
from typing import Any

from django.conf import settings
from django.utils import timezone

from rescaler.cluster.models import EpochMetric
from rescaler.operations.counts import StepCounts, step_counts, steps_of
from rescaler.operations.models import RescaleOperation
from workers.rescale.protocol import OperationStatus, StepPhase

# an epoch older than this (or one with no rows) means the stream is idle
IDLE_AFTER_S = 5.0


class WaitingFor(enum.StrEnum):
    ORCHESTRATOR = "orchestrator"  # accepted; no Celery worker has taken it yet
    RUNNER = "runner"  # the runner is down, stopping or silent
    BARRIER = "barrier"  # the next epoch boundary applies the next change
    EXPORT = "export"  # steps' state is being exported beside the epochs
    PACING = "pacing"  # the granularity holds the next steps back (steps in flight, bytes/s)
    # a step's hold queue reached its bound: the stream waits at the barrier for its export
    HOLD_QUEUE_FULL = "hold_queue_full"


@dataclass(frozen=True)
class Waiting:
    waiting_for: WaitingFor
    detail: str
    stream_idle: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def operation_waiting(op: RescaleOperation, *, counts: StepCounts | None = None) -> Waiting | None:
    """What ``op`` waits for now; None once it is final. Its steps are counted (``counts``, when
    the caller has them), never read one by one but for those whose hold queue is full."""
    if op.is_final:
        return None
    pipeline = op.pipeline
    last = EpochMetric.objects.filter(pipeline=pipeline).order_by("-epoch").first()
    now = timezone.now()
    idle = (
        last is None or last.rows == 0 or (now - last.committed_at).total_seconds() > IDLE_AFTER_S
    )
    idle_note = (
        " The stream is idle (no records in the last epoch): the runner forces an empty epoch "
        "within about one trigger interval, so the operation does not wait for records."
        if idle
        else ""
    )
    beat_age = (now - pipeline.heartbeat_at).total_seconds() if pipeline.heartbeat_at else None
    if (
        beat_age is None
        or beat_age > settings.RESCALER_HEARTBEAT_STALE_S
        or pipeline.status != pipeline.Status.RUNNING
    ):
        age = "never" if beat_age is None else f"{beat_age:.0f} s ago"
        return Waiting(
            WaitingFor.RUNNER,
            f"waiting for the runner of {pipeline.name}: it is {pipeline.status}, last heartbeat "
            f"{age}. The operation resumes where it was once the runner is back "
            f"(manage.py run_pipeline).",
            idle,
        )
    if op.status == OperationStatus.PENDING:
        return Waiting(
            WaitingFor.ORCHESTRATOR,
            "waiting for an orchestrator: no Celery worker has taken the operation yet "
            "(is `celery -A rescaler worker` running?).",
            idle,
        )
    progress = op.progress or {}
    if not progress:
        return Waiting(
            WaitingFor.BARRIER,
            "waiting for a barrier: the runner begins the operation at its next epoch "
            "boundary." + idle_note,
            idle,
        )
    counts = counts or step_counts(op)  # the prefetched rows when the API asks
    full = set(progress.get("hold_queue_full") or ())
    if full:
        waited = [s for s in steps_of(op, full) if s.phase != StepPhase.PLANNED]
        return Waiting(
            WaitingFor.HOLD_QUEUE_FULL,
            f"hold queues full: {sum(s.hold_bytes for s in waited):,} bytes of records are "
            f"held for {sum(len(s.vnodes) for s in waited)} vnodes (steps "
            f"{', '.join(str(s.step) for s in waited)}), at their bound "
            f"(RESCALER_HOLD_QUEUE_STEP_BYTES, RESCALER_HOLD_QUEUE_PU_BYTES). The stream waits "
            f"at the barrier until their exports are verified; its records wait in the source, "
            f"none is dropped.",
            idle,
        )
    if counts.exporting:
        now_s = time.time()
        since = now_s if counts.exporting_since is None else counts.exporting_since
        return Waiting(
            WaitingFor.EXPORT,
            f"exporting the state of {counts.exporting_vnodes} vnodes "
            f"({counts.exporting} steps) for {max(now_s - since, 0):.0f} s; their records "
            f"wait in hold queues.",
            idle,
        )
    if not counts.moving and counts.known < counts.total and not progress.get("cancel_requested"):
        return Waiting(
            WaitingFor.PACING,
            f"{counts.total - counts.known} steps not issued yet: the granularity paces them "
            f"(steps in flight, bytes per second).",
            idle,
        )
    return Waiting(
        WaitingFor.BARRIER,
        "waiting for a barrier: steps move one phase per epoch boundary." + idle_note,
        idle,
    )
