"""The runner's workers: which Spark executor each one is, its parallel units, and whether they
are bootstrapped (docs/elastic-workers.md).

Spark-free: the runner feeds it the executors Spark lists (:func:`spark_executors`), the unit tests
feed it lists of their own. Local mode has one worker, ``local-0``, the driver's JVM. On a
standalone (or Kubernetes) master every executor is a worker; each gets ``pus_per_executor`` new
PUs (by default its cores), numbered after every PU ever given, and never reused.

The workers are saved in the state directory, so a runner that restarts (a new Spark application,
whose executors have new ids) finds its PUs again: each saved worker is bound to one of the new
executors (same host first), and a saved worker left without one is reported gone (``alive``
false: the control plane marks it lost). A worker's name (``w1``, ``w2``…) outlives its executor.

A lost worker's PUs, at a barrier or at a start, go to live workers (:meth:`Membership._adopt`):
a PU's number and vnodes stay, its home executor changes (docs/elastic-workers.md, "Loss").
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from workers.control import WorkerInfo
from workers.pinning import location

log = logging.getLogger("workers.membership")

LOCAL_WORKER = "local-0"
DRIVER = "driver"


class DecommissionRefused(Exception):
    """A worker cannot be decommissioned now; the message says why."""


@dataclass(frozen=True)
class ExecutorSeen:
    """One executor as Spark lists it."""

    executor_id: str
    host: str
    cores: int
    # Spark is decommissioning it since then (unix seconds): its worker gave notice
    decommissioning_since: float | None = None


def spark_executors(spark: Any) -> list[ExecutorSeen]:
    """The application's live executors, from the driver's status store (kept by Spark's own
    listener, with or without the UI), each with the time Spark began decommissioning it, if it
    did (the task scheduler's own record). Local mode lists only the driver, the executor."""
    sc = spark.sparkContext
    jsc = sc._jsc.sc()
    summaries = jsc.statusStore().executorList(True)
    scheduler = jsc.taskScheduler()
    seen = []
    for i in range(summaries.size()):
        s = summaries.apply(i)
        executor_id = str(s.id())
        if executor_id == DRIVER and not sc.master.startswith("local"):
            continue  # the driver runs no task on a cluster
        host = str(s.hostPort()).rsplit(":", 1)[0]
        seen.append(
            ExecutorSeen(
                executor_id, host, int(s.totalCores()), _decommissioning(scheduler, executor_id)
            )
        )
    return sorted(seen, key=lambda e: (len(e.executor_id), e.executor_id))


def _decommissioning(scheduler: Any, executor_id: str) -> float | None:
    """Since when Spark decommissions the executor (unix seconds), or None; a scheduler that
    cannot say (another Spark's internals) is read as no notice, never as no executor."""
    try:
        state = scheduler.getExecutorDecommissionState(executor_id)
        return float(state.get().startTime()) / 1000 if state.isDefined() else None
    except Exception:
        log.debug("no decommission state for executor %s", executor_id, exc_info=True)
        return None


class Membership:
    """The workers, their PUs, and the barrier-time changes to them."""

    FILE = "workers.json"

    def __init__(
        self,
        pipeline_dir: Path,
        *,
        local: bool,
        local_pus: int,
        pus_per_executor: int | None = None,
        host: str = "localhost",
    ) -> None:
        self.path = Path(pipeline_dir) / self.FILE
        self.local = local
        self.local_pus = local_pus
        self.pus_per_executor = pus_per_executor
        self.host = host
        self._lock = threading.Lock()
        self.workers: dict[str, WorkerInfo] = {}
        self.next_pu = 0
        # executors of decommissioned workers: never taken for new workers while Spark kills them
        self.retired: set[str] = set()
        self._load()

    # -- persistence -------------------------------------------------------------------------
    def _load(self) -> None:
        if not self.path.exists():
            return
        data = json.loads(self.path.read_text("utf-8"))
        self.workers = {w["name"]: WorkerInfo.from_json(w) for w in data["workers"]}
        self.next_pu = int(data["next_pu"])
        self.retired = set(data.get("retired", []))

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        data = {
            "next_pu": self.next_pu,
            "retired": sorted(self.retired),
            "workers": [w.to_json() for w in self.workers.values()],
        }
        tmp.write_text(json.dumps(data, indent=1), "utf-8")
        os.replace(tmp, self.path)

    # -- views -------------------------------------------------------------------------------
    def snapshot(self) -> list[WorkerInfo]:
        with self._lock:
            return list(self.workers.values())

    def worker_pus(self) -> dict[str, list[int]]:
        """Every worker's PUs, gone ones included (their PUs may still own vnodes)."""
        with self._lock:
            return {w.name: list(w.parallel_units) for w in self.workers.values()}

    def usable_pus(self) -> set[int]:
        """The PUs that may be given vnodes: alive, bootstrapped workers' PUs."""
        with self._lock:
            return {
                pu
                for w in self.workers.values()
                if w.alive and w.bootstrapped_epoch >= 0
                for pu in w.parallel_units
            }

    def home_locations(self) -> dict[int, str]:
        """PU -> its home executor as Spark's preferred location, for the PUs of live workers
        (``workers.pinning``; local mode has one executor and none)."""
        if self.local:
            return {}
        with self._lock:
            return {
                pu: location(w.host, w.executor_id)
                for w in self.workers.values()
                if w.alive
                for pu in w.parallel_units
            }

    def executor_of_pu(self) -> dict[int, str]:
        with self._lock:
            return {pu: w.executor_id for w in self.workers.values() for pu in w.parallel_units}

    # -- changes -----------------------------------------------------------------------------
    def _new_worker(self, name: str, executor: ExecutorSeen) -> WorkerInfo:
        count = self.pus_per_executor or max(executor.cores, 1)
        pus = tuple(range(self.next_pu, self.next_pu + count))
        self.next_pu += count
        return WorkerInfo(
            name=name,
            executor_id=executor.executor_id,
            host=executor.host,
            cores=executor.cores,
            parallel_units=pus,
            alive=True,
        )

    def _next_name(self) -> str:
        numbers = [int(n[1:]) for n in self.workers if n.startswith("w") and n[1:].isdigit()]
        return f"w{max(numbers, default=0) + 1}"

    def start(
        self,
        executors: Iterable[ExecutorSeen],
        *,
        disks: Mapping[str, str] | None = None,
        store_roots: Mapping[int, str] | None = None,
    ) -> None:
        """At the runner's start: the local worker, or the saved workers bound to the
        application's executors (a new application has new executor ids). A saved worker takes
        the executor on its host whose directory holds its PUs' stores, where that is known (``disks``:
        executor id -> its directory of the pipeline; ``store_roots``: PU -> the directory its
        store was last in), else one on its host, else any left: several workers of one host
        may each have a disk of their own, and their executors' ids and start order say
        nothing of which is which."""
        with self._lock:
            if self.local:
                local = self.workers.get(LOCAL_WORKER)
                pus = local.parallel_units if local else tuple(range(self.local_pus))
                self.workers = {
                    LOCAL_WORKER: WorkerInfo(
                        name=LOCAL_WORKER,
                        executor_id=DRIVER,
                        host=self.host,
                        cores=self.local_pus,
                        parallel_units=pus,
                        alive=True,
                        bootstrapped_epoch=0,
                    )
                }
                self.next_pu = max(self.next_pu, max(pus, default=-1) + 1)
                self.save()
                return
            self.retired.clear()  # a new application: executor ids start again
            free = list(executors)
            # the workers alive when the runner stopped come first: a worker lost before it
            # takes an executor only if one is left (it comes back then, its stores as they were)
            saved = sorted(
                (w for w in self.workers.values() if w.parallel_units), key=lambda w: not w.alive
            )
            bound: dict[str, ExecutorSeen] = {}
            disks, roots = disks or {}, store_roots or {}
            for same in (  # its stores' disk first, then the same machine, then any left
                # a disk is a directory on a host: hosts may all use one path (docker-compose's
                # workers do), and the workers of one host each a path of their own
                lambda w, e: (
                    e.host == w.host
                    and disks.get(e.executor_id, "")
                    in {roots[pu] for pu in w.parallel_units if pu in roots}
                ),
                lambda w, e: e.host == w.host,
                lambda w, e: True,
            ):
                for w in saved:
                    match = next((e for e in free if same(w, e)), None)
                    if w.name not in bound and match is not None:
                        bound[w.name] = match
                        free.remove(match)
            for w in saved:
                e = bound.get(w.name)
                if e is None:  # its machine did not come back: lost, its PUs adopted below
                    self.workers[w.name] = replace(w, executor_id="", alive=False)
                    continue
                # its stores exist already: bootstrapped as it was
                self.workers[w.name] = replace(
                    w, executor_id=e.executor_id, host=e.host, cores=e.cores, alive=True
                )
            for w in saved:
                if w.name not in bound:
                    self._adopt(w.name)
            for w in list(self.workers.values()):  # an executor id of the old application
                if w.name not in bound and w.executor_id:
                    self.workers[w.name] = replace(w, executor_id="", alive=False)
            for e in free:
                name = self._next_name()
                self.workers[name] = self._new_worker(name, e)
            self.save()

    def observe(
        self,
        executors: Iterable[ExecutorSeen],
        epoch: int,
        bootstrap: Callable[[tuple[int, ...], int], None],
        *,
        poll: bool = True,
    ) -> bool:
        """At the barrier of ``epoch``: a new executor becomes a worker whose PUs are bootstrapped
        now (``bootstrap(pus, epoch)`` creates their stores); a worker whose executor is gone is
        marked not alive. ``poll=False``: only bootstrap the workers that are not yet. Returns
        whether anything changed (the runner then reports its workers)."""
        if self.local:
            return False
        changed = False
        with self._lock:
            if poll:
                changed = self._diff(list(executors))
            pending = [w for w in self.workers.values() if w.alive and w.bootstrapped_epoch < 0]
        for w in pending:
            bootstrap(w.parallel_units, epoch)
            with self._lock:
                self.workers[w.name] = replace(self.workers[w.name], bootstrapped_epoch=epoch)
            changed = True
        if changed:
            with self._lock:
                self.save()
        return changed

    def _diff(self, executors: list[ExecutorSeen]) -> bool:
        changed = False
        by_executor = {w.executor_id: w for w in self.workers.values() if w.alive}
        present = {e.executor_id: e for e in executors}
        gone = []
        for w in by_executor.values():
            if w.executor_id not in present:
                log.warning("worker %s (executor %s) is gone", w.name, w.executor_id)
                self.workers[w.name] = replace(w, alive=False)
                gone.append(w.name)
                changed = True
                continue
            since = present[w.executor_id].decommissioning_since
            if since is not None and w.notice_at is None:
                log.warning(
                    "worker %s (executor %s) gave notice: Spark is decommissioning it",
                    w.name,
                    w.executor_id,
                )
                self.workers[w.name] = replace(w, notice_at=since)
                changed = True
        for e in executors:
            if e.executor_id in by_executor or e.executor_id in self.retired:
                continue
            name = self._next_name()
            worker = self._new_worker(name, e)
            self.workers[name] = worker
            log.info(
                "executor %s on %s joined as worker %s with PUs %s",
                e.executor_id,
                e.host,
                name,
                list(worker.parallel_units),
            )
            changed = True
        for name in gone:
            self._adopt(name)
        return changed

    def _adopt(self, name: str) -> None:
        """The PUs of lost worker ``name`` move to the live workers: each to one on the same
        host if there is one (the executors of a host share its directory, where the stores
        may still be), else to the one with the fewest PUs then (the first by name on a tie);
        a bootstrapped worker that has no notice to leave. A PU keeps its number and its
        vnodes; only its home executor changes, where its store is found, or else rebuilt from
        the durable copy (``StoreLost``, the runner's rebuild). With no such worker the PUs stay
        where they are, homeless (Spark runs their tasks anywhere)."""
        lost = self.workers[name]
        moved: dict[str, list[int]] = {}
        for pu in lost.parallel_units:
            takers = [
                w
                for w in self.workers.values()
                if w.alive and w.bootstrapped_epoch >= 0 and w.notice_at is None
            ]
            if not takers:
                break
            taker = min(
                takers,
                key=lambda w: (w.host != lost.host, len(w.parallel_units), len(w.name), w.name),
            )
            self.workers[taker.name] = replace(taker, parallel_units=(*taker.parallel_units, pu))
            moved.setdefault(taker.name, []).append(pu)
        if not moved:
            return
        kept = tuple(pu for pu in lost.parallel_units if all(pu not in m for m in moved.values()))
        self.workers[name] = replace(lost, parallel_units=kept)
        for taker_name, pus in moved.items():
            log.warning(
                "worker %s is lost: its PUs %s go to worker %s (executor %s), whose executor finds "
                "their stores or rebuilds them from the durable copy",
                name,
                pus,
                taker_name,
                self.workers[taker_name].executor_id,
            )

    def decommission(self, name: str, holding: set[int]) -> WorkerInfo:
        """Drop a drained worker: ``holding`` is every PU that still runs a fragment or owns a
        vnode. Returns the worker (its executor is the runner's to kill); idempotent."""
        with self._lock:
            w = self.workers.get(name)
            if w is None:
                raise DecommissionRefused(
                    f"no worker {name!r}; workers: {', '.join(sorted(self.workers))}"
                )
            if self.local:
                raise DecommissionRefused(
                    "local mode has one worker, the driver's JVM: it cannot be decommissioned"
                )
            busy = sorted(set(w.parallel_units) & holding)
            if busy:
                raise DecommissionRefused(
                    f"worker {name}'s parallel units {busy} still run a fragment: drain it first"
                )
            del self.workers[name]
            self.retired.add(w.executor_id)
            self.save()
            return w
