"""Preemption notices: POST /api/v1/workers/<name>/notice (docs/elastic-workers.md,
"Preemption"). The worker is cordoned at once, audited as self-reported with its deadline, and
under the drain policy drained all at once, with priority over an operation on its fragments."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from rescaler.audit.models import AuditEvent
from rescaler.cluster.models import Pipeline, Worker
from rescaler.operations import drive
from rescaler.operations.models import RescaleOperation
from rescaler.operations.requests import operation_request
from rescaler.runner.workers import workers_record
from tests.unit.api.fixtures import PIPELINE, request_body
from tests.unit.api.test_workers import URL, workers  # noqa: F401 (the fixture)
from workers.control import WorkerInfo
from workers.rescale.protocol import Granularity, OperationStatus

pytestmark = pytest.mark.django_db

ALL_AT_ONCE = Granularity.parse("all_at_once").to_json()


def notice(client: APIClient, name: str = "w2", **body: Any) -> Any:
    return client.post(f"{URL}/{name}/notice", body, format="json")


def test_a_notice_cordons_at_once_and_drains_all_at_once(
    operator_client: APIClient,
    workers: Pipeline,  # noqa: F811
) -> None:
    before = timezone.now()
    response = notice(operator_client, deadline_s=30, reason="spot interruption")
    assert response.status_code == 202, response.content
    data = response.json()
    assert data["worker"]["status"] == "draining"
    op = data["operation"]
    assert op["granularity"] == ALL_AT_ONCE
    assert op["request"]["changes"]["word_count"]["removed_parallel_units"] == [2]
    assert response["Location"].endswith(f"/api/v1/operations/{op['operation_id']}")
    shown = data["worker"]["notice"]
    assert shown["origin"] == "platform"
    deadline = dt.datetime.fromisoformat(shown["deadline"])
    assert (
        before + dt.timedelta(seconds=29) <= deadline <= timezone.now() + dt.timedelta(seconds=31)
    )
    event = AuditEvent.objects.get(action="worker.notice")
    assert event.actor_name == "worker w2 (self-reported)"
    assert event.after["self_reported"] is True and event.after["deadline_s"] == 30
    assert event.after["reason"] == "spot interruption" and event.after["reported_by"]
    assert event.before["status"] == "active"
    listed = {w["name"]: w for w in operator_client.get(URL).json()}
    assert listed["w2"]["notice"]["deadline"] == shown["deadline"]
    assert listed["w1"]["notice"] is None


def test_a_second_notice_keeps_the_earlier_deadline(
    operator_client: APIClient,
    workers: Pipeline,  # noqa: F811
    settings: Any,
) -> None:
    settings.RESCALER_PREEMPTION_POLICY = "cordon"
    first = notice(operator_client, deadline_s=60).json()["worker"]
    assert first["status"] == "cordoned" and "preemption notice" in first["status_reason"]
    later = notice(operator_client, deadline_s=600).json()["worker"]
    assert later["notice"]["deadline"] == first["notice"]["deadline"]
    sooner = notice(operator_client, deadline_s=5).json()["worker"]
    assert sooner["notice"]["deadline"] < first["notice"]["deadline"]
    assert AuditEvent.objects.filter(action="worker.notice").count() == 2
    assert not RescaleOperation.objects.exists(), "the cordon policy starts no drain"


def test_the_default_deadline_is_the_settings(
    operator_client: APIClient,
    workers: Pipeline,  # noqa: F811
    settings: Any,
) -> None:
    settings.RESCALER_PREEMPTION_POLICY = "cordon"
    settings.RESCALER_PREEMPTION_DEADLINE_S = 45
    before = timezone.now()
    worker = notice(operator_client).json()["worker"]
    deadline = dt.datetime.fromisoformat(worker["notice"]["deadline"])
    assert dt.timedelta(seconds=44) <= deadline - before <= dt.timedelta(seconds=46)


def test_a_busy_fragment_is_asked_to_cancel_and_the_drain_follows_its_end(
    operator_client: APIClient,
    operator: Any,
    workers: Pipeline,  # noqa: F811
    django_capture_on_commit_callbacks: Any,
) -> None:
    busy = operation_request(user=operator, body=request_body(added_parallel_units=[3]))
    assert isinstance(busy, RescaleOperation)
    response = notice(operator_client, deadline_s=120)
    assert response.status_code == 202, response.content
    data = response.json()
    assert data["operation"] is None and data["waiting_for"] == [busy.operation_id]
    assert data["worker"]["status"] == "cordoned"
    busy.refresh_from_db()
    assert busy.status == OperationStatus.CANCELLING
    assert "preemption notice for worker w2" in busy.outcome
    # the busy operation ends: the drain starts, all at once
    with django_capture_on_commit_callbacks(execute=True):
        drive._finalize(busy, OperationStatus.CANCELLED, "cancelled")
    worker = Worker.objects.get(name="w2")
    assert worker.status == "draining"
    drain = RescaleOperation.objects.get(operation_id=worker.drain_operation_id)
    assert drain.granularity == ALL_AT_ONCE


def test_past_its_deadline_a_notice_starts_no_drain(
    operator_client: APIClient,
    operator: Any,
    workers: Pipeline,  # noqa: F811
    django_capture_on_commit_callbacks: Any,
) -> None:
    busy = operation_request(user=operator, body=request_body(added_parallel_units=[3]))
    assert isinstance(busy, RescaleOperation)
    notice(operator_client, deadline_s=120)
    Worker.objects.filter(name="w2").update(
        notice_deadline=timezone.now() - dt.timedelta(seconds=1)
    )
    with django_capture_on_commit_callbacks(execute=True):
        drive._finalize(busy, OperationStatus.CANCELLED, "cancelled")
    assert Worker.objects.get(name="w2").status == "cordoned", "the loss path's, not a drain"
    assert RescaleOperation.objects.count() == 1


def test_a_notice_that_cannot_drain_still_cordons_and_says_why(
    operator_client: APIClient,
    workers: Pipeline,  # noqa: F811
) -> None:
    # w1 also runs word_count; draining both would leave it nowhere: w1 first, then w2
    assert notice(operator_client, "w1").json()["worker"]["status"] == "draining"
    data = notice(operator_client, "w2").json()
    assert data["worker"]["status"] == "cordoned" and data["operation"] is None
    assert data["detail"]
    assert AuditEvent.objects.filter(action="worker.notice_drain_refused").count() == 1


@pytest.mark.parametrize(
    "body",
    [
        {"deadline_s": 0},
        {"deadline_s": 86_401},
        {"deadline_s": "soon"},
        {"deadline_s": True},
        {"deadline_s": None},
        {"deadline": 30},
        {"reason": 5},
    ],
)
def test_malformed_notices_are_400_and_change_nothing(
    operator_client: APIClient,
    workers: Pipeline,  # noqa: F811
    body: dict[str, Any],
) -> None:
    response = notice(operator_client, **body)
    assert response.status_code == 400, response.content
    assert response.json()["detail"]
    assert Worker.objects.get(name="w2").status == "active"
    assert not AuditEvent.objects.filter(action="worker.notice").exists()


def test_a_viewer_may_not_give_notice_and_a_gone_worker_is_409(
    viewer_client: APIClient,
    operator_client: APIClient,
    workers: Pipeline,  # noqa: F811
) -> None:
    assert notice(viewer_client).status_code == 403
    assert notice(operator_client, "nope").status_code == 404
    Worker.objects.filter(name="w2").update(status="lost")
    gone = notice(operator_client)
    assert gone.status_code == 409 and gone.json()["code"] == "worker_status_conflict"


def test_spark_decommissioning_an_executor_is_the_workers_own_notice(
    operator_client: APIClient,
    workers: Pipeline,  # noqa: F811
    django_capture_on_commit_callbacks: Any,
) -> None:
    report = [
        WorkerInfo("w1", "1", "host-a", 2, (0, 1), True, 0),
        WorkerInfo("w2", "2", "host-b", 2, (2, 3), True, 0, notice_at=1_700_000_000.0),
    ]
    with django_capture_on_commit_callbacks(execute=True):
        workers_record(pipeline=PIPELINE, epoch=3, workers=report)
    worker = Worker.objects.get(name="w2")
    assert worker.notice_origin == "spark" and worker.status == "draining"
    event = AuditEvent.objects.get(action="worker.notice")
    assert event.actor_name == "worker w2 (self-reported)" and event.after["origin"] == "spark"
    # the runner reports the same notice at every later barrier: taken once
    with django_capture_on_commit_callbacks(execute=True):
        workers_record(pipeline=PIPELINE, epoch=4, workers=report)
    assert AuditEvent.objects.filter(action="worker.notice").count() == 1
    assert RescaleOperation.objects.count() == 1
