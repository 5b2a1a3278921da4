"""The step phases as the console shows them, decided once on the server: each phase's symbol
and words (the legend), its index in the vnode grid's data, and how long a step has been in it.
A vnode no step moves shows ``OWNED``, the grid's first phase. The steps table
(``dashboard.tables.StepTable``), the operation page and its live deltas all read these."""

from __future__ import annotations

import time

from dashboard.format import duration
from rescaler.operations.models import RescaleStep
from workers.rescale.protocol import StepPhase

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
# phases whose time in phase means nothing to an operator (not started, or over)
TIMELESS = frozenset({StepPhase.PLANNED, StepPhase.DONE, StepPhase.CANCELLED})


def in_phase(step: RescaleStep, *, now: float | None = None) -> str:
    """How long the step has been in its phase ("–" when that means nothing)."""
    since = (step.timings or {}).get(step.phase)
    if since is None or step.phase in TIMELESS:
        return "–"
    return duration((time.time() if now is None else now) - float(since))
