"""The runner's side of its workers (``workers.worker_pool``): waiting for the master's executors,
bootstrapping new PUs' stores, telling the runner what changed, decommissioning. No Spark: the
executor list is a plain list the test changes, as Spark's status store would."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workers.config import RunnerConfig
from workers.control import Command
from workers.layout import pu_store
from workers.membership import DecommissionRefused, ExecutorSeen
from workers.pipeline.placement import VnodeMapping
from workers.worker_pool import ExecutorsMissing, WorkerPool


class Pool:
    """A pool on a cluster config whose executor list is ``self.seen``."""

    def __init__(self, tmp_path: Path, **config: object) -> None:
        self.cfg = RunnerConfig(
            pipeline="wordcount",
            state_dir=tmp_path,
            spark_master="spark://master:7077",
            executor_poll_s=0.0,
            **config,  # type: ignore[arg-type]
        )
        self.placements = {"count": VnodeMapping.initial("count", 16, [0, 1])}
        self.changes: list[int] = []
        self.seen: list[ExecutorSeen] = []
        self.pool = WorkerPool(self.cfg, lambda: self.placements, self.changes.append)
        self.pool._executors = lambda: list(self.seen)  # type: ignore[method-assign]


def test_start_binds_executors_and_bootstraps_their_stores(tmp_path: Path) -> None:
    p = Pool(tmp_path)
    p.seen = [ExecutorSeen("0", "h0", 1), ExecutorSeen("1", "h1", 1)]
    p.pool.start(spark=None, next_epoch=0)
    assert p.pool.worker_pus() == {"w1": [0], "w2": [1]}
    assert p.pool.usable_pus() == {0, 1}
    root = p.cfg.pipeline_dir
    for pu in (0, 1):
        assert (pu_store(root, "count", pu)).is_dir()
        record = json.loads((root / "bootstrap" / f"pu-{pu}.json").read_text())
        assert record == {"epoch": 0, "mapping_versions": {"count": 1}}
    assert p.changes == [], "the start is reported by the runner itself"


def test_a_restart_waits_for_an_executor_per_worker_that_was_alive(tmp_path: Path) -> None:
    """Binding the first executor that registers would leave the other workers lost and give
    it all their PUs (their stores rebuilt there), while their own executors are on the way."""
    p = Pool(tmp_path)
    p.seen = [ExecutorSeen("0", "h0", 1), ExecutorSeen("1", "h1", 1)]
    p.pool.start(spark=None, next_epoch=0)
    again = Pool(tmp_path, rebind_wait_s=60.0)
    polls = iter(
        [[], [ExecutorSeen("0", "h1", 1)], [ExecutorSeen("0", "h1", 1), ExecutorSeen("1", "h0", 1)]]
    )
    again.pool._executors = lambda: next(polls)  # type: ignore[method-assign]
    again.pool.start(spark=None, next_epoch=3)
    assert again.pool.worker_pus() == {"w1": [0], "w2": [1]}
    assert {w.name: w.executor_id for w in again.pool.snapshot()} == {"w1": "1", "w2": "0"}
    # past the wait, one is enough: the worker whose host did not come back is lost
    third = Pool(tmp_path, rebind_wait_s=0.0)
    third.seen = [ExecutorSeen("0", "h0", 1)]
    third.pool.start(spark=None, next_epoch=5)
    assert third.pool.worker_pus() == {"w1": [0, 1], "w2": []}


def test_start_says_what_to_do_when_the_master_gives_too_few_executors(tmp_path: Path) -> None:
    p = Pool(tmp_path, initial_pus=2, executors_wait_s=0.0)
    p.seen = [ExecutorSeen("0", "h0", 1)]
    with pytest.raises(ExecutorsMissing, match="start more Spark workers"):
        p.pool.start(spark=None, next_epoch=0)


def test_a_join_and_a_loss_reach_the_runner_at_the_barrier(tmp_path: Path) -> None:
    p = Pool(tmp_path)
    p.seen = [ExecutorSeen("0", "h0", 1), ExecutorSeen("1", "h1", 1)]
    p.pool.start(spark=None, next_epoch=0)
    assert not p.pool.executors_changed()
    p.seen.append(ExecutorSeen("2", "h2", 1))
    assert p.pool.executors_changed(), "an idle stream gets a barrier for the join"
    p.pool.observe(7)
    assert p.changes == [7]
    assert p.pool.usable_pus() == {0, 1, 2}
    assert (pu_store(p.cfg.pipeline_dir, "count", 2)).is_dir()
    p.seen = p.seen[:2]
    p.pool.observe(8)
    assert p.changes == [7, 8]
    # the lost worker's PU goes to a live one, whose executor then runs its tasks
    assert p.pool.usable_pus() == {0, 1, 2}
    assert p.pool.home_locations()[2] in {"executor_h0_0", "executor_h1_1"}


def test_a_decommissioning_executor_is_its_workers_notice_reported_once(tmp_path: Path) -> None:
    p = Pool(tmp_path)
    p.seen = [ExecutorSeen("0", "h0", 1), ExecutorSeen("1", "h1", 1)]
    p.pool.start(spark=None, next_epoch=0)
    p.seen[1] = ExecutorSeen("1", "h1", 1, decommissioning_since=1_700_000_000.5)
    assert p.pool.executors_changed(), "an idle stream gets a barrier for the notice"
    p.pool.observe(4)
    assert p.changes == [4]
    (w2,) = [w for w in p.pool.snapshot() if w.name == "w2"]
    assert w2.notice_at == 1_700_000_000.5 and w2.alive
    assert [w.notice_at for w in p.pool.snapshot() if w.name == "w1"] == [None]
    assert not p.pool.executors_changed(), "noticed: no more barriers for it"
    p.pool.observe(5)
    assert p.changes == [4], "the same notice is not reported twice"
    # it survives a restart of the runner (the workers file)
    again = Pool(tmp_path)
    assert [w.notice_at for w in again.pool.snapshot() if w.name == "w2"] == [1_700_000_000.5]


def test_decommission_refuses_a_worker_holding_vnodes_and_drops_a_drained_one(
    tmp_path: Path,
) -> None:
    p = Pool(tmp_path)
    p.seen = [ExecutorSeen("0", "h0", 1), ExecutorSeen("1", "h1", 1)]
    p.pool.start(spark=None, next_epoch=0)
    command = Command(id=1, kind="worker.decommission", payload={"worker": "w2"})
    with pytest.raises(DecommissionRefused):
        p.pool.decommission(command, holding={0, 1}, epoch=5)
    assert p.changes == []
    detail = p.pool.decommission(command, holding={0}, epoch=5)
    assert "w2 decommissioned" in detail and "[1]" in detail
    assert p.changes == [5]
    assert p.pool.usable_pus() == {0}


def test_a_worker_whose_executor_went_is_lost_until_the_barrier_marks_it(tmp_path: Path) -> None:
    """What the runner ends an epoch on: a live worker with PUs whose executor Spark dropped;
    once marked lost (and its PUs moved) it is not lost again, and a worker with no PUs (a
    decommissioned one) is never."""
    p = Pool(tmp_path)
    p.seen = [ExecutorSeen("0", "h0", 1), ExecutorSeen("1", "h1", 1)]
    p.pool.start(spark=None, next_epoch=0)
    assert p.pool.lost_workers() == []
    p.seen = [ExecutorSeen("0", "h0", 1)]
    assert p.pool.lost_workers() == ["w2"]
    p.pool.observe(4)
    assert p.pool.lost_workers() == []
    assert p.pool.worker_pus()["w1"] == [0, 1]


def test_a_worker_that_gave_notice_is_not_lost_when_its_executor_exits(tmp_path: Path) -> None:
    p = Pool(tmp_path)
    p.seen = [ExecutorSeen("0", "h0", 1), ExecutorSeen("1", "h1", 1)]
    p.pool.start(spark=None, next_epoch=0)
    p.seen = [ExecutorSeen("0", "h0", 1), ExecutorSeen("1", "h1", 1, decommissioning_since=5.0)]
    p.pool.observe(3)  # the notice
    p.seen = [ExecutorSeen("0", "h0", 1)]
    assert p.pool.lost_workers() == [], "its exit is the barrier's to report"
