"""What the operation page's live delta counts (``dashboard.live.operation_page_delta``):
the fragments' phases and placement and the steps done per source PU for the PUs a progress
report touches, counted in one scan of the steps in the database rather than from every step
as the page does (``dashboard.operation_fragments``), and the vnodes the grid repaints. The
plan's placements are read once per process and kept (``planned_placements``)."""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from dashboard.operation_fragments import (
    FragmentView,
    PlacementRow,
    SourceProgress,
    planned_fragments,
)
from dashboard.step_phases import OWNED, PHASE_INDEX, PHASE_LEGEND, PHASE_SYMBOL, PHASES
from rescaler.operations.counts import StepGroup, step_groups
from rescaler.operations.models import RescaleOperation, RescaleStep
from workers.rescale.protocol import (
    ROUTING_BY_PHASE,
    Routing,
    StepPhase,
)


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
