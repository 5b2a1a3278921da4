"""The autoscaler's part of ``/metrics`` (``rescaler.metrics`` collects it with the rest):
its signals per fragment and each pipeline's newest decision, read from Postgres at each
scrape."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from rescaler.autoscaling.decisions import decision_newest
from rescaler.autoscaling.figures import signal_figures
from rescaler.autoscaling.model import DecisionKind


def autoscaling_metrics() -> Iterator[Metric]:
    """The autoscaler's signals per fragment over its decision window, computed by the
    decision model's own functions (``rescaler.autoscaling.figures``): a figure the runner
    does not report (busy seconds) has no sample, never a 0. And each pipeline's newest
    decision: its kind (1 for it, 0 for the others) and the PUs it proposes."""
    labels = ["pipeline", "fragment"]
    window = "over the autoscaler's window (its policy's stabilisation_s, at the current PUs)"
    units = GaugeMetricFamily(
        "rescaler_autoscaling_parallel_units",
        "PUs running the stateful fragment now (its capacity: this times the processing "
        "rate per busy second).",
        labels=labels,
    )
    window_epochs = GaugeMetricFamily(
        "rescaler_autoscaling_window_epochs",
        f"Epochs the autoscaler's signals are computed from, {window}.",
        labels=labels,
    )
    window_span = GaugeMetricFamily(
        "rescaler_autoscaling_window_seconds",
        "Wall time those epochs stand for.",
        labels=labels,
    )
    input_rate = GaugeMetricFamily(
        "rescaler_autoscaling_input_rows_per_second",
        f"Records per second arriving at the fragment, {window}.",
        labels=labels,
    )
    true_rate = GaugeMetricFamily(
        "rescaler_autoscaling_processing_rows_per_busy_second",
        "The true processing rate: records one PU processes per second of busy time "
        "(absent when the runner reports no busy seconds).",
        labels=labels,
    )
    busy = GaugeMetricFamily(
        "rescaler_autoscaling_busy_ratio",
        "Share of the fragment's PUs' time they were busy (absent when not reported).",
        labels=labels,
    )
    latency = GaugeMetricFamily(
        "rescaler_autoscaling_epoch_latency_seconds",
        "Mean epoch duration of the autoscaler's window.",
        labels=labels,
    )
    skew = GaugeMetricFamily(
        "rescaler_autoscaling_skew_ratio",
        "The busiest PU's records over the mean PU's, the lowest of the window's epochs.",
        labels=labels,
    )
    backlog = GaugeMetricFamily(
        "rescaler_autoscaling_backlog_rows",
        "Records the source holds for the fragment past its last epoch of the window, in "
        "the fragment's records (absent when the source does not report it).",
        labels=labels,
    )
    for found in signal_figures():
        names = [found.pipeline, found.fragment]
        units.add_metric(names, float(found.parallel_units))
        estimate = found.estimate
        if estimate is None:
            continue
        window_epochs.add_metric(names, float(estimate.window_epochs))
        window_span.add_metric(names, estimate.window_s)
        input_rate.add_metric(names, estimate.input_rate)
        if estimate.true_rate_per_pu is not None:
            true_rate.add_metric(names, estimate.true_rate_per_pu)
        if estimate.busy_fraction is not None:
            busy.add_metric(names, estimate.busy_fraction)
        latency.add_metric(names, estimate.epoch_latency_s)
        skew.add_metric(names, estimate.skew)
        if estimate.backlog is not None:
            backlog.add_metric(names, float(estimate.backlog))
    kind = GaugeMetricFamily(
        "rescaler_autoscaling_decision_kind",
        "1 for the kind of the pipeline's newest autoscaling decision (scale, rebalance, "
        "no_change), 0 for the others.",
        labels=["pipeline", "kind"],
    )
    decided = GaugeMetricFamily(
        "rescaler_autoscaling_decision_timestamp_seconds",
        "When the pipeline's newest autoscaling decision was made (unix seconds).",
        labels=["pipeline"],
    )
    proposed = GaugeMetricFamily(
        "rescaler_autoscaling_decision_parallel_units",
        "PUs the pipeline's newest autoscaling decision gives the fragment (after).",
        labels=labels,
    )
    for row in decision_newest():
        pipeline = row.pipeline.name
        for value in DecisionKind:
            kind.add_metric([pipeline, value], 1.0 if value == row.kind else 0.0)
        decided.add_metric([pipeline], row.decided_at.timestamp())
        for fragment in row.fragments:
            proposed.add_metric(
                [pipeline, str(fragment["fragment"])], float(fragment["parallel_units_after"])
            )
    yield from (units, window_epochs, window_span, input_rate, true_rate, busy, latency, skew)
    yield backlog
    yield from (kind, decided, proposed)
