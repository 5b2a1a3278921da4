"""A runner given a source it cannot read stops before Spark starts, with one message saying
what to do (the real server, a stream that is not there, a server that is not there); one whose
pipeline module its executors cannot import stops before its first epoch, saying so."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.natsservice import unique_name

REPO = Path(__file__).resolve().parents[3]


def run(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-m", "workers", "run", "--pipeline", "wordcount",
         "--state-dir", str(tmp_path), *args],
        cwd=REPO, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_a_missing_stream_stops_the_start_with_how_to_create_it(
    tmp_path: Path, nats_service: str
) -> None:
    name = unique_name("RESCALER_ABSENT")
    done = run(tmp_path, "--source", f"nats:{name}")
    assert done.returncode == 2
    assert f"JetStream stream '{name}' does not exist" in done.stderr
    assert "jetstream_feed" in done.stderr and "nats stream add" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "wordcount" / "checkpoint").exists(), "stopped before Spark"


def test_a_server_that_does_not_answer_stops_the_start_with_its_start_command(
    tmp_path: Path,
) -> None:
    done = run(tmp_path, "--source", "nats:ANY", env={"RESCALER_NATS_URL": "nats://127.0.0.1:1"})
    assert done.returncode == 2
    assert "did not answer" in done.stderr and "nats-server" in done.stderr


def test_a_bad_stream_name_or_sink_is_refused_by_the_arguments(tmp_path: Path) -> None:
    done = run(tmp_path, "--source", "nats:a.b")
    assert done.returncode == 2 and "not a valid JetStream stream name" in done.stderr
    done = run(tmp_path, "--sink", "mysql://h/db")
    assert done.returncode == 2 and "unsupported sink URI" in done.stderr


@pytest.mark.spark
def test_a_module_that_does_not_import_on_the_executors_stops_the_start(tmp_path: Path) -> None:
    """The start's import check (one SQL task per task slot, beside the query's start): its
    failure ends the runner with the module's error, not the query's retries."""
    import os

    fixtures = REPO / "tests" / "fixtures"
    env = {"PYTHONPATH": f"{REPO}{os.pathsep}{fixtures}", "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(
        [sys.executable, "-m", "workers", "run", "--pipeline", "userpipe.driver_only:build",
         "--state-dir", str(tmp_path), "--no-spark-ui", "--epochs", "2"],
        cwd=REPO, env={**os.environ, **env}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    assert "pipeline module 'userpipe.driver_only' does not import inside a Spark task" in (
        done.stderr
    )
    assert "No module named 'only_on_the_driver'" in done.stderr
    assert not list((tmp_path / "driver_only").glob("checkpoint/commits/*")), "no epoch ran"
