"""Work the runner hands to the executors as Spark tasks of their own, beside the epoch jobs:
snapshot writes, restores, store checks and rescale exports.

Everything here is plain Python on the executor's side (tested without Spark); the driver only
submits the job and records what its tasks return.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Spark's fair scheduler pools (``spark.scheduler.mode=FAIR``). The streaming query's epoch jobs
# run in ``default``, always first to a free task slot (a minShare no job reaches keeps the pool
# "needy", and needy pools are served first); the work handed to the executors here runs in
# ``background`` and takes the slots the epochs leave. Spark never stops a running task for
# another, so a background task delays an epoch's task by at most its own length.
BACKGROUND_POOL = "background"
POOL_PROPERTY = "spark.scheduler.pool"  # the job's pool, a local property of the submitting thread
POOLS_XML = """<?xml version="1.0"?>
<allocations>
  <pool name="default">
    <schedulingMode>FIFO</schedulingMode>
    <weight>1000</weight>
    <minShare>100000</minShare>
  </pool>
  <pool name="background">
    <schedulingMode>FIFO</schedulingMode>
    <weight>1</weight>
    <minShare>0</minShare>
  </pool>
</allocations>
"""


def scheduler_conf(directory: Path) -> dict[str, str]:
    """The Spark configuration of the pools above, their allocation file written in
    ``directory`` (the pipeline's; the temporary directory where that cannot be written, a
    read-only state directory); a user's own ``--conf`` for these keys wins."""
    for place in (directory, Path(tempfile.gettempdir())):
        path = place / "fairscheduler.xml"
        try:
            place.mkdir(parents=True, exist_ok=True)
            path.write_text(POOLS_XML)  # once per session: an older or edited file is replaced
        except OSError:
            continue
        return {"spark.scheduler.mode": "FAIR", "spark.scheduler.allocation.file": str(path)}
    return {}  # nowhere to write it: Spark's own order (FIFO)


def task_location() -> tuple[str, str]:
    """(Spark executor id, host) of the process running this task."""
    from workers.epoch import task_location as where

    return where()


def run_tasks(
    spark: Any, tasks: list[Any], fn: Callable[[Any], Any], description: str
) -> list[Any]:
    """One Spark task per item, on the executors, in the ``background`` pool; their results, in
    order. Without a Spark session (simulations, the rescale unit tests), the same tasks run
    here, one after another."""
    if spark is None:
        return [fn(task) for task in tasks]
    sc = spark.sparkContext
    sc.setJobDescription(description)
    sc.setLocalProperty(POOL_PROPERTY, BACKGROUND_POOL)
    try:
        items = list(enumerate(tasks))
        done = sc.parallelize(items, len(items)).map(lambda it: (it[0], fn(it[1]))).collect()
        return [result for _, result in sorted(done, key=lambda pair: pair[0])]
    finally:
        sc.setLocalProperty(POOL_PROPERTY, None)
        sc.setJobDescription(None)
