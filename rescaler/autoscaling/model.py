"""The autoscaler's vocabulary (issue 47): its policy, the signals it decides on, and its
decisions. Pure Python, no Django, no I/O.

A ``Policy`` says how the autoscaler may size a pipeline's fragments (``policy_problems`` what is
wrong with one); ``PipelineSignals`` is what it decides on, a window of per-fragment signals
measured epoch by epoch (``rescaler.autoscaling.signals`` reads them); a ``Decision`` is its
answer, one ``FragmentDecision`` per stateful fragment, each with the ``FragmentEstimate`` it
rests on. How a decision is reached: ``rescaler.autoscaling.sizing``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

# The policy's upper bounds: a fragment has at most 2^16 vnodes, so no more PUs than that; a
# window or catch-up time of a day and a cooldown of a week are longer than any sensible one.
MAX_PARALLEL_UNITS = 65_536
MAX_WINDOW_S = 86_400.0
MAX_COOLDOWN_S = 7 * 86_400.0


class Mode(enum.StrEnum):
    OFF = "off"  # nothing is computed
    RECOMMEND = "recommend"  # decisions are proposed (a binding dry run), started on "apply"
    AUTO = "auto"  # decisions are started within the guard rails (rescaler.autoscaling.evaluation)


class DecisionKind(enum.StrEnum):
    SCALE = "scale"  # a fragment needs another number of PUs
    REBALANCE = "rebalance"  # the size is right; the load is not spread
    NO_CHANGE = "no_change"


# Names of the signals, as the decision's ``missing_signals`` says them.
SIGNAL_BUSY = "busy_s"  # seconds a PU's task was busy in the epoch: the true processing rate
SIGNAL_BACKLOG = "backlog"  # records the source holds beyond the epoch's end


@dataclass(frozen=True)
class Policy:
    """A pipeline's autoscaling policy (every setting: docs/autoscaling.md)."""

    mode: Mode = Mode.OFF
    target_utilisation: float = 0.7  # busy share of its time a PU should run at, (0, 1]
    min_parallel_units: int = 1  # per fragment
    max_parallel_units: int = 64  # per fragment
    max_step: int = 8  # at most this many PUs added or removed per fragment by one decision
    stabilisation_s: float = 120.0  # the window every epoch of which must agree
    cooldown_s: float = 300.0  # after an operation ends, nothing is decided for this long
    catch_up_s: float = 300.0  # the backlog should be processed within this
    # UTC hours (0-23) at which no scale-in is proposed (a nightly batch, a sale)
    scale_in_blackout_hours: tuple[int, ...] = ()


def policy_problems(policy: Policy) -> dict[str, str]:
    """What is wrong with a policy, by setting (empty: nothing)."""
    problems: dict[str, str] = {}
    if not (0.0 < policy.target_utilisation <= 1.0):
        problems["target_utilisation"] = (
            f"must be in (0, 1], not {policy.target_utilisation}: the busy share of a PU's time"
        )
    if policy.min_parallel_units < 1:
        problems["min_parallel_units"] = "must be at least 1: a fragment keeps one PU"
    if not 1 <= policy.max_parallel_units <= MAX_PARALLEL_UNITS:
        problems["max_parallel_units"] = f"must be 1 to {MAX_PARALLEL_UNITS:,}"
    elif policy.min_parallel_units > policy.max_parallel_units:
        problems["min_parallel_units"] = (
            f"{policy.min_parallel_units} is above max_parallel_units {policy.max_parallel_units}"
        )
    if not 1 <= policy.max_step <= MAX_PARALLEL_UNITS:
        problems["max_step"] = f"must be 1 to {MAX_PARALLEL_UNITS:,} PUs"
    if not 0 < policy.stabilisation_s <= MAX_WINDOW_S:
        problems["stabilisation_s"] = f"must be more than 0 and at most {MAX_WINDOW_S:,.0f} s"
    if not 0 <= policy.cooldown_s <= MAX_COOLDOWN_S:
        problems["cooldown_s"] = f"must be 0 to {MAX_COOLDOWN_S:,.0f} s"
    if not 0 < policy.catch_up_s <= MAX_WINDOW_S:
        problems["catch_up_s"] = f"must be more than 0 and at most {MAX_WINDOW_S:,.0f} s"
    bad = [h for h in policy.scale_in_blackout_hours if not 0 <= h <= 23]
    if bad:
        problems["scale_in_blackout_hours"] = f"hours are 0 to 23 (UTC), not {bad}"
    elif len(set(policy.scale_in_blackout_hours)) != len(policy.scale_in_blackout_hours):
        problems["scale_in_blackout_hours"] = "an hour is listed twice"
    return problems


@dataclass(frozen=True)
class EpochSignal:
    """One committed epoch of one fragment, as measured."""

    epoch: int
    at: float  # when it committed, unix seconds
    interval_s: float  # since the epoch before it committed: the wall time it stands for
    parallel_units: int  # the PUs that ran the fragment in it
    records: int  # records the fragment's PUs processed
    duration_s: float  # the epoch's latency (its whole job)
    busiest_pu_records: int  # records of its busiest PU: the skew of the epoch
    busy_s: float | None = None  # the PUs' busy seconds, summed; None: not reported
    backlog: int | None = None  # records the source holds past the epoch; None: not reported


@dataclass(frozen=True)
class FragmentSignals:
    """A stateful fragment's signals over recent epochs, oldest first, and its placement."""

    fragment: str
    parallel_units: int  # PUs running it now
    epochs: tuple[EpochSignal, ...]
    # vnode -> records per epoch (the stream's smoothed measure) and vnode -> PU now
    vnode_records: Mapping[int, float] = field(default_factory=dict)
    mapping: tuple[int, ...] = ()


@dataclass(frozen=True)
class PipelineSignals:
    """What the model decides on: the pipeline's fragments and the guards."""

    pipeline: str
    now: float  # unix seconds
    fragments: Mapping[str, FragmentSignals]
    operation_in_progress: str | None = None  # its operation_id
    draining_workers: tuple[str, ...] = ()
    last_operation_ended_at: float | None = None  # unix seconds: the cooldown's start
    # signals the runner does not report at all (the selector knows; each says what is missing)
    missing_signals: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class FragmentEstimate:
    """The window's figures a decision rests on (None: not measured)."""

    window_epochs: int
    window_s: float
    input_rate: float  # records per second arriving at the fragment
    true_rate_per_pu: float | None  # records per busy second of one PU
    busy_fraction: float | None  # of the PUs' time, over the window
    backlog: int | None  # at the window's last epoch
    epoch_latency_s: float  # mean over the window
    skew: float  # busiest PU over the mean PU, the window's lowest
    # records per second to keep up with: input_rate, plus backlog / catch_up_s when the PUs
    # it has would not drain the backlog within the catch-up time (``sizing.demand``)
    demand: float


@dataclass(frozen=True)
class FragmentDecision:
    fragment: str
    kind: DecisionKind
    parallel_units_now: int
    parallel_units_after: int
    reasons: tuple[str, ...]
    # DS2's figure before the policy's bounds (None: it could not be computed)
    parallel_units_needed: int | None = None
    estimate: FragmentEstimate | None = None
    predicted_utilisation: float | None = None  # at parallel_units_after, of the PUs' time
    # a rebalance: records per epoch per PU now, and as a weighted placement would spread them
    load_per_pu_now: Mapping[int, float] = field(default_factory=dict)
    predicted_skew: float | None = None


@dataclass(frozen=True)
class Decision:
    pipeline: str
    kind: DecisionKind
    reasons: tuple[str, ...]
    fragments: Mapping[str, FragmentDecision] = field(default_factory=dict)
    missing_signals: Mapping[str, str] = field(default_factory=dict)

    @property
    def parallel_units(self) -> dict[str, int]:
        """The PUs each fragment a scale decision changes should have."""
        return {
            name: f.parallel_units_after
            for name, f in self.fragments.items()
            if f.kind == DecisionKind.SCALE
        }
