"""The autoscaler's decision model (issue 47): pure Python, no Django, no I/O.

From a window of per-fragment signals, measured epoch by epoch, and the pipeline's policy, it
decides in one step how many PUs each stateful fragment needs (DS2's model): the PUs it takes
to process the fragment's input rate plus its source backlog within the catch-up time, at the
target utilisation, from the *true* processing rate (records per busy second of one PU)::

    needed = ceil((input_rate + backlog / catch_up_s) / (true_rate_per_pu * target_utilisation))

clamped to the policy's minimum, maximum and step. When the size is right but one PU does
most of the work, it proposes a weighted rebalance instead. Otherwise: no change, and why.

Stability (no flapping under noise): the window's epochs all vote. A fragment scales out only
if even its quietest epoch of the window needs more PUs than it has, and in only if even its
busiest epoch fits in fewer, with room to spare (``SCALE_IN_BELOW``); a spike shorter than the
window never moves it. What the model cannot see it says: a signal the runner did not report
(``None``) is left out of the formula and named in the decision's reasons, never guessed.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import heapq
import math
from collections.abc import Sequence

from rescaler.autoscaling.model import (
    SIGNAL_BACKLOG,
    SIGNAL_BUSY,
    Decision,
    DecisionKind,
    EpochSignal,
    FragmentDecision,
    FragmentEstimate,
    FragmentSignals,
    Mode,
    PipelineSignals,
    Policy,
)

# Scale in only while the busiest epoch of the window used less than this share of the target
# utilisation at the current size (0.42 of a PU's time at a target of 0.7, about Flink's lower
# utilisation boundary): the dead band that keeps the surplus a backlog's catch-up asked for,
# and noise, from shrinking the fragment again by a PU right after it grew.
SCALE_IN_BELOW = 0.6
# A fragment whose busiest PU processes this many times the mean PU's records in every epoch
# of the window is skewed; a rebalance is proposed when the measured per-vnode load can be
# spread at least REBALANCE_GAIN better (predicted skew at most this share of the current).
SKEW_REBALANCE_AT = 1.5
REBALANCE_GAIN = 0.8
# Fewer epochs than this in the window: too little to decide on.
MIN_WINDOW_EPOCHS = 3


def decide(*, signals: PipelineSignals, policy: Policy) -> Decision:
    """The decision on these signals under this policy, with its reasons."""

    def no_change(*reasons: str) -> Decision:
        return Decision(
            signals.pipeline,
            DecisionKind.NO_CHANGE,
            reasons,
            missing_signals=dict(signals.missing_signals),
        )

    if policy.mode == Mode.OFF:
        return no_change("autoscaling is off for this pipeline (policy mode off)")
    if signals.operation_in_progress is not None:
        return no_change(
            f"operation {signals.operation_in_progress} is in progress: nothing is decided "
            f"until it ends"
        )
    if signals.draining_workers:
        return no_change(
            f"worker(s) {', '.join(signals.draining_workers)} draining: nothing is decided "
            f"until the drain ends"
        )
    ended = signals.last_operation_ended_at
    if ended is not None and signals.now - ended < policy.cooldown_s:
        left = policy.cooldown_s - (signals.now - ended)
        return no_change(
            f"cooldown: the last operation ended {signals.now - ended:.0f} s ago, "
            f"{left:.0f} s of the {policy.cooldown_s:.0f} s cooldown left"
        )
    fragments = {
        name: _fragment_decision(f, signals=signals, policy=policy)
        for name, f in signals.fragments.items()
    }
    kinds = {f.kind for f in fragments.values()}
    kind = (
        DecisionKind.SCALE
        if DecisionKind.SCALE in kinds
        else DecisionKind.REBALANCE
        if DecisionKind.REBALANCE in kinds
        else DecisionKind.NO_CHANGE
    )
    reasons = tuple(f"{name}: {r}" for name, f in fragments.items() for r in f.reasons[:1])
    if not fragments:
        reasons = ("the pipeline has no stateful fragment",)
    return Decision(
        signals.pipeline, kind, reasons, fragments, missing_signals=dict(signals.missing_signals)
    )


def _fragment_decision(
    fragment: FragmentSignals, *, signals: PipelineSignals, policy: Policy
) -> FragmentDecision:
    now_units = fragment.parallel_units

    def unchanged(
        *reasons: str,
        parallel_units_needed: int | None = None,
        estimate: FragmentEstimate | None = None,
        predicted_utilisation: float | None = None,
    ) -> FragmentDecision:
        return FragmentDecision(
            fragment.fragment,
            DecisionKind.NO_CHANGE,
            now_units,
            now_units,
            reasons,
            parallel_units_needed=parallel_units_needed,
            estimate=estimate,
            predicted_utilisation=predicted_utilisation,
        )

    epochs, window = fragment_window(fragment, signals=signals, policy=policy)
    covered = signals.now - min((e.at - e.interval_s for e in epochs), default=signals.now)
    if covered < policy.stabilisation_s or len(window) < MIN_WINDOW_EPOCHS:
        return unchanged(
            f"not enough history at {now_units} PU(s): {covered:.0f} s and {len(window)} "
            f"epoch(s) of the {policy.stabilisation_s:.0f} s window (at least "
            f"{MIN_WINDOW_EPOCHS} epochs)"
        )
    estimate, per_epoch = _estimate(window)
    notes: tuple[str, ...] = ()
    if estimate.backlog is None:
        why = signals.missing_signals.get(SIGNAL_BACKLOG, "the source does not report it")
        notes = (
            f"{SIGNAL_BACKLOG} not reported ({why}): no backlog term, and the input rate is "
            f"what the fragment processed, which under-reads a fragment that falls behind",
        )
    if estimate.true_rate_per_pu is None:
        why = signals.missing_signals.get(SIGNAL_BUSY, "the PUs' busy seconds are not reported")
        return unchanged(
            f"the true processing rate is unknown: {SIGNAL_BUSY} not reported ({why}); "
            f"the PUs the fragment needs cannot be computed without it",
            *notes,
            estimate=estimate,
        )
    true_rate = estimate.true_rate_per_pu
    per_epoch_demand = [
        demand(
            rate,
            backlog,
            units=now_units,
            true_rate_per_pu=true_rate,
            catch_up_s=policy.catch_up_s,
        )
        for rate, backlog in per_epoch
    ]
    estimate = dataclasses.replace(
        estimate,
        demand=demand(
            estimate.input_rate,
            estimate.backlog,
            units=now_units,
            true_rate_per_pu=true_rate,
            catch_up_s=policy.catch_up_s,
        ),
    )
    capacity = true_rate * policy.target_utilisation  # records/s per PU at the target
    needs = [max(1, math.ceil(d / capacity)) for d in per_epoch_demand]
    needed = max(1, math.ceil(estimate.demand / capacity))
    utilisation_now = estimate.demand / (now_units * true_rate)
    busiest_utilisation = max(per_epoch_demand) / (now_units * true_rate)

    target: int | None = None
    why = ""
    if min(needs) > now_units:
        target = needed
        why = (
            f"needs {needed} PU(s) for {estimate.demand:,.0f} records/s at "
            f"{estimate.true_rate_per_pu:,.0f} records per busy second per PU and a target "
            f"utilisation of {policy.target_utilisation:.0%}; every epoch of the window needed "
            f"more than {now_units}"
        )
    elif (
        max(needs) < now_units and busiest_utilisation < SCALE_IN_BELOW * policy.target_utilisation
    ):
        target = max(needs)  # the busiest epoch of the window still fits
        why = (
            f"{max(needs)} PU(s) would carry the busiest epoch of the window "
            f"({max(per_epoch_demand):,.0f} records/s) at a utilisation of at most "
            f"{policy.target_utilisation:.0%}; it runs at {utilisation_now:.0%} on {now_units}"
        )
    if target is not None:
        bounded = min(max(target, policy.min_parallel_units), policy.max_parallel_units)
        step = max(-policy.max_step, min(policy.max_step, bounded - now_units))
        after = now_units + step
        limits = []
        if bounded != target:
            limits.append(
                f"bounded by the policy's {policy.min_parallel_units}..."
                f"{policy.max_parallel_units} PUs"
            )
        if after != bounded:
            limits.append(f"limited to a step of {policy.max_step} PU(s)")
        if after < now_units:
            hour = dt.datetime.fromtimestamp(signals.now, tz=dt.UTC).hour
            if hour in policy.scale_in_blackout_hours:
                return unchanged(
                    f"{why}; but no scale-in at {hour:02d}:00 UTC (the policy's blackout hours)",
                    *notes,
                    parallel_units_needed=needed,
                    estimate=estimate,
                    predicted_utilisation=utilisation_now,
                )
        if after != now_units:
            return FragmentDecision(
                fragment.fragment,
                DecisionKind.SCALE,
                now_units,
                after,
                (f"{now_units} → {after} PUs: {why}" + (f" ({'; '.join(limits)})" if limits else ""),
                 *notes),
                parallel_units_needed=needed,
                estimate=estimate,
                predicted_utilisation=estimate.demand / (after * true_rate),
            )  # fmt: skip
        return unchanged(
            f"{why}, but the policy keeps it at {now_units} ({'; '.join(limits)})",
            *notes,
            parallel_units_needed=needed,
            estimate=estimate,
            predicted_utilisation=utilisation_now,
        )
    rebalance = _rebalance(fragment, estimate)
    if rebalance is not None:
        load_now, predicted = rebalance
        return FragmentDecision(
            fragment.fragment,
            DecisionKind.REBALANCE,
            now_units,
            now_units,
            (
                f"skewed: its busiest PU processed at least {estimate.skew:.2f}× the mean PU's "
                f"records in every epoch of the window; a placement weighted by the measured "
                f"per-vnode load would bring that to {predicted:.2f}×",
                *notes,
            ),
            parallel_units_needed=needed,
            estimate=estimate,
            predicted_utilisation=utilisation_now,
            load_per_pu_now=load_now,
            predicted_skew=predicted,
        )
    return unchanged(
        f"{now_units} PU(s) fit: {estimate.demand:,.0f} records/s at a utilisation of "
        f"{utilisation_now:.0%} (target {policy.target_utilisation:.0%}); the window's epochs "
        f"needed {min(needs)} to {max(needs)}",
        *notes,
        parallel_units_needed=needed,
        estimate=estimate,
        predicted_utilisation=utilisation_now,
    )


def fragment_window(
    fragment: FragmentSignals, *, signals: PipelineSignals, policy: Policy
) -> tuple[list[EpochSignal], list[EpochSignal]]:
    """The fragment's epochs that describe it as it is (at today's number of PUs, after the last
    operation ended), and of those the stabilisation window's: the epochs a decision counts."""
    since = signals.last_operation_ended_at or float("-inf")
    epochs = [
        e for e in fragment.epochs if e.parallel_units == fragment.parallel_units and e.at > since
    ]
    window_start = signals.now - policy.stabilisation_s
    return epochs, [e for e in epochs if e.at > window_start]


def window_estimate(window: Sequence[EpochSignal]) -> FragmentEstimate | None:
    """The figures of these epochs as a decision computes them (``demand`` 0: it needs the
    policy), ``None`` for no epoch; one epoch's own figures are ``window_estimate([epoch])``.
    What ``/metrics`` and the console's charts show of the signals (``rescaler.autoscaling.
    selectors``)."""
    return _estimate(window)[0] if window else None


def _estimate(
    window: Sequence[EpochSignal],
) -> tuple[FragmentEstimate, list[tuple[float, int | None]]]:
    """The window's aggregate figures (``demand`` still 0: it needs the policy and the true
    rate), and each epoch's (input rate, backlog)."""
    span = sum(e.interval_s for e in window)
    records = sum(e.records for e in window)
    busy = [e.busy_s for e in window]
    known_busy = None if any(b is None for b in busy) else sum(b or 0.0 for b in busy)
    true_rate = records / known_busy if known_busy else None
    pu_seconds = sum(e.interval_s * e.parallel_units for e in window)
    has_backlog = all(e.backlog is not None for e in window)
    per_epoch: list[tuple[float, int | None]] = []
    previous: int | None = None
    for e in window:
        arrived = e.records
        if has_backlog and previous is not None:
            # what arrived = what was processed + what the backlog grew by
            arrived = max(0, e.records + (e.backlog or 0) - previous)
        previous = e.backlog
        rate = arrived / e.interval_s if e.interval_s > 0 else 0.0
        per_epoch.append((rate, e.backlog if has_backlog else None))
    if has_backlog and len(window) > 1:
        # over the epochs after the first: processed + the backlog's growth, per second
        arrived_total = records - window[0].records
        arrived_total += (window[-1].backlog or 0) - (window[0].backlog or 0)
        later_s = span - window[0].interval_s
        input_rate = max(0.0, arrived_total / later_s) if later_s > 0 else 0.0
    else:
        input_rate = records / span if span > 0 else 0.0
    skews = [
        e.busiest_pu_records / (e.records / e.parallel_units) if e.records else 1.0 for e in window
    ]
    estimate = FragmentEstimate(
        window_epochs=len(window),
        window_s=span,
        input_rate=input_rate,
        true_rate_per_pu=true_rate,
        busy_fraction=known_busy / pu_seconds if known_busy is not None and pu_seconds else None,
        backlog=window[-1].backlog if has_backlog else None,
        epoch_latency_s=sum(e.duration_s for e in window) / len(window),
        skew=min(skews),
        demand=0.0,
    )
    return estimate, per_epoch


def demand(
    rate: float, backlog: int | None, *, units: int, true_rate_per_pu: float, catch_up_s: float
) -> float:
    """Records per second the fragment must process: its input rate, plus its backlog over the
    catch-up time unless ``units`` PUs at full speed drain it within the catch-up time anyway
    (a burst's backlog the fragment works off by itself is no reason to scale)."""
    if not backlog:
        return rate
    headroom = units * true_rate_per_pu - rate
    if headroom > 0 and backlog / headroom <= catch_up_s:
        return rate
    return rate + backlog / catch_up_s


def _rebalance(
    fragment: FragmentSignals, estimate: FragmentEstimate
) -> tuple[dict[int, float], float] | None:
    """(load per PU now, the skew a weighted placement would leave), when the window was skewed
    and the per-vnode load can be spread sufficiently better; else None."""
    if estimate.skew < SKEW_REBALANCE_AT or not fragment.mapping or not fragment.vnode_records:
        return None
    units = sorted(set(fragment.mapping))
    load_now = dict.fromkeys(units, 0.0)
    for vnode, pu in enumerate(fragment.mapping):
        load_now[pu] += fragment.vnode_records.get(vnode, 0.0)
    total = sum(load_now.values())
    if total <= 0:
        return None
    mean = total / len(units)
    # longest processing time first: each vnode, heaviest first, to the least loaded PU
    heap = [(0.0, pu) for pu in units]
    for load in sorted(fragment.vnode_records.values(), reverse=True):
        least, pu = heapq.heappop(heap)
        heapq.heappush(heap, (least + load, pu))
    predicted = max(load for load, _ in heap) / mean
    current = max(load_now.values()) / mean
    if predicted > REBALANCE_GAIN * current:
        return None
    return load_now, predicted
