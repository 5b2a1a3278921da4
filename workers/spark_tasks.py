"""Work the runner hands to the executors as Spark tasks of their own, beside the epoch jobs:
snapshot writes, restores, store checks and rescale exports.

Everything here is plain Python on the executor's side (tested without Spark); the driver only
submits the job and records what its tasks return.
"""

from __future__ import annotations

import pickle
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from workers.state.base import binary_array

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
    from workers.epoch.location import task_location as where

    return where()


def run_tasks(
    spark: Any,
    tasks: list[Any],
    fn: Callable[[Any], Any],
    description: str,
    *,
    locations: Sequence[str | None] | None = None,
) -> list[Any]:
    """One Spark task per item, on the executors, in the ``background`` pool; their results, in
    order. Without a Spark session (simulations, the rescale unit tests), the same tasks run
    here, one after another.

    ``locations``: task i prefers ``locations[i]`` (``workers.pinning.location``: the home
    executor of the PU whose store it reads; None: anywhere), as an epoch's PU tasks do.

    The tasks run as a ``mapInArrow`` over one row per task, not as an RDD ``map``: Spark keeps
    separate Python worker processes for SQL's Python functions and for RDDs, and stops a kind's
    idle workers after a minute. The epochs keep the SQL workers warm; a rescale's first export
    as an RDD task waited for new Python workers to start and import the stores (0.5-2.1 s per
    task, both slots, measured in Spark's event log), and the collect epoch's tasks behind it.
    """
    if spark is None:
        return [fn(task) for task in tasks]
    if not tasks:
        return []
    sc = spark.sparkContext
    sc.setJobDescription(description)
    sc.setLocalProperty(POOL_PROPERTY, BACKGROUND_POOL)
    try:
        count = len(tasks)
        items = spark.range(0, count, 1, count)  # partition i holds the row i: one task per item
        if locations is not None and any(locations):
            from workers.pinning import pin

            items = pin(items, list(locations))
        rows = items.mapInArrow(_each_task(tasks, fn), "result binary").collect()
        done = dict(pickle.loads(row["result"]) for row in rows)
        return [done[index] for index in range(count)]
    finally:
        sc.setLocalProperty(POOL_PROPERTY, None)
        sc.setJobDescription(None)


def _each_task(
    tasks: list[Any], fn: Callable[[Any], Any]
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function: (index, ``fn`` of the task the row's index names), pickled
    (built with ``binary_array``: ``pa.array`` of a list would import pandas in a fresh worker)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            results = [
                pickle.dumps((i, fn(tasks[i])), pickle.HIGHEST_PROTOCOL)
                for i in batch.column(0).to_pylist()
            ]
            yield pa.RecordBatch.from_arrays([binary_array(results)], names=["result"])

    return run
