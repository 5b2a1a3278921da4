"""The operation page's fragments, worked out once on the server: each fragment's vnodes by
phase (what the grid paints), its placement before, as planned and now (a row per PU it
touches), and the steps done per source PU. Read from every step of the operation (prefetched,
``dashboard.operation_page.operation_for_page``) and from its plan's mappings alone; a live
delta counts the same figures in the database instead (``dashboard.delta_counts``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from dashboard.step_phases import PHASE_INDEX, PHASE_LEGEND, PHASE_SYMBOL, PHASES
from rescaler.operations.models import RescaleOperation, RescaleStep
from rescaler.operations.selectors import plan_fragments_read
from workers.rescale.protocol import (
    ROUTING_BY_PHASE,
    STEP_ENDED,
    Routing,
    StepPhase,
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
