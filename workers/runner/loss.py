"""An executor lost while the stream runs: the epoch in flight ends at once, and the loss is
handled before the query starts again (docs/elastic-workers.md, "Loss").

Without this, Spark retries the lost executor's PU tasks elsewhere, where each refuses
(``AwayFromHome``: its store is on the lost disk) until the task's attempts run out; the restarted
query's barrier then finds the loss and moves the PUs, and their first tasks on the new home fail
again (``StoreLost``) before the store check rebuilds them. Ended at once and handled between the
two queries, the loss costs one rebuild and no failed attempts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from workers.job import EPOCH_JOB_TAG
from workers.worker_pool import WorkerPool

log = logging.getLogger("workers.runner")


class ExecutorLoss:
    """Watches for workers whose executor Spark has lost, for one runner."""

    def __init__(self, workers: WorkerPool, observe: Callable[[], None]) -> None:
        """``observe``: the barrier's worker check, run between two queries (it marks the lost
        workers and moves their PUs)."""
        self.workers = workers
        self._observe = observe
        self._ended_run: str | None = None  # the query run whose epoch was ended

    def watch(self, spark: Any, query: Any, in_batch: bool) -> None:
        """While an epoch runs: when a worker with PUs lost its executor, cancel the epoch's
        jobs (tagged ``EPOCH_JOB_TAG``), once per query run."""
        if not in_batch or spark is None or query is None:
            return
        run = str(query.runId)
        if run == self._ended_run:
            return
        lost = self.workers.lost_workers()
        if not lost:
            return
        self._ended_run = run
        log.warning(
            "worker(s) %s lost their executor during an epoch: ending the epoch now (it re-runs "
            "once their PUs have moved), not after Spark's retries of their tasks",
            ", ".join(lost),
        )
        spark.sparkContext.cancelJobsWithTag(EPOCH_JOB_TAG)

    def handle(self) -> bool:
        """After the query failed: when workers lost their executors, mark them lost and move
        their PUs now (the barrier would, inside the next query); whether any were."""
        lost = self.workers.lost_workers()
        if not lost:
            return False
        log.warning("handling the loss of worker(s) %s before the query restarts", ", ".join(lost))
        self._observe()
        return True
