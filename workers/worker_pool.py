"""The runner's workers (docs/elastic-workers.md): Spark's executors bound to workers, new
parallel units bootstrapped, drained workers decommissioned.

The membership itself (which worker owns which PUs, joins, losses) is :mod:`workers.membership`;
this is the runner's side of it: reading Spark's executor list (at most every
``executor_poll_s``, shared by the barrier and the idle watch loop), preparing new PUs' stores,
and telling the runner when the usable PUs changed. The epoch loop only calls :meth:`observe`
at the barrier and :meth:`executors_changed` while idle.
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workers.config import RunnerConfig
from workers.control import Command
from workers.epoch.location import task_location
from workers.layout import NoExecutorDir, local_root, pu_store, refuse_away_from_home
from workers.membership import ExecutorSeen, Membership, WorkerInfo, spark_executors
from workers.pinning import executor_of, location
from workers.pipeline.placement import VnodeMapping
from workers.spark_tasks import run_tasks
from workers.state import open_store
from workers.store_homes import StoreHomes

log = logging.getLogger("workers.runner")


class ExecutorsMissing(Exception):
    """The master gave too few executors in time; the message says what to do."""


@dataclass(frozen=True)
class BootstrapTask:
    """A new PU's stores to create, on its home executor."""

    pipeline_dir: str
    backend: str
    pu: int
    fragments: tuple[str, ...]
    home: str = ""  # the id of the PU's home executor, where its store must be made


def bootstrap_pu(task: BootstrapTask) -> dict[str, Any]:
    """On the PU's executor: each fragment's store exists, empty (a new PU holds nothing: what
    a store of the same number holds here is an earlier state directory's)."""
    here = task_location()[0]
    for fragment in task.fragments:
        path = pu_store(task.pipeline_dir, fragment, task.pu)
        refuse_away_from_home(task.home, here, path, f"the bootstrap of PU {task.pu}")
        shutil.rmtree(path, ignore_errors=True)
        open_store(task.backend, path).close()
    return {"pu": task.pu, "executor": here, "host": task_location()[1]}


@dataclass(frozen=True)
class DiskProbe:
    """Which directory an executor keeps this pipeline's stores in: asked of it by a task."""

    pipeline_dir: str


def probe_disk(task: DiskProbe) -> dict[str, Any]:
    """On an executor: its id and its directory of the pipeline ("" if it has none)."""
    try:
        root = str(local_root(task.pipeline_dir))
    except NoExecutorDir:
        root = ""
    return {"executor": task_location()[0], "root": root}


class WorkerPool:
    def __init__(
        self,
        config: RunnerConfig,
        placements: Callable[[], dict[str, VnodeMapping]],
        on_changed: Callable[[int], None],
    ) -> None:
        """``placements``: the runner's current placements (bootstrap creates a store per
        stateful fragment). ``on_changed(epoch)``: the usable PUs changed (a join bootstrapped,
        a loss seen, a decommission)."""
        self.config = config
        self._placements = placements
        self._on_changed = on_changed
        self.spark: Any = None
        self.membership = Membership(
            config.pipeline_dir,
            local=config.is_local,
            local_pus=config.pus_per_worker,
            pus_per_executor=config.parallel_units,
            host=task_location()[1],
        )
        self._seen: tuple[float, list[ExecutorSeen]] | None = None
        self._lock = threading.Lock()

    # -- queries -----------------------------------------------------------------------------
    def worker_pus(self) -> dict[str, list[int]]:
        return self.membership.worker_pus()

    def usable_pus(self) -> set[int]:
        return self.membership.usable_pus()

    def home_locations(self) -> dict[int, str]:
        return self.membership.home_locations()

    def snapshot(self) -> list[WorkerInfo]:
        return self.membership.snapshot()

    # -- start -------------------------------------------------------------------------------
    def start(self, spark: Any, next_epoch: int) -> None:
        """Local mode: the one local worker. A cluster: wait until Spark's executors give the
        pipeline its PUs (a first start needs ``initial_pus`` of them; a restart one executor
        per worker that was alive, or at least one once ``rebind_wait_s`` has passed: a worker
        left without one is lost, and its PUs go to the others), then bind or create the
        workers and bootstrap what joined."""
        self.spark = spark
        cfg = self.config
        if cfg.is_local:
            self.membership.start([])
            return
        restarted = bool(self.membership.workers)
        alive = sum(1 for w in self.membership.snapshot() if w.alive and w.parallel_units)
        began = time.monotonic()
        deadline = began + cfg.executors_wait_s
        while True:
            seen = self._executors()
            offered = sum(cfg.parallel_units or max(e.cores, 1) for e in seen)
            if restarted:
                waited = time.monotonic() - began >= cfg.rebind_wait_s
                if seen and (len(seen) >= alive or waited):
                    break
            elif seen and offered >= cfg.initial_pus:
                break
            if time.monotonic() > deadline:
                raise ExecutorsMissing(
                    f"the master {cfg.spark_master} gave {len(seen)} executors ({offered} PUs) "
                    f"in {cfg.executors_wait_s:.0f}s; the pipeline starts on {cfg.initial_pus} "
                    f"PUs: start more Spark workers, or lower RESCALER_INITIAL_PUS"
                )
            log.info("waiting for executors: %d so far (%d PUs)", len(seen), offered)
            time.sleep(1.0)
        if restarted:  # each saved worker to the executor whose disk has its PUs' stores
            self.membership.start(
                seen,
                disks=self._disks(seen),
                store_roots={
                    pu: h.root for (_, pu), h in StoreHomes(cfg.pipeline_dir).load().items()
                },
            )
        else:
            self.membership.start(seen)
        for w in self.membership.snapshot():
            log.info(
                "worker %s: executor %s on %s, PUs %s%s",
                w.name,
                w.executor_id,
                w.host,
                list(w.parallel_units),
                "" if w.alive else " (no executor: lost)",
            )
        if self.membership.observe([], next_epoch, self._bootstrap, poll=False):
            log.info("workers bootstrapped at epoch %d", next_epoch)

    # -- at the barrier and while idle -----------------------------------------------------------
    def observe(self, epoch: int) -> None:
        """At the barrier, before any command is read: joins are bootstrapped and reported,
        gone workers reported."""
        if self.config.is_local:
            return
        seen = self._recent()
        if seen is not None and self.membership.observe(seen, epoch, self._bootstrap):
            self._on_changed(epoch)

    def executors_changed(self) -> bool:
        """An idle stream still notices a join, a loss or a notice within a second: force a
        barrier."""
        if self.config.is_local:
            return False
        seen = self._recent()
        if seen is None:
            return False
        workers = [w for w in self.membership.snapshot() if w.alive]
        known = {w.executor_id for w in workers}
        if {e.executor_id for e in seen} - self.membership.retired != known:
            return True
        noticed = {w.executor_id for w in workers if w.notice_at is not None}
        return any(
            e.decommissioning_since is not None
            for e in seen
            if e.executor_id in known and e.executor_id not in noticed
        )

    def lost_workers(self) -> list[str]:
        """Workers alive to the runner, with PUs, whose executor Spark no longer has: a loss
        the next barrier would find. While an epoch runs, their PUs' tasks only fail (their
        store is not where Spark retries them), so the runner ends the epoch at once."""
        if self.config.is_local:
            return []
        seen = self._recent()
        if seen is None:
            return []
        present = {e.executor_id for e in seen}
        return [
            w.name
            for w in self.membership.snapshot()
            # a worker that gave notice was drained of its vnodes: its exit is no loss to act on
            if w.alive and w.parallel_units and w.notice_at is None and w.executor_id not in present
        ]

    def decommission(self, command: Command, holding: set[int], epoch: int) -> str:
        """``worker.decommission``: drop a drained worker's PUs (``holding``: the PUs that still
        own or are about to receive vnodes, which refuse it). Its executor is then the worker
        provider's to stop (the control plane asks it once the runner reports the worker gone);
        until then Spark may still run other PUs' tasks on it."""
        name = str(command.payload.get("worker", ""))
        worker = self.membership.decommission(name, holding)
        self._on_changed(epoch)
        return (
            f"worker {name} decommissioned: parallel units {list(worker.parallel_units)} "
            f"dropped; executor {worker.executor_id} is left to the worker provider"
        )

    # -- internals ---------------------------------------------------------------------------
    def _disks(self, seen: list[ExecutorSeen]) -> dict[str, str]:
        """Executor id -> its directory of the pipeline, as a task on each says (one task per
        executor, each preferring its own; one that ran elsewhere tells of where it ran)."""
        answers = run_tasks(
            self.spark,
            [DiskProbe(str(self.config.pipeline_dir)) for _ in seen],
            probe_disk,
            "rescaler: which executor has which disk",
            locations=[location(e.host, e.executor_id) for e in seen],
        )
        return {a["executor"]: a["root"] for a in answers if a["root"]}

    def _executors(self) -> list[ExecutorSeen]:
        return spark_executors(self.spark)

    def _recent(self) -> list[ExecutorSeen] | None:
        """Spark's executors, read again only when the last read is older than
        ``executor_poll_s``; None when the JVM cannot answer now (the next call reads again)."""
        with self._lock:
            now = time.monotonic()
            cached = self._seen
            if cached is not None and now - cached[0] < self.config.executor_poll_s:
                return cached[1]
            try:
                seen = self._executors()
            except Exception:  # the JVM is busy or going away
                log.warning("could not read Spark's executors", exc_info=True)
                return None
            self._seen = (now, seen)
            return seen

    def _bootstrap(self, pus: tuple[int, ...], epoch: int) -> None:
        """Make new PUs ready for vnodes: each stateful fragment's store exists (created empty),
        and the epoch and placement versions they join at are recorded beside it."""
        root = Path(self.config.pipeline_dir)
        placements = self._placements()
        # without Spark (the simulations) the tasks run here, standing in for their executors
        homes = self.membership.home_locations() if self.spark is not None else {}
        tasks = [
            BootstrapTask(
                str(root),
                self.config.backend,
                pu,
                tuple(sorted(placements)),
                executor_of(homes.get(pu, "")),
            )
            for pu in pus
        ]
        run_tasks(
            self.spark,
            tasks,
            bootstrap_pu,
            f"rescaler bootstrap of PUs {list(pus)}",
            locations=[homes.get(pu) for pu in pus],
        )
        record = {
            "epoch": epoch,
            "mapping_versions": {n: p.version for n, p in placements.items()},
        }
        directory = root / "bootstrap"
        directory.mkdir(parents=True, exist_ok=True)
        for pu in pus:
            (directory / f"pu-{pu}.json").write_text(json.dumps(record), "utf-8")
