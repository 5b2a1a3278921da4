"""Which tasks Spark starts first when the runner's background work and an epoch's job want the
same slots: run as a child process (one JVM, ``local[2]``, the runner's own ``build_spark``).
Six background tasks (``run_tasks``, as an export or a snapshot write) of a second each start;
once two of them run, a job of four half-second tasks is submitted from another thread, as the
streaming query submits an epoch's. ``python -m tests.integration.workers.scheduling [fifo]``
prints the tasks as JSON, ordered by when they started: ``[kind, index]`` pairs.
``python -m tests.integration.workers.scheduling workers`` prints the Python worker processes
(pids) that ran an epoch-like ``mapInArrow`` job and then background tasks, as JSON."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any


def _background(marks: str) -> Any:
    def task(index: int) -> tuple[str, int, float]:
        started = time.time()
        Path(marks, f"bg-{index}").touch()
        while time.time() - started < 1.0:  # busy, as an export is
            pass
        return ("background", index, started)

    return task


def _epoch(index: int) -> tuple[str, int, float]:
    started = time.time()
    # Long enough that the order compared is Spark's and not the Python workers' start-up:
    # with instant tasks, the last epoch task, launched first, could stamp its start after the
    # next background task did (seen once in CI on a loaded machine).
    while time.time() - started < 0.5:
        pass
    return ("epoch", index, started)


def order(fifo: bool) -> list[list[Any]]:
    from workers.config import RunnerConfig
    from workers.spark_session import build_spark
    from workers.spark_tasks import run_tasks

    state = Path(tempfile.mkdtemp())
    config = RunnerConfig(
        pipeline="wordcount",
        spark_ui=False,
        state_dir=state,
        parallel_units=2,
        sink="files",
        spark_conf=(("spark.scheduler.mode", "FIFO"),) if fifo else (),
    )
    spark = build_spark(config, "scheduling")
    marks = tempfile.mkdtemp(dir=state)
    done: dict[str, list[Any]] = {}
    worker = threading.Thread(
        target=lambda: done.setdefault(
            "background", run_tasks(spark, list(range(6)), _background(marks), "background")
        )
    )
    worker.start()
    while len(os.listdir(marks)) < 2:  # two background tasks hold the two slots
        time.sleep(0.02)
    sc = spark.sparkContext
    epoch = sc.parallelize(range(4), 4).map(_epoch).collect()
    worker.join()
    spark.stop()
    tasks = sorted([*epoch, *done["background"]], key=lambda t: t[2])
    return [[kind, index] for kind, index, _ in tasks]


def _pids(batches: Any) -> Any:
    import pyarrow as pa

    for batch in batches:
        yield pa.RecordBatch.from_arrays(
            [pa.array([os.getpid()] * batch.num_rows, pa.int64())], names=["pid"]
        )


def _background_pid(_: int) -> int:
    return os.getpid()


def workers() -> dict[str, list[int]]:
    """The Python processes of an epoch's job (``mapInArrow``, as ``workers.job`` runs a PU's
    task) and of the background tasks run after it."""
    from workers.config import RunnerConfig
    from workers.spark_session import build_spark
    from workers.spark_tasks import run_tasks

    state = Path(tempfile.mkdtemp())
    config = RunnerConfig(pipeline="wordcount", spark_ui=False, state_dir=state, sink="files")
    spark = build_spark(config, "scheduling")
    epoch = spark.range(0, 4, 1, 2).mapInArrow(_pids, "pid long").collect()
    background = run_tasks(spark, [0, 1], _background_pid, "background")
    spark.stop()
    return {"epoch": sorted({row.pid for row in epoch}), "background": sorted(background)}


if __name__ == "__main__":
    if sys.argv[1:] == ["workers"]:
        print(json.dumps(workers()))
    else:
        print(json.dumps(order(fifo=sys.argv[1:] == ["fifo"])))
