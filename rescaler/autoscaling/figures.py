"""The autoscaler's signals as ``/metrics`` and the console's charts show them: read by
``rescaler.autoscaling.signals`` from the runner's stored epoch reports and computed by the
decision model's own functions (``sizing.fragment_window``, ``sizing.window_estimate``), so a
figure shown is the figure a decision rests on, never another computation of it.

* ``signal_figures``: per pipeline and stateful fragment, the figures over the decision's
  window (the epochs of the last ``stabilisation_s`` at the fragment's current PUs, after the
  last operation ended), ``None`` while that window has no epoch.
* ``signal_series``: per stateful fragment, each recent epoch's own figures (input rate,
  capacity, busy fraction), whatever its size: a rescale shows as the capacity's step.

A figure the runner did not report (busy seconds of an older runner) is ``None``: unknown,
never 0.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from rescaler.autoscaling.model import FragmentEstimate, PipelineSignals, Policy
from rescaler.autoscaling.selectors import autoscaling_policy_get
from rescaler.autoscaling.signals import pipeline_signals, read_window_s
from rescaler.autoscaling.sizing import fragment_window, window_estimate
from rescaler.cluster.models import Pipeline

# the most epochs a chart draws (static/dashboard/charts.js keeps as many)
SERIES_EPOCHS = 300


@dataclass(frozen=True)
class FragmentFigures:
    """A stateful fragment's signals over the decision's window."""

    pipeline: str
    fragment: str
    parallel_units: int  # running it now
    estimate: FragmentEstimate | None  # None: no epoch in the window


@dataclass(frozen=True)
class EpochFigures:
    """One epoch of one fragment, as the decision model reads it."""

    epoch: int
    at: float  # its commit, unix seconds
    parallel_units: int
    input_rate: float  # records per second of the epoch's interval
    true_rate_per_pu: float | None  # records per busy second of one PU; None: not reported
    capacity: float | None  # true_rate_per_pu × parallel_units: what its PUs could process
    busy_fraction: float | None  # of its PUs' time; None: not reported
    skew: float  # its busiest PU's records over the mean PU's


@dataclass(frozen=True)
class FragmentSeries:
    fragment: str
    window_start: float  # unix seconds: the decision's window starts here
    target_utilisation: float  # the policy's
    epochs: tuple[EpochFigures, ...]  # oldest first

    def columns(self) -> dict[str, Any]:
        """The series as a chart's columns (``null`` where not reported)."""
        return {
            "fragment": self.fragment,
            "window_start": self.window_start,
            "target_utilisation": self.target_utilisation,
            "at": [e.at for e in self.epochs],
            "input_rate": [e.input_rate for e in self.epochs],
            "capacity": [e.capacity for e in self.epochs],
            "capacity_at_target": [
                None if e.capacity is None else e.capacity * self.target_utilisation
                for e in self.epochs
            ],
            "busy_fraction": [e.busy_fraction for e in self.epochs],
        }

    def recent(self, count: int) -> list[EpochFigures]:
        """The last ``count`` epochs, newest first: what a page prints of the series."""
        return list(self.epochs[::-1][:count])


def _signals(pipeline: Pipeline, now: dt.datetime) -> tuple[Policy, PipelineSignals]:
    """The pipeline's policy (the default one while none is set: the signals are measured in
    every mode) and its signals, read as a decision reads them."""
    policy = autoscaling_policy_get(pipeline=pipeline)
    signals = pipeline_signals(
        pipeline=pipeline, window_s=read_window_s(policy.stabilisation_s), now=now
    )
    return policy, signals


def signal_figures(*, now: dt.datetime | None = None) -> list[FragmentFigures]:
    """Every pipeline's stateful fragments with their figures over the decision's window."""
    now = now or timezone.now()
    found = []
    for pipeline in Pipeline.objects.order_by("name"):
        policy, signals = _signals(pipeline, now)
        for fragment in signals.fragments.values():
            _, window = fragment_window(fragment, signals=signals, policy=policy)
            found.append(
                FragmentFigures(
                    pipeline=pipeline.name,
                    fragment=fragment.fragment,
                    parallel_units=fragment.parallel_units,
                    estimate=window_estimate(window),
                )
            )
    return found


def signal_series(
    *, pipeline: Pipeline, now: dt.datetime | None = None, limit: int = SERIES_EPOCHS
) -> list[FragmentSeries]:
    """The pipeline's stateful fragments, each with its last ``limit`` epochs' figures of the
    read window (twice the stabilisation window), oldest first."""
    now = now or timezone.now()
    policy, signals = _signals(pipeline, now)
    found = []
    for fragment in signals.fragments.values():
        epochs = []
        for epoch in fragment.epochs[-limit:] if limit > 0 else ():
            figures = window_estimate([epoch])
            assert figures is not None  # one epoch
            rate = figures.true_rate_per_pu
            epochs.append(
                EpochFigures(
                    epoch=epoch.epoch,
                    at=epoch.at,
                    parallel_units=epoch.parallel_units,
                    input_rate=figures.input_rate,
                    true_rate_per_pu=rate,
                    capacity=None if rate is None else rate * epoch.parallel_units,
                    busy_fraction=figures.busy_fraction,
                    skew=figures.skew,
                )
            )
        found.append(
            FragmentSeries(
                fragment=fragment.fragment,
                window_start=max(
                    signals.now - policy.stabilisation_s,
                    signals.last_operation_ended_at or float("-inf"),
                ),
                target_utilisation=policy.target_utilisation,
                epochs=tuple(epochs),
            )
        )
    return found
