"""The model's signals read from the runner's stored reports (``pipeline_signals``): what is
measured, what is missing and said so, the guards, and a decision on them."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from django.utils import timezone

from rescaler.autoscaling.model import (
    SIGNAL_BACKLOG,
    SIGNAL_BUSY,
    DecisionKind,
    Mode,
    Policy,
)
from rescaler.autoscaling.signals import pipeline_signals
from rescaler.autoscaling.sizing import decide
from rescaler.cluster.models import Pipeline, Worker
from rescaler.operations.models import RescaleOperation
from tests.unit.api.fixtures import FRAGMENT, register_cluster
from tests.unit.rescaler.autoscaling.fixtures import report_epochs

pytestmark = pytest.mark.django_db

POLICY = Policy(mode=Mode.RECOMMEND, stabilisation_s=60, cooldown_s=60, catch_up_s=120)


def _now(at: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(at, tz=dt.UTC)


def test_the_signals_are_what_the_runner_reported() -> None:
    pipeline = register_cluster(epochs=0)
    end = report_epochs(count=40, records=lambda e, pu: 1000 if pu == 0 else 500)
    signals = pipeline_signals(pipeline=pipeline, window_s=60, now=_now(end))
    assert signals.pipeline == pipeline.name
    assert list(signals.fragments) == [FRAGMENT]  # the stateful ones only
    frag = signals.fragments[FRAGMENT]
    assert frag.parallel_units == 2
    assert frag.mapping == tuple(8 * [0] + 8 * [1])
    assert frag.vnode_records == {v: float(v + 1) for v in range(16)}
    # the 30 epochs of the window, and none before the one whose commit starts the first
    assert len(frag.epochs) == 30
    last = frag.epochs[-1]
    assert last.epoch == 39
    assert last.interval_s == pytest.approx(2.0)
    assert last.records == 1500 and last.busiest_pu_records == 1000
    assert last.parallel_units == 2 and last.duration_s == 0.25
    # not reported by the runner: unknown, and the model is told what is missing
    assert last.busy_s is None and last.backlog is None
    assert set(signals.missing_signals) == {SIGNAL_BUSY, SIGNAL_BACKLOG}
    assert "PuLoad.busy_s" in signals.missing_signals[SIGNAL_BUSY]
    assert "EpochReport.source_backlog" in signals.missing_signals[SIGNAL_BACKLOG]
    assert signals.operation_in_progress is None and signals.draining_workers == ()


def test_without_busy_seconds_the_decision_sizes_nothing_and_says_why() -> None:
    pipeline = register_cluster(epochs=0)
    end = report_epochs(count=60, records=lambda e, pu: 5000)
    decision = decide(
        signals=pipeline_signals(pipeline=pipeline, window_s=120, now=_now(end)), policy=POLICY
    )
    reason = decision.fragments[FRAGMENT].reasons[0]
    assert decision.kind == DecisionKind.NO_CHANGE
    assert "true processing rate is unknown" in reason and "PuLoad.busy_s" in reason


def test_busy_seconds_where_reported_size_the_fragment() -> None:
    """A runner whose PU rows carry busy_s: at 2 ms a record a PU processes 500 records per
    busy second; 300 records per PU every 2 s is 30 % busy, then 900 (90 %): 900 records/s
    on 2 PUs need ceil(900 / (500 × 0.7)) = 3."""
    pipeline = register_cluster(epochs=0)
    end = report_epochs(
        count=60,
        records=lambda e, pu: 900 if e >= 5 else 300,
        busy_s_per_record=0.002,
    )
    signals = pipeline_signals(pipeline=pipeline, window_s=120, now=_now(end))
    assert SIGNAL_BUSY not in signals.missing_signals
    assert signals.fragments[FRAGMENT].epochs[-1].busy_s == pytest.approx(3.6)
    decision = decide(signals=signals, policy=POLICY)
    scale = decision.fragments[FRAGMENT]
    assert decision.kind == DecisionKind.SCALE
    assert scale.estimate is not None
    assert scale.estimate.true_rate_per_pu == pytest.approx(500)
    assert scale.estimate.input_rate == pytest.approx(900)
    assert scale.estimate.busy_fraction == pytest.approx(0.9)
    assert scale.parallel_units_after == 3
    assert any("backlog not reported" in r for r in scale.reasons)


def test_the_source_backlog_is_read_in_the_fragments_records_and_sizes_the_catch_up() -> None:
    """The runner reports the source's backlog in source records; a source record is two of
    the fragment's (a line, two words): 60,000 lines waiting are 120,000 records. 300 records/s
    at 500 per busy second per PU leave 2 PUs 700/s of headroom, 171 s of work, past the 120 s
    catch-up: the demand is 300 + 120,000 / 120 = 1,300/s, ceil(1,300 / (500 × 0.7)) = 4 PUs."""
    pipeline = register_cluster(epochs=0)
    end = report_epochs(
        count=60,
        records=lambda e, pu: 300,
        busy_s_per_record=0.002,
        backlog=lambda e: 60_000,
        fan_out=2,
    )
    signals = pipeline_signals(pipeline=pipeline, window_s=120, now=_now(end))
    assert SIGNAL_BACKLOG not in signals.missing_signals
    assert signals.fragments[FRAGMENT].epochs[-1].backlog == 120_000
    scale = decide(signals=signals, policy=POLICY).fragments[FRAGMENT]
    assert scale.estimate is not None and scale.estimate.backlog == 120_000
    assert scale.estimate.input_rate == pytest.approx(300)
    assert scale.parallel_units_after == 4


def test_a_backlog_the_fragment_works_off_by_itself_is_no_reason_to_scale() -> None:
    """The same load with 10,000 lines waiting: 20,000 records are 29 s of the headroom, within
    the catch-up, so the size is the input rate's alone; an epoch without the figure (an older
    runner's) leaves the window's backlog unknown, not zero."""
    pipeline = register_cluster(epochs=0)
    end = report_epochs(
        count=60,
        records=lambda e, pu: 300,
        busy_s_per_record=0.002,
        backlog=lambda e: 10_000,
        fan_out=2,
    )
    signals = pipeline_signals(pipeline=pipeline, window_s=120, now=_now(end))
    scale = decide(signals=signals, policy=POLICY).fragments[FRAGMENT]
    assert scale.estimate is not None and scale.estimate.demand == pytest.approx(300)
    pipeline = register_cluster(epochs=0)
    end = report_epochs(
        count=60, records=lambda e, pu: 300, backlog=lambda e: None if e == 59 else 10
    )
    signals = pipeline_signals(pipeline=pipeline, window_s=120, now=_now(end))
    assert signals.fragments[FRAGMENT].epochs[-1].backlog is None
    assert SIGNAL_BACKLOG not in signals.missing_signals  # the earlier epochs have it


def test_the_guards_come_from_the_operations_and_the_workers() -> None:
    pipeline = register_cluster(epochs=0)
    end = report_epochs(count=5, records=lambda e, pu: 10)
    op = RescaleOperation.objects.create(
        pipeline=pipeline, strategy="live", status="running", changes={}, fragments=[FRAGMENT]
    )
    Worker.objects.filter(name="local-0").update(status="draining")
    signals = pipeline_signals(pipeline=pipeline, window_s=60, now=_now(end))
    assert signals.operation_in_progress == op.operation_id
    assert signals.draining_workers == ("local-0",)
    finished = timezone.now() - dt.timedelta(seconds=30)
    RescaleOperation.objects.filter(pk=op.pk).update(status="completed", finished_at=finished)
    signals = pipeline_signals(pipeline=pipeline, window_s=60, now=_now(end))
    assert signals.operation_in_progress is None
    assert signals.last_operation_ended_at == pytest.approx(finished.timestamp())


def test_epochs_of_another_pipeline_or_older_than_the_window_are_not_read() -> None:
    pipeline = register_cluster(epochs=0)
    report_epochs(count=10, records=lambda e, pu: 7, end_at=time.time() - 600)
    end = report_epochs(count=10, records=lambda e, pu: 9, first_epoch=100)
    Pipeline.objects.create(name="other")
    signals = pipeline_signals(pipeline=pipeline, window_s=60, now=_now(end))
    epochs = signals.fragments[FRAGMENT].epochs
    assert [e.epoch for e in epochs] == list(range(101, 110))
    assert {e.records for e in epochs} == {18}


def test_past_the_limit_the_newest_epochs_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rescaler.autoscaling.signals.MAX_EPOCHS", 5)
    pipeline = register_cluster(epochs=0)
    end = report_epochs(count=20, records=lambda e, pu: e)
    signals = pipeline_signals(pipeline=pipeline, window_s=60, now=_now(end))
    # five rows read, the first of which only starts the first interval
    assert [e.epoch for e in signals.fragments[FRAGMENT].epochs] == [16, 17, 18, 19]
