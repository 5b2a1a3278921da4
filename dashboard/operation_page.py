"""What the operation page shows, worked out once on the server: the operation as the page
reads it (``operation_for_page``), its head (``operation_summary``: planned against moved, rate,
ETA, what it waits for) and everything its live part renders (``page_context``).

The page (``/operations/<id>/``), its live partials and the websocket's rendered deltas all
come from the functions here and in their sibling modules, so a figure, a phase's symbol or a
waiting reason is decided in one place (the browser's script only paints the vnode grid from
the phases given here): the phases' symbols and words in ``dashboard.step_phases``, the
fragments' vnodes and placement in ``dashboard.operation_fragments``, a live delta's counts in
``dashboard.delta_counts``, the timeline in ``dashboard.operation_timeline``. Each takes the
operation with its steps prefetched and reads no more than its steps and audit events.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Prefetch, Q

from dashboard import operation_timeline
from dashboard.format import count, duration, moved_figures
from dashboard.operation_fragments import fragment_views, per_source
from dashboard.plan_tables import PlacementTable, SourceProgressTable
from dashboard.step_phases import PHASE_LEGEND, PHASE_SYMBOL, PHASES
from rescaler.operations.cancel import operation_cancellable
from rescaler.operations.counts import StepCounts, step_counts
from rescaler.operations.models import RescaleOperation, RescaleStep
from rescaler.operations.placements import operation_versions
from rescaler.operations.waiting import Waiting, WaitingFor, operation_waiting
from workers.rescale.protocol import StepPhase

# the figures of the head, planned against moved
MEASURES = (("keys", "Keys"), ("bytes", "Bytes"), ("vnodes", "Vnodes"))


@dataclass(frozen=True)
class Summary:
    """The head of the page: status, why it waits, planned against moved, rate and ETA."""

    operation_id: str
    status: str
    waiting: Waiting | None
    outcome: str
    error_code: str
    moved: dict[str, dict[str, Any]]
    rate: str
    eta: str
    steps_done: int
    steps_total: int
    cancellable: bool  # ``rescaler.operations.cancel.operation_cancellable``
    progress_version: int
    key_ranges: str = ""  # hot vnodes cut by key, and their key ranges moved ("" when none)


# what the page reads of every step (not the per-vnode figures: the steps table reads its own
# page of full rows)
PAGE_STEP_FIELDS = (
    "operation",
    "step",
    "fragment",
    "source_pu",
    "target_pu",
    "vnodes",
    "key_range_index",
    "key_range_count",
    "phase",
    "keys",
    "bytes",
    "keys_moved",
    "bytes_moved",
    "timings",
)


def operation_for_page(*, operation_id: str) -> RescaleOperation | None:
    """One operation with what the page reads of its steps (16,384 steps: each a few fields,
    not the whole row); None if there is none."""
    steps = RescaleStep.objects.only(*PAGE_STEP_FIELDS).order_by("step")
    return (
        RescaleOperation.objects.select_related("pipeline", "requested_by")
        .defer("plan")  # the page reads its mappings alone (``planned_fragments``)
        .prefetch_related(Prefetch("steps", queryset=steps))
        .filter(operation_id=operation_id)
        .first()
    )


def _elapsed_s(op: RescaleOperation, now: float) -> float | None:
    if op.started_at is None:
        return None
    end = op.finished_at.timestamp() if op.finished_at else now
    return max(end - op.started_at.timestamp(), 0.0)


_ASK = object()  # operation_summary's default: find out what the operation waits for


def operation_summary(
    op: RescaleOperation,
    *,
    now: float | None = None,
    waiting: Any = _ASK,
    counts: StepCounts | None = None,
) -> Summary:
    """The page's head, as of ``now`` (unix s); ``waiting`` when the caller already knows it
    (the live delta, whose document fields carry it), else asked of ``operation_waiting``;
    ``counts``, the steps counted, when the caller has them."""
    now = time.time() if now is None else now
    counts = counts or step_counts(op)
    moved = moved_figures(op, counts=counts)
    elapsed = _elapsed_s(op, now)
    final = op.is_final
    if elapsed and op.keys_moved > 0:
        per_s = op.keys_moved / elapsed
        rate = f"{count(round(per_s))} keys/s"
        keys = moved["keys"]
        left = max(keys["planned"] - (keys["moved"] - keys["arrived"]), 0)
        eta = f"took {duration(elapsed)}" if final else f"ETA {duration(left / per_s)}"
    else:
        rate = "–"
        if elapsed is None:
            eta = "not started"
        else:
            eta = f"{'took' if final else 'running for'} {duration(elapsed)}"
    return Summary(
        operation_id=op.operation_id,
        status=op.status,
        waiting=operation_waiting(op, counts=counts) if waiting is _ASK else waiting,
        outcome=op.outcome,
        error_code=op.error_code,
        moved=moved,
        rate=rate,
        eta=eta,
        steps_done=counts.done,
        steps_total=counts.total,
        cancellable=operation_cancellable(op),
        progress_version=op.progress_version,
        key_ranges=key_ranges_text(op),
    )


def key_ranges_text(op: RescaleOperation) -> str:
    """What the operation's hot vnodes cut by key have moved: "2 hot vnodes cut by key: 5 of
    8 key ranges moved" ("" when it cut none). One query over its key-range steps."""
    cut = RescaleStep.objects.filter(operation_id=op.pk, key_range_count__isnull=False).aggregate(
        vnodes=Count("pk", filter=Q(key_range_index=0)),
        ranges=Count("pk"),
        done=Count("pk", filter=Q(phase=StepPhase.DONE)),
    )
    if not cut["ranges"]:
        return ""
    vnodes = cut["vnodes"]
    return (
        f"{count(vnodes)} hot vnode{'s' if vnodes != 1 else ''} cut by key: "
        f"{count(cut['done'])} of {count(cut['ranges'])} key ranges moved"
    )


def waiting_of(document: dict[str, Any] | None) -> Waiting | None:
    """The operation document's ``waiting`` back as the ``Waiting`` it was made from."""
    if not document:
        return None
    return Waiting(
        WaitingFor(document["waiting_for"]), document["detail"], bool(document["stream_idle"])
    )


def page_context(op: RescaleOperation) -> dict[str, Any]:
    """Everything the page's live part renders (the page and its re-read partial)."""
    fragments = fragment_views(op)
    return {
        "op": op,
        "summary": operation_summary(op),
        "fragments": fragments,
        "placement_tables": {
            f.fragment: PlacementTable(list(f.placement), fragment=f.fragment) for f in fragments
        },
        "sources_table": SourceProgressTable(per_source(op)),
        "timeline": operation_timeline.timeline(op),
        "timeline_shown": operation_timeline.TIMELINE_SHOWN,
        "phases": [(p, PHASE_SYMBOL[p], PHASE_LEGEND[p]) for p in PHASES],
        "measures": MEASURES,
        # the placements it left between, each opening the cluster page's matrix as of then
        "placement_versions": {v.fragment: v for v in operation_versions(op)},
    }
