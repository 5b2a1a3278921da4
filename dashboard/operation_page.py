"""What the operation page shows, worked out once on the server.

The page (``/operations/<id>/``), its live partials and the websocket's rendered deltas all
come from these functions, so a figure, a phase's symbol or a waiting reason is decided in one
place (the browser's script only paints the vnode grid from the phases given here). Each takes
the operation with its steps prefetched (``dashboard.api.selectors.operation_get``) and reads no
more than its steps and audit events.
"""

from __future__ import annotations

import time
from collections import Counter, OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Prefetch, Q

from dashboard.api.selectors import operation_events
from dashboard.format import count, duration, moved_figures
from rescaler.audit.models import AuditEvent
from rescaler.operations.cancel import operation_cancellable
from rescaler.operations.counts import StepCounts, StepGroup, step_counts, step_groups
from rescaler.operations.models import RescaleOperation, RescaleStep
from rescaler.operations.selectors import plan_fragments_read
from rescaler.operations.waiting import Waiting, WaitingFor, operation_waiting
from workers.rescale.protocol import (
    ROUTING_BY_PHASE,
    STEP_ENDED,
    Routing,
    StepPhase,
)

OWNED = "owned"  # a vnode no step moves
# every phase a vnode can show, in the order of the legend; a vnode's index in this tuple is
# what the grid's data carries (one small number per vnode)
PHASES: tuple[str, ...] = (OWNED, *(p.value for p in StepPhase))
PHASE_INDEX = {phase: i for i, phase in enumerate(PHASES)}
PHASE_SYMBOL = {
    OWNED: "·",
    StepPhase.PLANNED: "○",
    StepPhase.PENDING: "◔",
    StepPhase.COLLECTING: "H",
    StepPhase.EXPORTED: "E",
    StepPhase.ACQUIRING: "A",
    StepPhase.ACQUIRED: "a",
    StepPhase.DROPPING: "D",
    StepPhase.DONE: "✓",
    StepPhase.CANCELLED: "×",
}
PHASE_LEGEND = {
    OWNED: "not moving",
    StepPhase.PLANNED: "planned",
    StepPhase.PENDING: "issued",
    StepPhase.COLLECTING: "sealed, held (records in the hold queue), exporting",
    StepPhase.EXPORTED: "exported, waiting to be acquired",
    StepPhase.ACQUIRING: "acquiring, replaying the hold queue",
    StepPhase.ACQUIRED: "acquired",
    StepPhase.DROPPING: "dropping the old copy",
    StepPhase.DONE: "moved",
    StepPhase.CANCELLED: "cancelled",
}
# the figures of the head, planned against moved
MEASURES = (("keys", "Keys"), ("bytes", "Bytes"), ("vnodes", "Vnodes"))
# phases whose time in phase means nothing to an operator (not started, or over)
TIMELESS = frozenset({StepPhase.PLANNED, StepPhase.DONE, StepPhase.CANCELLED})


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


@dataclass(frozen=True)
class SourceProgress:
    """The steps out of one source PU of one fragment: how many are done."""

    fragment: str
    pu: int
    done: int
    total: int

    @property
    def key(self) -> str:
        return f"{self.fragment}-{self.pu}"


def per_source(op: RescaleOperation) -> list[SourceProgress]:
    """Steps done of steps planned per (fragment, source PU), from every step (the page reads
    them all; a live delta counts its few sources in ``DeltaCounts``)."""
    done: Counter[tuple[str, int]] = Counter()
    total: Counter[tuple[str, int]] = Counter()
    for s in op.steps.all():
        total[(s.fragment, s.source_pu)] += 1
        done[(s.fragment, s.source_pu)] += s.phase == StepPhase.DONE
    return [SourceProgress(f, pu, done[(f, pu)], total[(f, pu)]) for f, pu in sorted(total)]


@dataclass(frozen=True)
class PlacementRow:
    fragment: str
    pu: int
    before: int
    planned: int
    now: int

    @property
    def key(self) -> str:
        return f"{self.fragment}-{self.pu}"


@dataclass(frozen=True)
class FragmentView:
    """One fragment of the operation: its vnodes' phases (for the grid), the count of each
    phase, and its placement before, as planned, and now (one row per PU it touches)."""

    fragment: str
    vnodes: int
    phases: tuple[int, ...]  # PHASE_INDEX of each vnode
    phase_counts: tuple[tuple[str, str, str, int], ...]  # (phase, symbol, legend, vnodes)
    placement: tuple[PlacementRow, ...]

    @property
    def grid_data(self) -> str:
        """Every vnode's phase as one digit, in vnode order (32,768 vnodes: 32 KB)."""
        return "".join(str(p) for p in self.phases)


@dataclass(frozen=True)
class PlannedPlacement:
    """A fragment of the plan as the live delta counts it: its vnodes, and how many of them
    each PU holds before and after the operation."""

    vnodes: int
    before: Counter[int]
    after: Counter[int]


# the planned placements of the last operations whose deltas this process rendered, by
# operation id: a plan never changes once its operation exists, and at 32,768 vnodes reading
# and counting its mappings at every delta was most of a live delta's cost
_PLACEMENTS: OrderedDict[str, dict[str, PlannedPlacement]] = OrderedDict()
PLACEMENTS_KEPT = 8


@dataclass(frozen=True)
class PlannedFragment:
    """What the page reads of a fragment's plan: its mappings and PUs, before and after."""

    mapping_before: list[int]
    mapping_after: list[int]
    pus_before: list[int]
    pus_after: list[int]


_PLANNED_KEYS = ("mapping_before", "mapping_after", "parallel_units_before", "parallel_units_after")


def planned_fragments(op: RescaleOperation) -> dict[str, PlannedFragment]:
    """Each fragment's ``PlannedFragment``, read alone from the plan when the operation comes
    without it (``plan_fragments_read``: the page does not read a large plan's moves)."""
    return {
        name: PlannedFragment(*([int(v) for v in values[key] or ()] for key in _PLANNED_KEYS))
        for name, values in plan_fragments_read(op, _PLANNED_KEYS).items()
    }


def planned_placements(op: RescaleOperation) -> dict[str, PlannedPlacement]:
    """Per fragment of the plan, its ``PlannedPlacement``: read from the plan's mappings
    (``planned_fragments``) once per process."""
    kept = _PLACEMENTS.get(op.operation_id)
    if kept is not None:
        _PLACEMENTS.move_to_end(op.operation_id)
        return kept
    placements = {}
    for name, planned in planned_fragments(op).items():
        before, after = planned.mapping_before, planned.mapping_after
        placements[name] = PlannedPlacement(len(before), Counter(before), Counter(after))
    _PLACEMENTS[op.operation_id] = placements
    while len(_PLACEMENTS) > PLACEMENTS_KEPT:
        _PLACEMENTS.popitem(last=False)
    return placements


def keep_planned_placements(operation_id: str) -> None:
    """Read the operation's ``planned_placements`` now unless this process keeps them already
    (a page started watching it: its first delta need not read the plan)."""
    if operation_id in _PLACEMENTS:
        return
    op = RescaleOperation.objects.only("operation_id").filter(operation_id=operation_id)
    for found in op:
        planned_placements(found)


@dataclass(frozen=True)
class DeltaCounts:
    """What a live delta counts of every step, in one scan (``step_groups``): each fragment's
    vnodes per phase, and for the (fragment, PU) pairs the delta touches, the vnodes routed to
    their target already out of them and into them, and the steps out of them and of those
    the steps done."""

    phase_vnodes: dict[str, Counter[str]]
    moved_out: Counter[tuple[str, int]]
    moved_in: Counter[tuple[str, int]]
    steps_out: Counter[tuple[str, int]]
    done_out: Counter[tuple[str, int]]

    @classmethod
    def of_groups(cls, groups: Iterable[StepGroup], *, pus: set[tuple[str, int]]) -> DeltaCounts:
        """From ``delta_groups`` of ``pus`` (or of more PUs)."""
        counted = cls({}, Counter(), Counter(), Counter(), Counter())
        for g in groups:
            counted.phase_vnodes.setdefault(g.fragment, Counter())[g.phase] += g.vnodes
            out, into = (g.fragment, g.source_pu), (g.fragment, g.target_pu)
            if g.source_pu is not None and out in pus:
                counted.steps_out[out] += g.steps
                counted.done_out[out] += g.steps if g.phase == StepPhase.DONE else 0
                counted.moved_out[out] += g.vnodes if g.phase in _GONE else 0
            if g.target_pu is not None and into in pus and g.phase in _GONE:
                counted.moved_in[into] += g.vnodes
        return counted


# the phases whose vnodes are routed to their target already
_GONE = frozenset(p for p, r in ROUTING_BY_PHASE.items() if r == Routing.TARGET)


def delta_groups(op: RescaleOperation, *, pus: set[tuple[str, int]]) -> list[StepGroup]:
    """Every step of ``op`` counted in one scan (``step_groups``), the PUs of ``pus`` apart:
    what ``DeltaCounts.of_groups`` reads for a delta touching ``pus``."""
    return step_groups(op, pus={pu for _, pu in pus})


def fragment_deltas(
    op: RescaleOperation, *, pus: set[tuple[str, int]], counted: DeltaCounts
) -> list[FragmentView]:
    """``fragment_views`` for the live delta, from its counts in the database
    (``DeltaCounts`` of ``pus``) rather than from every step: each fragment's vnodes per
    phase, and the placement rows of ``pus`` only (no grid: the delta's ``vnode_patch``
    repaints the vnodes that changed)."""
    views = []
    for name, planned in sorted(planned_placements(op).items()):
        phases = counted.phase_vnodes.get(name, Counter())
        per_phase = Counter({str(p): n for p, n in phases.items()})
        per_phase[OWNED] = planned.vnodes - sum(phases.values())
        placed_before, placed_after = planned.before, planned.after
        placement = tuple(
            PlacementRow(
                name,
                pu,
                placed_before[pu],
                placed_after[pu],
                placed_before[pu] - counted.moved_out[(name, pu)] + counted.moved_in[(name, pu)],
            )
            for fragment, pu in sorted(pus)
            if fragment == name
        )
        phase_counts = tuple(
            (phase, PHASE_SYMBOL[phase], PHASE_LEGEND[phase], per_phase[phase])
            for phase in PHASES
            if per_phase[phase]
        )
        views.append(FragmentView(name, planned.vnodes, (), phase_counts, placement))
    return views


def source_deltas(counted: DeltaCounts, *, only: Iterable[tuple[str, int]]) -> list[SourceProgress]:
    """``per_source`` of the (fragment, source PU) pairs ``only``, from a delta's counts."""
    return [
        SourceProgress(f, pu, counted.done_out[(f, pu)], counted.steps_out[(f, pu)])
        for f, pu in sorted(set(only))
        if counted.steps_out[(f, pu)]
    ]


def _step_of_vnode(op: RescaleOperation) -> dict[str, dict[int, RescaleStep]]:
    """Each vnode's step; for a hot vnode cut into key ranges, its first range not yet ended
    (the one moving or next), or its last range once every range has ended."""
    steps: dict[str, dict[int, RescaleStep]] = {}
    for s in sorted(op.steps.all(), key=lambda s: s.step):
        for vnode in s.vnodes:
            known = steps.setdefault(s.fragment, {})
            shown = known.get(int(vnode))
            if shown is None or shown.phase in STEP_ENDED:
                known[int(vnode)] = s
    return steps


def _counts(phases: Iterable[int]) -> tuple[tuple[str, str, str, int], ...]:
    seen = Counter(phases)
    return tuple(
        (phase, PHASE_SYMBOL[phase], PHASE_LEGEND[phase], seen[i])
        for i, phase in enumerate(PHASES)
        if seen[i]
    )


def fragment_views(
    op: RescaleOperation, *, pus: set[tuple[str, int]] | None = None
) -> list[FragmentView]:
    """Each fragment of the plan; its placement rows only for ``pus`` when given."""
    by_vnode = _step_of_vnode(op)
    views = []
    for name, planned in sorted(planned_fragments(op).items()):
        before, after = planned.mapping_before, planned.mapping_after
        steps = by_vnode.get(name, {})
        phases = []
        now = []
        for vnode, owner in enumerate(before):
            step = steps.get(vnode)
            phases.append(PHASE_INDEX[step.phase] if step else 0)
            gone = step is not None and (
                ROUTING_BY_PHASE.get(StepPhase(step.phase), Routing.SOURCE) == Routing.TARGET
            )
            now.append(step.target_pu if step is not None and gone else owner)
        counted = {
            "before": Counter(before),
            "planned": Counter(after),
            "now": Counter(now),
        }
        every = sorted(
            {*planned.pus_before, *planned.pus_after}
            | set(counted["before"])
            | set(counted["planned"])
        )
        placement = tuple(
            PlacementRow(
                name,
                int(pu),
                counted["before"][pu],
                counted["planned"][pu],
                counted["now"][pu],
            )
            for pu in every
            if pus is None or (name, int(pu)) in pus
        )
        views.append(FragmentView(name, len(before), tuple(phases), _counts(phases), placement))
    return views


def step_pus(steps: Iterable[RescaleStep]) -> set[tuple[str, int]]:
    """The (fragment, PU) pairs these steps move vnodes between."""
    found = set()
    for s in steps:
        found.add((s.fragment, s.source_pu))
        found.add((s.fragment, s.target_pu))
    return found


def vnode_patch(steps: Iterable[RescaleStep]) -> dict[str, list[list[int]]]:
    """The vnodes of these steps with their phase index, by fragment: what the grid repaints."""
    patch: dict[str, list[list[int]]] = {}
    for s in steps:
        rows = patch.setdefault(s.fragment, [])
        rows.extend([int(v), PHASE_INDEX[s.phase]] for v in s.vnodes)
    return patch


def in_phase(step: RescaleStep, *, now: float | None = None) -> str:
    """How long the step has been in its phase ("–" when that means nothing)."""
    since = (step.timings or {}).get(step.phase)
    if since is None or step.phase in TIMELESS:
        return "–"
    return duration((time.time() if now is None else now) - float(since))


# the timeline shows the operation's milestones (requested, started, cancel requested, its end)
# and its last other events: a 16,384-step operation records about 82,000 (each step's phases,
# each step command), which no page can show nor any reader follow; every one is in the
# operation document (``events``) and the audit log
TIMELINE_SHOWN = 100
MILESTONE = "operation."  # the action's prefix of an operation's own events


def is_milestone(event: AuditEvent) -> bool:
    return event.action.startswith(MILESTONE)


@dataclass(frozen=True)
class Timeline:
    """The events a page's timeline shows (oldest first) and whether earlier ones exist."""

    events: list[AuditEvent]
    earlier: bool


def timeline(op: RescaleOperation) -> Timeline:
    """The operation's milestones and its last ``TIMELINE_SHOWN`` other events, oldest first."""
    events = operation_events(operation=op)
    milestones = list(events.filter(action__startswith=MILESTONE))
    last = list(events.exclude(action__startswith=MILESTONE).reverse()[: TIMELINE_SHOWN + 1])
    shown = sorted([*milestones, *last[:TIMELINE_SHOWN]], key=lambda e: (e.at, e.pk))
    return Timeline(shown, earlier=len(last) > TIMELINE_SHOWN)


def timeline_tail(events: list[AuditEvent]) -> list[AuditEvent]:
    """Of a delta's new events (oldest first), those the timeline shows: its milestones and its
    last ``TIMELINE_SHOWN`` others; the page keeps as many in view (app.css)."""
    others = [e for e in events if not is_milestone(e)][-TIMELINE_SHOWN:]
    kept = {id(e) for e in others}
    return [e for e in events if is_milestone(e) or id(e) in kept]


def page_context(op: RescaleOperation) -> dict[str, Any]:
    """Everything the page's live part renders (the page and its re-read partial)."""
    return {
        "op": op,
        "summary": operation_summary(op),
        "fragments": fragment_views(op),
        "per_source": per_source(op),
        "timeline": timeline(op),
        "timeline_shown": TIMELINE_SHOWN,
        "phases": [(p, PHASE_SYMBOL[p], PHASE_LEGEND[p]) for p in PHASES],
        "measures": MEASURES,
    }
