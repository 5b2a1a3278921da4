"""The real stack for tests: the pipeline runner, Celery workers and daphne as child processes
of the test, on the test's own database, Redis database, queue and state directory.

Used by the end-to-end API tests and the browser tests (``processes`` fixture in
tests/conftest.py).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import connection
from rest_framework.test import APIClient

from rescaler.cluster.models import EpochMetric, Pipeline
from rescaler.cluster.services import command_submit
from tests.integration.workers.fixtures import assert_matches_oracle
from workers.oracle import expected_from_generator
from workers.sources.generator import GeneratorConfig

REPO = Path(__file__).resolve().parents[2]
# the generator's size in these tests: small epochs, a few thousand keys
KEYS = 3_000
ROWS = 4_000


def _test_database_url() -> str:
    server = urlsplit(str(settings.DATABASE_URL))
    name = connection.settings_dict["NAME"]
    return urlunsplit((server.scheme, server.netloc, f"/{name}", server.query, ""))


class Processes:
    """The runner and Celery workers of one test, on its database, queue and state directory."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.queue = f"e2e-{uuid.uuid4().hex[:8]}"
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "rescaler.settings.test",
            "DATABASE_URL": _test_database_url(),
            "TEST_REDIS_URL": str(settings.REDIS_URL),
            "CELERY_TASK_DEFAULT_QUEUE": self.queue,
            "STATE_DIR": str(tmp / "state"),
            "SPARK_MASTER": "local[2]",
            "RESCALER_PARALLEL_UNITS": "4",
            "RESCALER_VNODES": "32",
            "RESCALER_LEASE_S": "5",
            "RESCALER_DRIVE_BUDGET_S": "20",
            "PYSPARK_PYTHON": sys.executable,
        }
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.commands: dict[str, tuple[str, ...]] = {}

    def start(self, name: str, *command: str) -> subprocess.Popen[bytes]:
        """Start ``command`` as ``name``; its output is appended to ``<name>.log`` after a line
        with the time and the command (a restarted process keeps its earlier output)."""
        self.commands[name] = command
        with open(self.tmp / f"{name}.log", "ab") as log:  # the child keeps its own descriptor
            log.write(f"# {time.strftime('%F %T')} {' '.join(command)}\n".encode())
            log.flush()
            proc = subprocess.Popen(
                command,
                cwd=REPO,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs[name] = proc
        return proc

    def restart(self, name: str) -> subprocess.Popen[bytes]:
        """Start ``name`` again with the command it was started with."""
        return self.start(name, *self.commands[name])

    def alive(self, name: str) -> bool:
        proc = self.procs.get(name)
        return proc is not None and proc.poll() is None

    def runner(self, *source: str) -> subprocess.Popen[bytes]:
        """The wordcount runner; ``source`` defaults to the generator's arguments."""
        return self.start(
            "runner",
            sys.executable,
            "manage.py",
            "run_pipeline",
            "--pipeline",
            "wordcount",
            *(source or ("--rows-per-epoch", str(ROWS), "--key-space", str(KEYS))),
            "--trigger-interval",
            "0",
            "--no-spark-ui",
        )

    def worker(self, name: str) -> subprocess.Popen[bytes]:
        return self.start(
            name,
            sys.executable,
            "-m",
            "celery",
            "-A",
            "rescaler",
            "worker",
            "--pool",
            "solo",
            "--loglevel",
            "info",
            "--hostname",
            f"{name}-{self.queue}@%h",
            "--queues",
            self.queue,
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        )

    def web(self) -> str:
        """daphne (HTTP and websockets) on a free port; returns its base URL once it answers."""
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        self.start(
            "web", sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
            "rescaler.asgi:application",
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: _answers(f"{url}/healthz"), 60, "daphne", self, ("web",))
        return url

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text(errors="replace")[-4000:]

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        proc = self.procs[name]
        if proc.poll() is None:
            os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.kill(name)


def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=2)  # loopback only
    except urllib.error.HTTPError:
        return True  # it answered (503 while a component is still down)
    except OSError:
        return False
    return True


def wait_until(
    predicate: Any, timeout: float, what: str, procs: Processes, watch: tuple[str, ...]
) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        for name in watch:
            proc = procs.procs[name]
            if proc.poll() is not None:
                pytest.fail(
                    f"{name} exited with {proc.returncode} before {what}:\n{procs.log(name)}"
                )
        time.sleep(0.5)
    logs = "\n".join(f"--- {n}\n{procs.log(n)}" for n in watch)
    pytest.fail(f"timed out after {timeout}s waiting for {what}\n{logs}")


def finish(procs: Processes) -> None:
    """Stop the runner through the control plane; it must exit cleanly."""
    command_submit(pipeline="wordcount", kind="stop")
    procs.procs["runner"].wait(timeout=240)
    assert procs.procs["runner"].returncode == 0, procs.log("runner")


def check_oracle(procs: Processes) -> None:
    """Every key of the wordcount pipeline equals the oracle over every record committed."""
    last = EpochMetric.objects.filter(pipeline__name="wordcount").order_by("-epoch").first()
    assert last is not None
    end = last.source_offset["offset"]
    expected = expected_from_generator(
        "wordcount", GeneratorConfig(kind="lines", key_space=KEYS), end
    )
    assert_matches_oracle(procs.tmp / "state", "wordcount", expected)


def running_pipeline(procs: Processes) -> None:
    """Start the wordcount runner on the generator; wait for its third epoch."""
    procs.runner()
    wait_until(
        lambda: Pipeline.objects.filter(
            name="wordcount", last_epoch__gte=2, status="running"
        ).exists(),
        300,
        "the pipeline's third epoch",
        procs,
        ("runner",),
    )


def operator_user() -> Any:
    """A user who may rescale (the ``operations.rescale`` permission)."""
    user = get_user_model().objects.create_user("operator", password="x")
    user.user_permissions.add(Permission.objects.get(codename="rescale"))
    return user


def request_op(client: APIClient, change: dict[str, list[int]], granularity: Any) -> str:
    """A live rescale of ``word_count`` over the API; returns its operation id."""
    response = client.post(
        "/api/v1/operations",
        {"changes": {"word_count": change}, "strategy": "live", "granularity": granularity},
        format="json",
    )
    assert response.status_code == 202, response.content
    return str(response.json()["operation_id"])
