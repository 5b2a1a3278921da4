"""The whole system: rescales requested over the REST API, driven by a real Celery worker, carried
out by a real pipeline runner (Spark local[2]) reporting to Postgres; state checked by the oracle."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from rescaler.cluster.models import EpochMetric
from tests.integration.stack import (
    Processes,
    check_oracle,
    finish,
    operator_user,
    request_op,
    running_pipeline,
    wait_until,
)
from tests.integration.workers.fixtures import assert_matches_oracle
from workers.oracle import expected_from_directory

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(1500)]


@pytest.fixture
def operator_client() -> APIClient:
    client = APIClient()
    client.force_authenticate(operator_user())
    return client


def op_status(client: APIClient, operation_id: str) -> str:
    response = client.get(f"/api/v1/operations/{operation_id}")
    assert response.status_code == 200, response.content
    return response.json()["status"]


def test_scale_out_scale_in_migrate_and_cancel_over_the_api(
    processes: Processes, operator_client: APIClient
) -> None:
    running_pipeline(processes)
    processes.worker("worker-1")
    batched = {"vnodes_per_step": 4, "steps_in_flight": 2}
    for change in (
        {"added_parallel_units": [2, 3]},
        {"removed_parallel_units": [1, 2, 3]},
        {"added_parallel_units": [3], "removed_parallel_units": [0]},
    ):
        operation_id = request_op(operator_client, change, batched)
        wait_until(
            lambda operation_id=operation_id: (
                op_status(operator_client, operation_id) == "completed"
            ),
            400,
            f"operation {operation_id} ({change})",
            processes,
            ("runner", "worker-1"),
        )
    cluster = operator_client.get("/api/v1/cluster").json()
    assert cluster is not None

    operation_id = request_op(operator_client, {"added_parallel_units": [0, 1]}, "fluid")
    wait_until(
        lambda: any(
            s["phase"] == "done"
            for s in operator_client.get(f"/api/v1/operations/{operation_id}").json()["steps"]
        ),
        300,
        "a first finished step",
        processes,
        ("runner", "worker-1"),
    )
    assert operator_client.post(f"/api/v1/operations/{operation_id}/cancel").status_code == 202
    wait_until(
        lambda: op_status(operator_client, operation_id) == "cancelled",
        300,
        "the cancel",
        processes,
        ("runner", "worker-1"),
    )

    finish(processes)
    check_oracle(processes)
    audit = operator_client.get("/api/v1/audit", {"object_type": "step", "page_size": 500}).json()
    rows = audit["results"] if isinstance(audit, dict) else audit
    done = [e for e in rows if e["action"] == "step.done"]
    assert done and all(e["actor_name"] == "runner" for e in done)
    requested = operator_client.get("/api/v1/audit", {"action": "operation.requested"}).json()
    rows = requested["results"] if isinstance(requested, dict) else requested
    assert len(rows) == 4 and all(e["actor_name"] == "operator" for e in rows)


def test_a_celery_worker_killed_mid_operation_is_replaced_and_the_operation_completes(
    processes: Processes, operator_client: APIClient
) -> None:
    running_pipeline(processes)
    processes.worker("worker-1")
    operation_id = request_op(operator_client, {"added_parallel_units": [2, 3]}, "fluid")
    wait_until(
        lambda: any(
            s["phase"] == "done"
            for s in operator_client.get(f"/api/v1/operations/{operation_id}").json()["steps"]
        ),
        300,
        "a first finished step",
        processes,
        ("runner", "worker-1"),
    )
    processes.kill("worker-1")  # kill -9 the worker driving the operation
    processes.worker("worker-2")
    wait_until(
        lambda: op_status(operator_client, operation_id) == "completed",
        600,
        "the operation to complete under the new worker",
        processes,
        ("runner", "worker-2"),
    )
    finish(processes)
    check_oracle(processes)


def drop_lines(inbox: Path, name: str, count: int) -> None:
    lines = [json.dumps({"line": f"w{i % 97} w{i * 31 % 211} idle"}) for i in range(count)]
    tmp = inbox / f".{name}"
    tmp.write_text("".join(line + "\n" for line in lines))
    os.replace(tmp, inbox / name)


def rows_committed() -> int:
    return sum(
        EpochMetric.objects.filter(pipeline__name="wordcount").values_list("rows", flat=True)
    )


def test_a_live_rescale_on_an_idle_stream_completes_over_the_api(
    processes: Processes, operator_client: APIClient
) -> None:
    """Nothing arrives during the operation: the runner's forced empty epochs carry it."""
    inbox = processes.tmp / "inbox"
    inbox.mkdir()
    drop_lines(inbox, "0001.jsonl", 1_500)
    processes.runner("--source", f"dir:{inbox}")
    processes.worker("worker-1")
    wait_until(lambda: rows_committed() == 1_500, 300, "the file's records", processes, ("runner",))
    time.sleep(1.5)  # idle: every file taken, nothing new
    before = EpochMetric.objects.filter(pipeline__name="wordcount").count()

    started = time.monotonic()
    operation_id = request_op(operator_client, {"added_parallel_units": [2, 3]}, "batched")
    seen: list[Any] = []

    def completed() -> bool:
        body = operator_client.get(f"/api/v1/operations/{operation_id}").json()
        seen.append(body["waiting"])
        return bool(body["status"] == "completed")

    wait_until(completed, 240, "the idle operation", processes, ("runner", "worker-1"))
    elapsed = time.monotonic() - started
    print(f"idle live scale-out 2->4 over the API: {elapsed:.1f}s from request to completion")
    assert seen[-1] is None, "a finished operation waits for nothing"
    quiet = EpochMetric.objects.filter(pipeline__name="wordcount").order_by("epoch")[before:]
    assert quiet and all(e.rows == 0 for e in quiet), "no record arrived: only empty epochs"
    assert rows_committed() == 1_500

    drop_lines(inbox, "0002.jsonl", 700)
    wait_until(lambda: rows_committed() == 2_200, 300, "the late file", processes, ("runner",))
    latest = EpochMetric.objects.filter(pipeline__name="wordcount", rows__gt=0).order_by("-epoch")
    assert {p["pu"] for p in latest[0].per_pu if p["rows"]} == {0, 1, 2, 3}
    finish(processes)  # the stop, too, is applied at a forced barrier
    files = (processes.tmp / "state" / "wordcount" / "source-manifest.txt").read_text().split()
    expected = expected_from_directory("wordcount", inbox, files)
    assert_matches_oracle(processes.tmp / "state", "wordcount", expected)


def test_the_runner_killed_during_a_stop_start_requested_over_the_api(
    processes: Processes, operator_client: APIClient
) -> None:
    """kill -9 of the runner as soon as the orchestrator has begun a stop-start operation (so
    somewhere between its begin command and its end; the crash points inside the snapshot,
    clear and restore phases are driven one by one by the model test and test_rescale_spark),
    then a new runner: the operation completes and every key equals the oracle."""
    running_pipeline(processes)
    processes.worker("worker-1")
    response = operator_client.post(
        "/api/v1/operations",
        {
            "changes": {"word_count": {"added_parallel_units": [2, 3]}},
            "strategy": "stop_start",
            "reason": "fault test",
        },
        format="json",
    )
    assert response.status_code == 202, response.content
    operation_id = response.json()["operation_id"]
    deadline = time.monotonic() + 120
    while op_status(operator_client, operation_id) == "pending":
        assert time.monotonic() < deadline, "no orchestrator took the operation"
        time.sleep(0.02)
    processes.kill("runner")
    processes.runner()
    wait_until(
        lambda: op_status(operator_client, operation_id) == "completed",
        400,
        "the stop-start to complete under the new runner",
        processes,
        ("runner", "worker-1"),
    )
    body = operator_client.get(f"/api/v1/operations/{operation_id}").json()
    assert body["steps_total"] == 0 and body["vnodes_moved"] == 16, body
    finish(processes)
    check_oracle(processes)
