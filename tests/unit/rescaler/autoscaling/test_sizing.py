"""The decision model on recorded signal series (issue 47): steady load, a 3x step up, a step
down, a spike shorter than the window, skew at constant load, ±20 % noise, and the guards.

The series are recorded from a small fluid simulation of one fragment: records arrive at a rate,
each PU processes at most ``capacity`` records per busy second, what it cannot process waits in
the source's backlog. A controller applies each decision at once (an operation that ends as it
starts) and counts them."""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass, field

import pytest

from rescaler.autoscaling.model import (
    SIGNAL_BACKLOG,
    SIGNAL_BUSY,
    Decision,
    DecisionKind,
    EpochSignal,
    FragmentSignals,
    Mode,
    PipelineSignals,
    Policy,
)
from rescaler.autoscaling.sizing import decide

FRAGMENT = "user_activity"
POLICY = Policy(
    mode=Mode.RECOMMEND,
    target_utilisation=0.7,
    min_parallel_units=1,
    max_parallel_units=32,
    max_step=16,
    stabilisation_s=60.0,
    cooldown_s=120.0,
    catch_up_s=120.0,
)
START = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC).timestamp()  # noon UTC


@dataclass
class Fragment:
    """One fragment in a fluid simulation, epoch by epoch, and the decisions taken on it."""

    parallel_units: int
    capacity: float = 500.0  # records per busy second of one PU
    epoch_s: float = 2.0
    skew: float = 1.0  # the busiest PU's records over the mean PU's
    report_busy: bool = True
    report_backlog: bool = True
    policy: Policy = POLICY
    apply: bool = True  # a decision changes the size at once (recommend + apply)
    vnode_records: dict[int, float] = field(default_factory=dict)
    mapping: tuple[int, ...] = ()
    now: float = START
    backlog: float = 0.0
    epochs: list[EpochSignal] = field(default_factory=list)
    decisions: list[tuple[float, Decision]] = field(default_factory=list)
    ended_at: float | None = None
    backlog_at: list[tuple[float, float]] = field(default_factory=list)

    def run(self, rate: float, seconds: float, noise: float = 0.0, seed: int = 0) -> None:
        rng = random.Random(seed)
        for _ in range(round(seconds / self.epoch_s)):
            arriving = rate * self.epoch_s * (1 + rng.uniform(-noise, noise))
            available = self.backlog + arriving
            processed = min(available, self.parallel_units * self.capacity * self.epoch_s)
            self.backlog = available - processed
            self.now += self.epoch_s
            busy = processed / self.capacity
            self.epochs.append(
                EpochSignal(
                    epoch=len(self.epochs),
                    at=self.now,
                    interval_s=self.epoch_s,
                    parallel_units=self.parallel_units,
                    records=round(processed),
                    duration_s=busy / self.parallel_units + 0.05,
                    busiest_pu_records=round(processed / self.parallel_units * self.skew),
                    busy_s=busy if self.report_busy else None,
                    backlog=round(self.backlog) if self.report_backlog else None,
                )
            )
            self.backlog_at.append((self.now, self.backlog))
            decision = self.decide()
            if decision.kind == DecisionKind.NO_CHANGE:
                continue
            self.decisions.append((self.now, decision))
            if self.apply and decision.kind == DecisionKind.SCALE:
                self.parallel_units = decision.parallel_units[FRAGMENT]
                self.ended_at = self.now

    def signals(self, **guards: object) -> PipelineSignals:
        missing = {}
        if not self.report_busy:
            missing[SIGNAL_BUSY] = "the runner's PuLoad has no busy seconds"
        if not self.report_backlog:
            missing[SIGNAL_BACKLOG] = "the runner's EpochReport has no backlog"
        return PipelineSignals(
            pipeline="clickstream",
            now=self.now,
            fragments={
                FRAGMENT: FragmentSignals(
                    fragment=FRAGMENT,
                    parallel_units=self.parallel_units,
                    epochs=tuple(self.epochs[-200:]),
                    vnode_records=self.vnode_records,
                    mapping=self.mapping,
                )
            },
            last_operation_ended_at=self.ended_at,
            missing_signals=missing,
            **guards,  # type: ignore[arg-type]
        )

    def decide(self, **guards: object) -> Decision:
        return decide(signals=self.signals(**guards), policy=self.policy)

    def backlog_after(self, at: float) -> float:
        return next(b for t, b in self.backlog_at if t >= at)


def test_steady_load_decides_nothing() -> None:
    frag = Fragment(parallel_units=3)  # 1,000 records/s on 3 PUs of 500: 67 % busy
    frag.run(rate=1000, seconds=900)
    assert frag.decisions == []
    decision = frag.decide()
    assert decision.kind == DecisionKind.NO_CHANGE
    only = decision.fragments[FRAGMENT]
    assert only.parallel_units_needed == 3
    assert only.estimate is not None
    assert only.estimate.true_rate_per_pu == pytest.approx(500, rel=0.01)
    assert only.estimate.input_rate == pytest.approx(1000, rel=0.01)
    assert only.estimate.busy_fraction == pytest.approx(2 / 3, rel=0.01)
    assert "3 PU(s) fit" in only.reasons[0]


def test_a_3x_step_up_is_one_decision_that_is_big_enough_and_drains_the_backlog() -> None:
    frag = Fragment(parallel_units=3)
    frag.run(rate=1000, seconds=300)
    step_at = frag.now
    frag.run(rate=3000, seconds=1800)
    assert len(frag.decisions) == 1, [d.reasons for _, d in frag.decisions]
    at, decision = frag.decisions[0]
    scale = decision.fragments[FRAGMENT]
    assert decision.kind == DecisionKind.SCALE
    # after the window, not before: every epoch of it must have needed more
    assert step_at + POLICY.stabilisation_s <= at <= step_at + POLICY.stabilisation_s + 4
    # 3,000 records/s at 350 per PU (500 at 70 %) is 9 PUs; the backlog asks for more
    assert scale.parallel_units_after >= 9
    assert scale.parallel_units_needed == scale.parallel_units_after
    assert scale.estimate is not None and scale.estimate.backlog
    assert scale.estimate.input_rate == pytest.approx(3000, rel=0.02)
    assert scale.predicted_utilisation is not None
    assert scale.predicted_utilisation <= POLICY.target_utilisation
    # the backlog the window piled up is worked off within the catch-up time
    assert frag.backlog_after(at + POLICY.catch_up_s) == 0
    assert "3 → " in scale.reasons[0]


def test_a_step_down_scales_in_once_after_the_window() -> None:
    frag = Fragment(parallel_units=9)  # 3,000 records/s on 9 PUs: 67 % busy
    frag.run(rate=3000, seconds=300)
    step_at = frag.now
    frag.run(rate=1000, seconds=1800)
    assert len(frag.decisions) == 1, [d.reasons for _, d in frag.decisions]
    at, decision = frag.decisions[0]
    assert at >= step_at + POLICY.stabilisation_s
    assert decision.parallel_units == {FRAGMENT: 3}
    assert frag.backlog == 0


def test_a_spike_shorter_than_the_window_decides_nothing() -> None:
    frag = Fragment(parallel_units=3)
    frag.run(rate=1000, seconds=300)
    frag.run(rate=3000, seconds=POLICY.stabilisation_s / 2)
    frag.run(rate=1000, seconds=900)
    assert frag.decisions == []
    assert frag.backlog == 0  # the burst's backlog drained at 3 PUs


def test_a_backlog_the_fragment_does_not_drain_in_time_asks_for_more() -> None:
    """The backlog term of DS2's formula: a fragment that keeps up with its input rate but
    would take longer than the catch-up time to work off what piled up gets the PUs for it."""
    frag = Fragment(parallel_units=3, apply=False)
    frag.backlog = 500_000.0  # at 1,000/s on 3 PUs of 500: 1,000 s to drain, catch-up 120 s
    frag.run(rate=1000, seconds=POLICY.stabilisation_s + 4)
    decision = frag.decide()
    scale = decision.fragments[FRAGMENT]
    assert decision.kind == DecisionKind.SCALE
    assert scale.estimate is not None and scale.estimate.backlog
    expected = scale.estimate.input_rate + scale.estimate.backlog / POLICY.catch_up_s
    assert scale.estimate.demand == pytest.approx(expected)
    assert scale.parallel_units_after == min(32, -(-round(expected) // 350))


def test_skew_at_constant_load_proposes_a_rebalance() -> None:
    # 16 vnodes, 4 per PU; PU 0's vnodes are hot: it does half of the work
    mapping = tuple(v // 4 for v in range(16))
    load = {v: (300.0 if v < 4 else 100.0) for v in range(16)}  # PU 0: 1,200, others 400
    frag = Fragment(parallel_units=4, skew=2.0, vnode_records=load, mapping=mapping, apply=False)
    frag.run(rate=1000, seconds=300)  # 4 PUs at 50 %: the size is right
    assert frag.decisions  # proposed at every epoch once the window is full, until applied
    assert {d.kind for _, d in frag.decisions} == {DecisionKind.REBALANCE}
    assert frag.decisions[0][0] >= START + POLICY.stabilisation_s
    decision = frag.decide()
    rebalance = decision.fragments[FRAGMENT]
    assert decision.kind == DecisionKind.REBALANCE
    assert rebalance.parallel_units_after == 4
    assert rebalance.load_per_pu_now == {0: 1200.0, 1: 400.0, 2: 400.0, 3: 400.0}
    assert rebalance.predicted_skew is not None and rebalance.predicted_skew < 1.25
    assert "skewed" in rebalance.reasons[0]
    assert decision.parallel_units == {}  # no size change


def test_one_hot_vnode_is_no_rebalance() -> None:
    """Skew a placement cannot cure (one vnode carries most of the load) proposes nothing."""
    mapping = tuple(v // 4 for v in range(16))
    load = {v: 10.0 for v in range(16)}
    load[0] = 2000.0
    frag = Fragment(parallel_units=4, skew=3.0, vnode_records=load, mapping=mapping)
    frag.run(rate=1000, seconds=300)
    assert frag.decisions == []


@pytest.mark.parametrize(("parallel_units", "rate"), [(3, 1000), (4, 1000), (6, 1500), (9, 3000)])
def test_noise_of_20_percent_over_30_minutes_decides_nothing(
    parallel_units: int, rate: int
) -> None:
    frag = Fragment(parallel_units=parallel_units)
    frag.run(rate=rate, seconds=1800, noise=0.2, seed=parallel_units)
    assert frag.decisions == []


def test_noise_after_a_step_makes_one_decision() -> None:
    frag = Fragment(parallel_units=3)
    frag.run(rate=1000, seconds=300, noise=0.2, seed=1)
    frag.run(rate=3000, seconds=1800, noise=0.2, seed=2)
    assert len(frag.decisions) == 1
    assert frag.parallel_units >= 9


def _stepped() -> Fragment:
    """A fragment whose signals call for a scale-out (3x step, window over)."""
    frag = Fragment(parallel_units=3, apply=False)
    frag.run(rate=1000, seconds=300)
    frag.run(rate=3000, seconds=120)
    assert frag.decide().kind == DecisionKind.SCALE
    return frag


def test_nothing_is_decided_while_an_operation_runs() -> None:
    decision = _stepped().decide(operation_in_progress="3f2a9c1b7e4d")
    assert decision.kind == DecisionKind.NO_CHANGE
    assert decision.fragments == {}
    assert "operation 3f2a9c1b7e4d is in progress" in decision.reasons[0]


def test_nothing_is_decided_while_a_worker_drains() -> None:
    decision = _stepped().decide(draining_workers=("executor-2",))
    assert decision.kind == DecisionKind.NO_CHANGE
    assert "executor-2 draining" in decision.reasons[0]


def test_nothing_is_decided_within_the_cooldown() -> None:
    frag = _stepped()
    frag.ended_at = frag.now - POLICY.cooldown_s + 10
    decision = frag.decide()
    assert decision.kind == DecisionKind.NO_CHANGE
    assert "cooldown" in decision.reasons[0] and "10 s" in decision.reasons[0]
    frag.ended_at = frag.now - POLICY.cooldown_s - 1
    assert frag.decide().kind == DecisionKind.SCALE


def test_mode_off_decides_nothing() -> None:
    frag = _stepped()
    frag.policy = Policy(mode=Mode.OFF)
    decision = frag.decide()
    assert decision.kind == DecisionKind.NO_CHANGE
    assert "off" in decision.reasons[0]


def test_without_busy_seconds_nothing_is_sized_and_the_reason_says_so() -> None:
    frag = Fragment(parallel_units=3, report_busy=False, apply=False)
    frag.run(rate=1000, seconds=300)
    frag.run(rate=3000, seconds=120)
    decision = frag.decide()
    only = decision.fragments[FRAGMENT]
    assert decision.kind == DecisionKind.NO_CHANGE
    assert only.parallel_units_needed is None
    assert "true processing rate is unknown" in only.reasons[0]
    assert "busy_s not reported (the runner's PuLoad has no busy seconds)" in only.reasons[0]
    assert decision.missing_signals == {SIGNAL_BUSY: "the runner's PuLoad has no busy seconds"}


def test_without_a_backlog_the_formula_has_no_backlog_term_and_says_so() -> None:
    frag = Fragment(parallel_units=3, report_backlog=False, apply=False)
    frag.run(rate=1000, seconds=300)
    frag.run(rate=3000, seconds=120)
    decision = frag.decide()
    scale = decision.fragments[FRAGMENT]
    assert decision.kind == DecisionKind.SCALE
    assert scale.estimate is not None and scale.estimate.backlog is None
    # it sees only what 3 PUs could process (1,500/s), not the 3,000 arriving
    assert scale.estimate.input_rate == pytest.approx(1500, rel=0.01)
    assert scale.estimate.demand == scale.estimate.input_rate
    assert scale.parallel_units_after == 5  # ceil(1500 / 350): it cannot know better
    assert any("backlog not reported" in r and "under-reads" in r for r in scale.reasons)


def test_the_policy_bounds_and_step_limit_a_decision() -> None:
    frag = _stepped()
    frag.policy = Policy(**{**vars(POLICY), "max_parallel_units": 6})
    scale = frag.decide().fragments[FRAGMENT]
    assert scale.parallel_units_after == 6
    assert "bounded by the policy's 1...6 PUs" in scale.reasons[0]
    frag.policy = Policy(**{**vars(POLICY), "max_step": 2})
    scale = frag.decide().fragments[FRAGMENT]
    assert scale.parallel_units_after == 5
    assert "limited to a step of 2 PU(s)" in scale.reasons[0]


def test_no_scale_in_in_the_blackout_hours() -> None:
    frag = Fragment(parallel_units=9, apply=False)
    frag.run(rate=1000, seconds=120)
    assert frag.decide().parallel_units == {FRAGMENT: 3}
    hour = dt.datetime.fromtimestamp(frag.now, tz=dt.UTC).hour
    frag.policy = Policy(**{**vars(POLICY), "scale_in_blackout_hours": (hour,)})
    decision = frag.decide()
    assert decision.kind == DecisionKind.NO_CHANGE
    assert f"no scale-in at {hour:02d}:00 UTC" in decision.fragments[FRAGMENT].reasons[0]


def test_too_little_history_decides_nothing() -> None:
    frag = Fragment(parallel_units=3, apply=False)
    frag.run(rate=3000, seconds=POLICY.stabilisation_s / 2)
    decision = frag.decide()
    assert decision.kind == DecisionKind.NO_CHANGE
    assert "not enough history" in decision.fragments[FRAGMENT].reasons[0]
