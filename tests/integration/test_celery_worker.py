"""A real Celery worker process, on the real Redis broker and the pytest-django Postgres database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from celery import Celery
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection

from rescaler.tasks import probe
from tests.integration.services import PrivateRedis

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

REPO = Path(__file__).resolve().parents[2]
RESULT_TIMEOUT_S = 90


def _test_database_url() -> str:
    """DATABASE_URL of the database pytest-django created (test_<name>), for the worker."""
    server = urlsplit(str(settings.DATABASE_URL))
    name = connection.settings_dict["NAME"]
    return urlunsplit((server.scheme, server.netloc, f"/{name}", server.query, ""))


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    # The worker leads its own process group: end it and anything it forked, and only that.
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def _worker(redis_url: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A worker consuming a queue of its own, so no other worker can take the test's task."""
    queue = f"pytest-{uuid.uuid4().hex[:10]}"
    name = f"{queue}@%h"
    log_path = tmp_path / "celery-worker.log"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "rescaler.settings.test",
        "DATABASE_URL": _test_database_url(),
        "TEST_REDIS_URL": redis_url,
    }
    command = [
        sys.executable, "-m", "celery", "-A", "rescaler", "worker",
        "--pool", "solo", "--concurrency", "1", "--loglevel", "info",
        "--hostname", name, "--queues", queue,
        "--without-gossip", "--without-mingle", "--without-heartbeat",
    ]  # fmt: skip
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield {"process": process, "queue": queue, "log": log_path}
    finally:
        _stop(process)


@pytest.fixture
def celery_worker(
    redis_service: str, transactional_db: None, tmp_path: Path
) -> Iterator[dict[str, Any]]:
    yield from _worker(str(settings.REDIS_URL), tmp_path)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    """A redis-server of the test's own: it is killed and started again."""
    server = PrivateRedis(tmp_path / "redis.log")
    server.start()
    try:
        yield server
    finally:
        server.kill()


def _wait(worker: dict[str, Any], done: Callable[[], bool], what: str) -> None:
    """Until ``done()``; fails, with the worker's log, if the worker exits first or it takes
    longer than RESULT_TIMEOUT_S."""
    deadline = time.monotonic() + RESULT_TIMEOUT_S
    while not done():
        process = worker["process"]
        if process.poll() is not None:
            pytest.fail(
                f"the worker exited with {process.returncode} before {what}:\n"
                + worker["log"].read_text()[-6000:]
            )
        if time.monotonic() > deadline:
            pytest.fail(
                f"{what}: not within {RESULT_TIMEOUT_S} s; worker log:\n"
                + worker["log"].read_text()[-4000:]
            )
        time.sleep(0.1)


def _wait_log(worker: dict[str, Any], seen: Callable[[str], bool], what: str) -> None:
    _wait(worker, lambda: seen(worker["log"].read_text(errors="replace")), what)


def _wait_result(result: Any, worker: dict[str, Any]) -> Any:
    _wait(worker, result.ready, "its result")
    return result.get(timeout=5)


@pytest.mark.django_db(transaction=True)
def test_a_real_worker_runs_the_probe_against_the_test_database(
    celery_worker: dict[str, Any],
) -> None:
    # Committed (transaction=True), so the worker's own connection sees it.
    get_user_model().objects.create_user(username="probe-user", password="unused")

    result = probe.apply_async(queue=celery_worker["queue"])

    answer = _wait_result(result, celery_worker)
    assert answer["hostname"].startswith(celery_worker["queue"] + "@")
    assert answer["database"] == connection.settings_dict["NAME"]
    assert answer["select_1"] == 1
    assert answer["users"] == 1


@pytest.mark.django_db(transaction=True)
def test_a_worker_holding_tasks_survives_a_redis_restart(
    private_redis: PrivateRedis, transactional_db: None, tmp_path: Path
) -> None:
    """Redis restarted under a worker that held tasks not yet run (a countdown's, as the
    operation drivers queue): the worker reconnects and takes new tasks, instead of exiting 1
    (celery 5.7 closes the lost connection after detaching it, and kombu's restore of the held
    tasks then raised AttributeError, which no connection-error handler catches)."""
    started = _worker(private_redis.url, tmp_path)
    worker = next(started)
    client = Celery(broker=private_redis.url, backend=private_redis.url)
    try:
        first = client.send_task(probe.name, queue=worker["queue"])
        _wait_result(first, worker)  # connected and consuming
        for _ in range(3):  # held by the worker until their time: delivered, not acknowledged
            client.send_task(probe.name, queue=worker["queue"], countdown=120)
        _wait_log(worker, lambda log: log.count("received") >= 4, "the held tasks received")
        private_redis.restart(5.0)
        # the worker notices the loss, then reconnects (its retries wait 2 s, then 4 s)
        _wait_log(worker, lambda log: log.count("Connected to") >= 2, "the worker reconnected")
        answer = _wait_result(client.send_task(probe.name, queue=worker["queue"]), worker)
        assert answer["select_1"] == 1
    finally:
        client.close()
        started.close()  # stops the worker
