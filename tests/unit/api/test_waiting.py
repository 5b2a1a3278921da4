"""GET /api/v1/operations/{operation_id} says what an unfinished operation waits for."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from rescaler.cluster import services as cluster_services
from rescaler.cluster.models import Pipeline
from rescaler.operations import drive
from rescaler.operations.models import RescaleOperation, RescaleStep
from rescaler.operations.requests import operation_request
from tests.unit.api.fixtures import PIPELINE, request_body
from workers.control import EpochReport

pytestmark = pytest.mark.django_db

URL = "/api/v1/operations"


def waiting(client: APIClient, op: RescaleOperation) -> Any:
    response = client.get(f"{URL}/{op.operation_id}")
    assert response.status_code == 200, response.content
    return response.json()["waiting"]


def empty_epoch(epoch: int) -> None:
    cluster_services.epoch_record(
        report=EpochReport(
            pipeline=PIPELINE,
            epoch=epoch,
            rows=0,
            malformed=0,
            duration_s=0.1,
            committed_at=time.time(),
            source_offset={"files": 3, "tick": 4},
            per_pu=[],
            per_vnode={},
            mapping_versions={},
        )
    )


def test_waiting_says_why_and_notices_an_idle_stream(
    viewer_client: APIClient, operator: Any, cluster: Pipeline
) -> None:
    op = operation_request(user=operator, body=request_body(added_parallel_units=[2, 3]))
    assert isinstance(op, RescaleOperation)
    first = waiting(viewer_client, op)
    assert first["waiting_for"] == "orchestrator" and "Celery" in first["detail"]
    assert first["stream_idle"] is False

    RescaleOperation.objects.filter(pk=op.pk).update(status="running")
    op.refresh_from_db()
    assert waiting(viewer_client, op)["waiting_for"] == "barrier"
    empty_epoch(1)
    idle = waiting(viewer_client, op)
    assert idle["waiting_for"] == "barrier" and idle["stream_idle"] is True
    assert "idle" in idle["detail"] and "empty epoch" in idle["detail"]

    # the runner's report: stored on the operation, its step in the step's row
    RescaleOperation.objects.filter(pk=op.pk).update(
        progress={"operation_id": op.operation_id, "status": "running"}
    )
    RescaleStep.objects.filter(operation=op, step=1).update(
        phase="collecting", timings={"collecting": time.time() - 4}
    )
    op.refresh_from_db()
    export = waiting(viewer_client, op)
    assert export["waiting_for"] == "export" and "2 vnodes" in export["detail"]

    # the step's hold queue reached its bound: the runner says so, and the stream waits
    RescaleOperation.objects.filter(pk=op.pk).update(
        progress={"operation_id": op.operation_id, "status": "running", "hold_queue_full": [1]}
    )
    RescaleStep.objects.filter(operation=op, step=1).update(hold_queue=9_000, hold_bytes=300_123)
    op.refresh_from_db()
    full = waiting(viewer_client, op)
    assert full["waiting_for"] == "hold_queue_full"
    assert "300,123 bytes" in full["detail"] and "2 vnodes" in full["detail"]
    assert "none is dropped" in full["detail"]
    document = viewer_client.get(f"{URL}/{op.operation_id}").json()
    assert document["progress"]["hold_queue_full"] == [1]
    assert document["steps"][0]["hold_bytes"] == 300_123
    RescaleOperation.objects.filter(pk=op.pk).update(
        progress={"operation_id": op.operation_id, "status": "running"}
    )

    Pipeline.objects.filter(name=PIPELINE).update(
        heartbeat_at=timezone.now() - dt.timedelta(minutes=5)
    )
    down = waiting(viewer_client, op)
    assert down["waiting_for"] == "runner" and "300 s ago" in down["detail"]

    drive._finalize(op, "completed", "test")
    assert waiting(viewer_client, op) is None
