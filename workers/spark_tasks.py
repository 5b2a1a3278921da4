"""Work the runner hands to the executors as Spark tasks of their own, beside the epoch jobs:
snapshot writes, restores, store checks and rescale exports.

Everything here is plain Python on the executor's side (tested without Spark); the driver only
submits the job and records what its tasks return.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def task_location() -> tuple[str, str]:
    """(Spark executor id, host) of the process running this task."""
    from workers.epoch import task_location as where

    return where()


def run_tasks(
    spark: Any, tasks: list[Any], fn: Callable[[Any], Any], description: str
) -> list[Any]:
    """One Spark task per item, on the executors; their results, in order. Without a Spark
    session (simulations, the rescale unit tests), the same tasks run here, one after another."""
    if spark is None:
        return [fn(task) for task in tasks]
    sc = spark.sparkContext
    sc.setJobDescription(description)
    try:
        items = list(enumerate(tasks))
        done = sc.parallelize(items, len(items)).map(lambda it: (it[0], fn(it[1]))).collect()
        return [result for _, result in sorted(done, key=lambda pair: pair[0])]
    finally:
        sc.setJobDescription(None)
