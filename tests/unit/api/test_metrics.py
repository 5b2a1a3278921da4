"""/metrics: the Prometheus exposition, read from Postgres at scrape time."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from rescaler.autoscaling.recommendation import recommendation_get
from rescaler.cluster.models import Pipeline
from rescaler.operations import drive
from rescaler.operations.models import RescaleOperation
from rescaler.operations.requests import operation_request
from tests.unit.api.fixtures import (
    FRAGMENT,
    PIPELINE,
    make_user,
    register_cluster,
    request_body,
    token_client,
)
from tests.unit.rescaler.autoscaling.fixtures import report_epochs
from tests.unit.rescaler.autoscaling.test_decisions import stepped

pytestmark = pytest.mark.django_db


def scrape(client: Any = None) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """{sample name: {sorted labels: value}}."""
    response = (client or Client()).get("/metrics")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def test_epochs_pipeline_and_per_pu_load(operator: Any) -> None:
    register_cluster(epochs=5)
    m = scrape()
    p = (("pipeline", "wordcount"),)
    assert m["rescaler_pipeline_up"][p] == 1
    assert m["rescaler_pipeline_last_epoch"][p] == 4
    assert m["rescaler_epoch_rows"][p] == 1004
    assert m["rescaler_epoch_window_rows"][p] == sum(1000 + e for e in range(5))
    assert m["rescaler_epoch_window_seconds"][p] == pytest.approx(4, abs=0.1)
    assert m["rescaler_epoch_rows_per_second"][p] == pytest.approx(
        sum(1000 + e for e in range(1, 5)) / 4, rel=0.05
    )
    # durations 0.20 .. 0.24 s: all within the 0.25 s bucket, none within 0.1 s
    buckets = m["rescaler_epoch_duration_seconds_bucket"]
    assert buckets[(("le", "0.1"), *p)] == 0
    assert buckets[(("le", "0.25"), *p)] == 5
    assert buckets[(("le", "+Inf"), *p)] == 5
    assert m["rescaler_epoch_duration_seconds_gcount"][p] == 5
    pu0 = (("fragment", "word_count"), ("pipeline", "wordcount"), ("pu", "0"))
    assert m["rescaler_pu_vnodes"][pu0] == 8
    assert m["rescaler_pu_keys"][pu0] == 80
    assert m["rescaler_pu_bytes"][pu0] == sum(100 + v for v in range(8))
    assert m["rescaler_pu_epoch_rows"][pu0] == 500
    assert m["rescaler_fragment_mapping_version"][(("fragment", "word_count"), *p)] == 1


def test_operations_by_status_outcome_duration_and_moves(operator: Any) -> None:
    register_cluster()
    done = operation_request(user=operator, body=request_body(added_parallel_units=[2]))
    assert isinstance(done, RescaleOperation)
    start = timezone.now() - dt.timedelta(seconds=42)
    RescaleOperation.objects.filter(pk=done.pk).update(
        status="running", started_at=start, vnodes_moved=4, keys_moved=40, bytes_moved=4000
    )
    drive._finalize(done, "completed", "4 vnodes moved")
    operation_request(user=operator, body=request_body(added_parallel_units=[3]))
    m = scrape()
    assert m["rescaler_operations"][(("status", "completed"), ("strategy", "live"))] == 1
    assert m["rescaler_operations"][(("status", "pending"), ("strategy", "live"))] == 1
    outcome = (("error_code", ""), ("outcome", "completed"), ("strategy", "live"))
    assert m["rescaler_operations_finished_total"][outcome] == 1
    live_done = (("outcome", "completed"), ("strategy", "live"))
    assert m["rescaler_operation_duration_seconds_count"][live_done] == 1
    assert m["rescaler_operation_duration_seconds_sum"][live_done] == pytest.approx(42, abs=2)
    assert m["rescaler_operation_duration_seconds_bucket"][(("le", "30.0"), *live_done)] == 0
    assert m["rescaler_operation_duration_seconds_bucket"][(("le", "60.0"), *live_done)] == 1
    assert m["rescaler_keys_moved_total"][(("strategy", "live"),)] == 40
    assert m["rescaler_vnodes_moved_total"][(("strategy", "live"),)] == 4
    assert m["rescaler_bytes_moved_total"][(("strategy", "live"),)] == 4000


def test_a_dead_runner_and_an_empty_database(db: None) -> None:
    assert "rescaler_pipeline_up" not in scrape()
    register_cluster()
    Pipeline.objects.update(heartbeat_at=timezone.now() - dt.timedelta(hours=1))
    assert scrape()["rescaler_pipeline_up"][(("pipeline", "wordcount"),)] == 0


def test_openmetrics_when_asked(db: None) -> None:
    register_cluster()
    response = Client().get("/metrics", HTTP_ACCEPT="application/openmetrics-text; version=1.0.0")
    assert response["Content-Type"].startswith("application/openmetrics-text")
    text = response.content.decode()
    assert "# TYPE rescaler_epoch_duration_seconds gaugehistogram" in text
    assert text.rstrip().endswith("# EOF")


def test_public_by_default_and_authenticated_when_configured(settings: Any, viewer: Any) -> None:
    assert Client().get("/metrics").status_code == 200
    settings.RESCALER_METRICS_REQUIRE_AUTH = True
    response = Client().get("/metrics")
    assert response.status_code == 401 and response["WWW-Authenticate"] == "Token"
    bad = Client(HTTP_AUTHORIZATION="Token nope")
    assert bad.get("/metrics").status_code == 401
    assert token_client(viewer).get("/metrics").status_code == 200
    session = Client()
    session.force_login(viewer)
    assert session.get("/metrics").status_code == 200


def test_worker_status_lost_pus_and_locality(db: None) -> None:
    from rescaler.cluster.services import epoch_record
    from rescaler.runner.workers import workers_record
    from workers.control import EpochReport, PuLoad, WorkerInfo

    register_cluster(workers={"w1": [0, 1], "w2": [2, 3]}, initial_pus=(0, 1))
    workers_record(
        pipeline="wordcount", epoch=0, workers=[WorkerInfo("w1", "1", "h", 2, (0, 1), True, 0)]
    )
    epoch_record(
        report=EpochReport(
            pipeline="wordcount", epoch=1, rows=1, malformed=0, duration_s=0.1,
            committed_at=time.time(), source_offset={}, per_vnode={}, mapping_versions={},
            per_pu=[PuLoad("word_count", 0, 1, 1, 1, "1"), PuLoad("word_count", 1, 1, 1, 1, "9")],
        )
    )  # fmt: skip
    m = scrape()
    p = (("pipeline", "wordcount"),)
    status = m["rescaler_worker_status"]
    assert status[(*p, ("status", "active"), ("worker", "w1"))] == 1
    assert status[(*p, ("status", "lost"), ("worker", "w1"))] == 0
    assert status[(*p, ("status", "lost"), ("worker", "w2"))] == 1
    assert m["rescaler_parallel_units_lost"][p] == 2
    assert m["rescaler_pu_tasks_total"][(*p, ("pu", "0"))] == 1
    assert m["rescaler_pu_tasks_home_total"][(*p, ("pu", "0"))] == 1
    assert m["rescaler_pu_tasks_home_total"][(*p, ("pu", "1"))] == 0
    assert m["rescaler_pipeline_locality_ratio"][p] == 0.5


def test_the_autoscalers_signals_and_its_newest_decision(db: None) -> None:
    """The figures a decision rests on (tests/unit/rescaler/autoscaling/test_signals.py): 900
    records per PU every 2 s on 2 PUs at 2 ms a record is 900 records/s, 500 per busy second
    per PU, 90 % busy; the decision proposes 3 PUs."""
    admin = make_user("admin", rescale=True, policy=True)
    stepped(admin)
    m = scrape()
    f = (("fragment", "word_count"), ("pipeline", "wordcount"))
    # the policy's 60 s window at 2 s an epoch (an epoch or two fewer on a slow machine)
    epochs = m["rescaler_autoscaling_window_epochs"][f]
    assert 27 <= epochs <= 30
    assert m["rescaler_autoscaling_window_seconds"][f] == pytest.approx(2 * epochs)
    assert m["rescaler_autoscaling_input_rows_per_second"][f] == pytest.approx(900)
    assert m["rescaler_autoscaling_processing_rows_per_busy_second"][f] == pytest.approx(500)
    assert m["rescaler_autoscaling_busy_ratio"][f] == pytest.approx(0.9)
    assert m["rescaler_autoscaling_epoch_latency_seconds"][f] == pytest.approx(0.25)
    assert m["rescaler_autoscaling_skew_ratio"][f] == pytest.approx(1.0)
    assert "rescaler_autoscaling_decision_kind" not in m  # nothing decided yet
    recommendation = recommendation_get(user=admin, pipeline=PIPELINE, plan=False)
    assert recommendation.recorded is not None
    m = scrape()
    kinds = m["rescaler_autoscaling_decision_kind"]
    assert kinds == {
        (("kind", "scale"), ("pipeline", "wordcount")): 1.0,
        (("kind", "rebalance"), ("pipeline", "wordcount")): 0.0,
        (("kind", "no_change"), ("pipeline", "wordcount")): 0.0,
    }
    assert m["rescaler_autoscaling_decision_parallel_units"] == {f: 3.0}
    assert m["rescaler_autoscaling_decision_timestamp_seconds"][
        (("pipeline", "wordcount"),)
    ] == pytest.approx(recommendation.recorded.decided_at.timestamp())
    # the figures are the decision's own
    estimate = recommendation.decision.fragments[FRAGMENT].estimate
    assert estimate is not None
    assert m["rescaler_autoscaling_input_rows_per_second"][f] == estimate.input_rate
    assert m["rescaler_autoscaling_busy_ratio"][f] == estimate.busy_fraction


def test_a_signal_not_reported_has_no_sample(db: None) -> None:
    """Epochs of a runner that reports no busy seconds: the rates it does report are there,
    the true processing rate and the busy share are absent (unknown), not 0."""
    register_cluster(epochs=0)
    report_epochs(count=80, records=lambda e, pu: 1000 if pu == 0 else 500)
    m = scrape()
    f = (("fragment", "word_count"), ("pipeline", "wordcount"))
    # the default policy's 120 s window
    assert 57 <= m["rescaler_autoscaling_window_epochs"][f] <= 60
    assert m["rescaler_autoscaling_input_rows_per_second"][f] == pytest.approx(750)
    assert m["rescaler_autoscaling_skew_ratio"][f] == pytest.approx(1000 / 750)
    assert f not in m.get("rescaler_autoscaling_processing_rows_per_busy_second", {})
    assert f not in m.get("rescaler_autoscaling_busy_ratio", {})
    assert f not in m.get("rescaler_autoscaling_backlog_rows", {})


def test_the_source_backlog_in_the_fragments_records(db: None) -> None:
    """A source record is two of the fragment's: 500 lines waiting are 1,000 records."""
    register_cluster(epochs=0)
    report_epochs(count=80, records=lambda e, pu: 100, backlog=lambda e: 500, fan_out=2)
    m = scrape()
    f = (("fragment", "word_count"), ("pipeline", "wordcount"))
    assert m["rescaler_autoscaling_backlog_rows"][f] == 1000


def test_no_epoch_in_the_window_no_signal(db: None) -> None:
    register_cluster(epochs=0)
    report_epochs(count=10, records=lambda e, pu: 100, end_at=time.time() - 3600)
    m = scrape()
    f = (("fragment", "word_count"), ("pipeline", "wordcount"))
    assert m["rescaler_autoscaling_parallel_units"] == {f: 2.0}
    assert not any(
        name.startswith("rescaler_autoscaling_") and name != "rescaler_autoscaling_parallel_units"
        for name in m
    )
