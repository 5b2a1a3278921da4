"""The executors' slots go to an epoch's tasks before the runner's background work (exports,
snapshot writes, store checks: ``workers.spark_tasks.run_tasks``), in Spark's fair scheduler:
an epoch waits for the background tasks running when it starts, not for the whole background
job. With Spark's default FIFO, the same epoch waits for every task of a job submitted first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.spark]

REPO = Path(__file__).resolve().parents[3]


def child(*args: str) -> Any:
    """What ``tests/integration/workers/scheduling.py`` printed, run in a JVM of its own."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "tests.integration.workers.scheduling", *args]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def background_before(tasks: list[list[Any]], which: int) -> int:
    """How many background tasks started before the epoch's task that started ``which``-th."""
    epochs = [i for i, (kind, _) in enumerate(tasks) if kind == "epoch"]
    return sum(1 for kind, _ in tasks[: epochs[which]] if kind == "background")


def test_an_epoch_s_tasks_take_the_slots_before_the_background_job_s_next_ones() -> None:
    fair = child()  # the tasks, as they started
    assert len(fair) == 10
    # the two background tasks that held the slots when the epoch came, and no other
    assert background_before(fair, -1) == 2, fair
    fifo = child("fifo")  # the control: Spark's default order makes the epoch wait for all six
    assert background_before(fifo, 0) == 6, fifo


def test_background_tasks_run_in_the_python_workers_the_epochs_keep_warm() -> None:
    # Spark keeps SQL's Python workers apart from RDDs' and stops idle ones after a minute: a
    # rescale's first export, run as an RDD map, waited for new workers to start (0.5-2.1 s a
    # task in the event log) while holding the slots the collect epoch needed.
    pids = child("workers")
    assert pids["background"] and set(pids["background"]) <= set(pids["epoch"]), pids
