"""``workers.runner.loss``: an executor lost mid-epoch ends the epoch at once, once per query
run, and is handled between two queries. No Spark: the pool and the query are stand-ins."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from workers.job import EPOCH_JOB_TAG
from workers.runner.loss import ExecutorLoss


@dataclass
class Pool:
    lost: list[str] = field(default_factory=list)

    def lost_workers(self) -> list[str]:
        return list(self.lost)


@dataclass
class Context:
    cancelled: list[str] = field(default_factory=list)

    def cancelJobsWithTag(self, tag: str) -> None:
        self.cancelled.append(tag)


@dataclass
class Spark:
    sparkContext: Context = field(default_factory=Context)


@dataclass
class Query:
    runId: str


def loss(pool: Pool) -> tuple[ExecutorLoss, list[int]]:
    observed: list[int] = []
    return ExecutorLoss(pool, lambda: observed.append(1)), observed  # type: ignore[arg-type]


def test_a_loss_mid_epoch_cancels_the_query_runs_jobs_once() -> None:
    pool, spark = Pool(), Spark()
    watcher, _ = loss(pool)
    watcher.watch(spark, Query("run-1"), in_batch=True)
    assert spark.sparkContext.cancelled == [], "nothing lost: nothing cancelled"
    pool.lost = ["w2"]
    watcher.watch(spark, Query("run-1"), in_batch=False)
    assert spark.sparkContext.cancelled == [], "no epoch in flight: the barrier handles it"
    for _ in range(3):
        watcher.watch(spark, Query("run-1"), in_batch=True)
    assert spark.sparkContext.cancelled == [EPOCH_JOB_TAG]
    watcher.watch(spark, Query("run-2"), in_batch=True)
    assert spark.sparkContext.cancelled == [EPOCH_JOB_TAG] * 2, "a new query run is watched anew"


def test_the_loss_is_handled_between_queries_only_when_there_is_one() -> None:
    pool = Pool()
    watcher, observed = loss(pool)
    assert watcher.handle() is False and observed == []
    pool.lost = ["w2"]
    assert watcher.handle() is True and observed == [1]


def test_no_spark_or_no_query_is_left_alone() -> None:
    pool = Pool(lost=["w1"])
    watcher, _ = loss(pool)
    spark: Any = None
    watcher.watch(spark, Query("r"), in_batch=True)
    watcher.watch(Spark(), None, in_batch=True)
