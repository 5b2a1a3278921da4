"""The control plane's services restarted while a rescale runs: Postgres, then Redis.

Each test runs the whole stack (the runner on Spark local[2], a Celery worker, daphne) on a
private server of the service it restarts (tests/integration/services.py), so the machine's own
servers are never touched. The operation must complete without any process being restarted by
hand, and every key must equal the oracle.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import DatabaseError, connection
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from rescaler.audit.models import AuditEvent
from tests.e2e.conftest import browser, sign_in  # noqa: F401 - the browser fixture
from tests.integration.services import PrivatePostgres, PrivateRedis
from tests.integration.stack import (
    REPO,
    Processes,
    check_oracle,
    finish,
    operator_user,
    request_op,
    running_pipeline,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(1200)]

# how long each service stays down: longer than a few of the runner's epochs and the Celery
# driver's poll, shorter than every time-out that would turn the outage into a failure
DOWN_S = 6.0
# Redis stays down longer than a driver's budget (RESCALER_DRIVE_BUDGET_S=20 in the stack), so
# the driver's re-queue of itself always falls into the outage and is lost
REDIS_DOWN_S = 25.0
FLUID_STEPS = 16  # 2 -> 4 PUs over 32 vnodes, one vnode per step: 16 steps


def _steps_done(operation: dict[str, Any]) -> int:
    return sum(1 for s in operation["steps"] if s["phase"] == "done")


def _tolerant(predicate: Callable[[], Any]) -> Callable[[], Any]:
    """A wait predicate that reads Postgres while it may be down: an error reads as not yet."""

    def check() -> Any:
        try:
            return predicate()
        except DatabaseError:
            connection.close()
            return False

    return check


# --- Postgres -----------------------------------------------------------------------------------


@pytest.fixture
def private_postgres(transactional_db: None) -> Iterator[PrivatePostgres]:
    """A private Postgres with the project's schema; this test's ORM uses it too, so that what
    the test reads and writes is what the stack sees."""
    server = PrivatePostgres()
    server.start()
    server.create_database("rescaler")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "rescaler.settings.test",
        "DATABASE_URL": server.url("rescaler"),
    }
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--no-input", "-v", "0"],
        cwd=REPO, env=env, check=True, timeout=300,
    )  # fmt: skip
    settings_dict = connection.settings_dict
    saved = {k: settings_dict[k] for k in ("NAME", "HOST", "PORT")}
    connection.close()
    settings_dict.update(NAME="rescaler", HOST="127.0.0.1", PORT=str(server.port))
    try:
        yield server
    finally:
        connection.close()
        settings_dict.update(saved)
        server.close()


def test_postgres_restarted_mid_operation_the_runner_and_orchestrator_reconnect(
    private_postgres: PrivatePostgres, processes: Processes
) -> None:
    processes.env["DATABASE_URL"] = private_postgres.url("rescaler")
    client = APIClient()
    client.force_authenticate(operator_user())
    running_pipeline(processes)
    processes.worker("worker-1")
    operation_id = request_op(client, {"added_parallel_units": [2, 3]}, "fluid")

    def detail() -> dict[str, Any]:
        response = client.get(f"/api/v1/operations/{operation_id}")
        assert response.status_code == 200, response.content
        return dict(response.json())

    wait_until(
        lambda: _steps_done(detail()) >= 2, 300, "two finished steps", processes,
        ("runner", "worker-1"),
    )  # fmt: skip
    assert detail()["status"] == "running"
    restarted = time.monotonic()
    private_postgres.restart(DOWN_S)
    connection.close()
    wait_until(
        _tolerant(lambda: detail()["status"] == "completed"),
        600,
        "the operation to complete after the Postgres restart",
        processes,
        ("runner", "worker-1"),  # neither may exit: both must reconnect on their own
    )
    print(f"Postgres restart: operation completed {time.monotonic() - restarted:.1f}s after it")
    body = detail()
    assert body["vnodes_moved"] == FLUID_STEPS and _steps_done(body) == FLUID_STEPS, body
    runner_log = processes.log("runner")
    assert "control plane unavailable" in (processes.tmp / "runner.log").read_text(), runner_log
    finish(processes)
    check_oracle(processes)
    # the audit trail kept every step's end, the ones reported across the outage included
    ends = AuditEvent.objects.filter(
        action="step.done", object_type="step", object_id__startswith=f"{operation_id}/"
    )
    assert ends.count() == FLUID_STEPS


# --- Redis --------------------------------------------------------------------------------------


@pytest.fixture
def private_redis(processes: Processes) -> Iterator[PrivateRedis]:
    """A private Redis for the stack's Celery broker, result backend and channel layer."""
    server = PrivateRedis(processes.tmp / "redis.log")
    server.start()
    processes.env["TEST_REDIS_URL"] = server.url
    try:
        yield server
    finally:
        processes.stop_all()
        server.kill()


def _api(url: str, token: str, method: str = "GET", body: Any = None) -> dict[str, Any]:
    request = urllib.request.Request(
        url,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:  # loopback only
        return dict(json.loads(response.read()))


def test_redis_restarted_mid_operation_celery_and_the_console_recover(
    private_redis: PrivateRedis,
    processes: Processes,
    browser: Any,  # noqa: F811
) -> None:
    """Redis keeps nothing on disk here: the restart loses every queued Celery message, result
    and channel-layer group. The operation must still complete, and an open console page must
    show live epochs again without a reload."""
    running_pipeline(processes)
    processes.worker("worker-1")
    live_url = processes.web()
    token = Token.objects.create(user=operator_user()).key
    # the request goes through daphne, whose Celery client uses the private Redis
    operation_id = _api(
        f"{live_url}/api/v1/operations",
        token,
        "POST",
        {
            "changes": {"word_count": {"added_parallel_units": [2, 3]}},
            "strategy": "live",
            "granularity": "fluid",
            "reason": "fault test",
        },
    )["operation_id"]
    page = sign_in(browser, live_url, "viewer")
    page.goto(f"{live_url}/")
    page.wait_for_function("document.getElementById('live-state').textContent === 'live'")

    def detail() -> dict[str, Any]:
        return _api(f"{live_url}/api/v1/operations/{operation_id}", token)

    wait_until(
        lambda: _steps_done(detail()) >= 2, 300, "two finished steps", processes,
        ("runner", "worker-1", "web"),
    )  # fmt: skip
    restarted = time.monotonic()
    private_redis.restart(REDIS_DOWN_S)
    wait_until(
        lambda: detail()["status"] == "completed",
        600,
        "the operation to complete after the Redis restart",
        processes,
        ("runner", "worker-1", "web"),
    )
    print(f"Redis restart: operation completed {time.monotonic() - restarted:.1f}s after it")
    body = detail()
    assert body["vnodes_moved"] == FLUID_STEPS and _steps_done(body) == FLUID_STEPS, body
    # the page that was open through the restart shows epochs committed after it, live
    epoch_after = int(_api(f"{live_url}/api/v1/cluster", token)["pipelines"][0]["last_epoch"])
    page.wait_for_function(
        f"Number(document.getElementById('last-epoch').textContent) > {epoch_after}",
        timeout=60_000,
    )
    page.close()
    finish(processes)
    check_oracle(processes)
