"""The signals as /metrics and the console's charts show them (``rescaler.autoscaling.figures``):
the decision's own figures over its window, and each epoch's own, with what is not reported
unknown (None), never 0."""

from __future__ import annotations

import datetime as dt
import json
import time
from typing import Any

import pytest
from django.utils import timezone

from rescaler.autoscaling.figures import signal_figures, signal_series
from rescaler.autoscaling.recommendation import recommendation_get
from rescaler.operations.models import RescaleOperation
from tests.unit.api.fixtures import FRAGMENT, PIPELINE, make_user, register_cluster
from tests.unit.rescaler.autoscaling.fixtures import report_epochs
from tests.unit.rescaler.autoscaling.test_decisions import stepped

pytestmark = pytest.mark.django_db


def _now(at: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(at, tz=dt.UTC)


@pytest.fixture
def admin(db: None) -> Any:
    return make_user("admin", rescale=True, policy=True)


def test_the_window_figures_are_the_decisions(admin: Any) -> None:
    now = timezone.now()
    stepped(admin, end_at=now.timestamp())
    (found,) = signal_figures(now=now)
    assert (found.pipeline, found.fragment, found.parallel_units) == (PIPELINE, FRAGMENT, 2)
    decided = recommendation_get(user=admin, pipeline=PIPELINE, plan=False, now=now)
    estimate = decided.decision.fragments[FRAGMENT].estimate
    assert estimate is not None and found.estimate is not None
    # the same figures; demand alone needs the policy, and the decision adds it
    assert found.estimate == type(estimate)(**{**vars(estimate), "demand": 0.0})
    assert found.estimate.input_rate == pytest.approx(900)
    assert found.estimate.true_rate_per_pu == pytest.approx(500)


def test_each_epochs_figures_for_the_chart(admin: Any) -> None:
    """300 records per PU every 2 s, then 900: at 2 ms a record the capacity of 2 PUs is 1,000
    records/s and the busy share goes from 30 % to 90 %."""
    end = time.time()
    pipeline = stepped(admin, end_at=end)  # a window of 60 s: 120 s are read, 60 epochs of 2 s
    (series,) = signal_series(pipeline=pipeline, now=_now(end))
    assert series.fragment == FRAGMENT and series.target_utilisation == 0.7
    assert len(series.epochs) == 59  # the first row only starts the first interval
    first, last = series.epochs[0], series.epochs[-1]
    assert (first.epoch, last.epoch) == (1, 59)
    assert first.input_rate == pytest.approx(300) and last.input_rate == pytest.approx(900)
    assert last.capacity == pytest.approx(1000) and last.true_rate_per_pu == pytest.approx(500)
    assert first.busy_fraction == pytest.approx(0.3) and last.busy_fraction == pytest.approx(0.9)
    assert last.skew == 1.0 and last.parallel_units == 2
    assert series.window_start == pytest.approx(end - 60)
    columns = series.columns()
    json.dumps(columns)  # the page embeds it as JSON
    assert len(columns["at"]) == len(columns["input_rate"]) == 59
    assert columns["capacity_at_target"][-1] == pytest.approx(700)
    assert [e.epoch for e in series.recent(3)] == [59, 58, 57]


def test_unknown_busy_seconds_stay_unknown(db: None) -> None:
    pipeline = register_cluster(epochs=0)
    end = report_epochs(count=20, records=lambda e, pu: 500)
    (series,) = signal_series(pipeline=pipeline, now=_now(end))
    last = series.epochs[-1]
    assert last.input_rate == pytest.approx(500)
    assert last.true_rate_per_pu is None and last.capacity is None
    assert last.busy_fraction is None
    assert series.columns()["busy_fraction"][-1] is None  # null in the chart: a gap
    (found,) = signal_figures(now=_now(end))
    assert found.estimate is not None
    assert found.estimate.true_rate_per_pu is None and found.estimate.busy_fraction is None


def test_after_an_operation_the_window_starts_at_its_end(admin: Any) -> None:
    now = timezone.now()
    pipeline = stepped(admin, end_at=now.timestamp())
    ended = now - dt.timedelta(seconds=10)
    RescaleOperation.objects.create(
        pipeline=pipeline,
        strategy="live",
        status="completed",
        changes={},
        fragments=[FRAGMENT],
        started_at=ended,
        finished_at=ended,
    )
    (found,) = signal_figures(now=now)
    assert found.estimate is not None and found.estimate.window_epochs == 5
    (series,) = signal_series(pipeline=pipeline, now=now, limit=10)
    assert series.window_start == pytest.approx(ended.timestamp())
    assert len(series.epochs) == 10  # the chart shows the epochs before it too
