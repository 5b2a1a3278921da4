"""A randomized soak over the real stack (issue 24): operations, load and faults for a chosen
duration, from a seeded schedule, then every operation final and every key equal to the oracle.

The stack is this machine's, all of it private to the run (nothing shared is restarted):

* a Postgres cluster and a Redis server of its own on free ports (``tests/integration/services.py``),
  which the faults restart; the sink's table is in a throwaway database on the machine's Postgres
  (never restarted here), dropped at the end;
* a Spark standalone master and ``spark-class`` workers of one core each (``workers/provider/``),
  the worker provider ``local`` so that "add worker" and a drain's release really start and stop
  them; each worker is a host with a disk of its own for its stores (``RESCALER_LOCAL_DISKS=
  private``), the durable location a directory off the tmpfs, a snapshot every 30 s, and losing
  a host (kill -9 of its worker, its disk deleted) is a fault;
* daphne on a fixed free port, two Celery workers and the runner (``manage.py run_pipeline``,
  wordcount on the generator at a steady rate), as in ``tests/integration/stack.py``;
* ``STATE_DIR`` on a small tmpfs, so that a "disk full" fault is a real ENOSPC.

Pieces, each testable alone (``tests/unit/test_bench_soak.py`` covers the pure ones):

1. **the schedule** (``make_schedule``): pure; a seed, a duration and a profile give the timed
   operations (live at every granularity, stop-start, cancels at random moments), worker actions
   (add, cordon then uncordon, drain, notice) and faults (at least ``faults_per_minute`` in every
   minute, kinds dealt from a shuffled deck so that a full run has every kind). Choices that depend
   on the live cluster (which PU, which worker) use the event's own seed (``plan_change``,
   ``pick_worker``), so a replay with ``--seed`` makes the same choices from the same cluster;
2. **the stack** (``Stack``): start, stop, kill -9 and restart each process and service;
3. **the load** (``Reader``, ``WsClient``): API readers recording latency and status with
   timestamps; websocket clients (``/ws/cluster/`` and ``/ws/operations/<id>/``) recording the last
   status each saw per operation, re-reading the API on every (re)connect as docs/api.md says a
   client must;
4. **the final check** (``Soak.finish``): every operation final, the runner stopped cleanly, the
   state (key by key, on the PU its vnode maps to) and the Postgres sink equal to the oracle;
5. **the report** (``build_report``): JSON and a PNG timeline beside it, a table on stdout; the
   goals are measured, not asserted.

    .venv/bin/python bench/soak.py                  # 30 minutes, a random seed (printed)
    .venv/bin/python bench/soak.py --seed 1234      # replay that schedule
    .venv/bin/python bench/soak.py --quick          # the 2-minute profile (the suite's)
    .venv/bin/python bench/soak.py --seed 7 --print-schedule   # the schedule only, nothing starts

Needs root (the tmpfs mount), Java, PostgreSQL's server programs, redis-server and the machine's
Postgres (the sink). Writes ``bench/results/soak.json`` (``--quick``: ``soak_quick.json``) and a
``.png`` beside it. Nothing starts when the 1-minute load average is above 1.0, unless
``--allow-load`` (the result is then marked invalid).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import errno
import hashlib
import json
import math
import os
import queue
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import _common as common  # noqa: E402

LOG_PREFIX = "soak"
PIPELINE = "wordcount"
FRAGMENT = "word_count"
SINK_TABLE = "soak_counts"
MB = 1024 * 1024

# workers.rescale.protocol.FINAL as the API spells it (a unit test checks that they agree)
FINAL_STATUSES = frozenset({"completed", "cancelled", "failed"})
UNFINISHED_STATUSES = ("pending", "running", "cancelling")

FAULT_KINDS = (
    "kill_runner",
    "kill_celery",
    "kill_daphne",
    "lose_spark_host",
    "restart_postgres",
    "restart_redis",
    "disk_full",
)
# how long each fault keeps its target down (seconds, drawn uniformly): the process is started
# again, the service brought back, the ballast removed after it. A lost Spark host (its worker
# killed, its disk deleted) is not started again: its PUs go to a live worker, their stores are
# rebuilt there, and the operator adds workers as an operator would.
FAULT_DOWN_S: Mapping[str, tuple[float, float]] = {
    "kill_runner": (3.0, 10.0),
    "kill_celery": (2.0, 8.0),
    "kill_daphne": (2.0, 6.0),
    "lose_spark_host": (0.0, 0.0),
    "restart_postgres": (4.0, 8.0),
    # up to longer than a driver's budget (RESCALER_DRIVE_BUDGET_S=20 in the stack), as in
    # tests/integration/test_service_restarts.py, so a driver's re-queue can fall in the outage
    "restart_redis": (5.0, 25.0),
    "disk_full": (10.0, 20.0),
}
# what an operation event asks for: live at each granularity, or stop-start
OPERATION_KINDS = ("fluid", "batched", "all_at_once", "custom", "stop_start")
# what a worker event does; "add" twice per deck so that the cluster grows back after drains
WORKER_ACTIONS = ("add", "add", "cordon", "drain", "notice")


def say(message: str) -> None:
    common.log(message, prefix=LOG_PREFIX)


class SoakError(Exception):
    """The soak cannot go on; the message says what failed and what to do."""


# == 1. the profile and the schedule (pure) =======================================================
@dataclass(frozen=True)
class Profile:
    name: str
    minutes: float
    operation_interval_s: float  # mean spacing of the scheduled operations
    worker_action_interval_s: float
    faults_per_minute: float  # at least this many in every whole minute (the fraction: a chance)
    cancel_share: float  # share of operations cancelled at a random moment
    readers: int
    reader_pause_s: tuple[float, float]  # each reader's pause between two requests
    ws_cluster_clients: int
    ws_operation_clients: int
    rows_per_epoch: int
    key_space: int
    trigger_interval_s: float
    vnodes: int
    spark_workers: int  # at the start
    max_workers: int  # "add worker" is skipped at this many workers in service
    state_tmpfs_mb: int
    operation_wait_s: float  # how long the operator waits for one operation to end
    final_wait_s: float  # how long the end waits for every operation to be final


FULL = Profile(
    name="full",
    minutes=30,
    operation_interval_s=15.0,
    worker_action_interval_s=120.0,
    faults_per_minute=1.0,
    cancel_share=0.25,
    readers=10,
    reader_pause_s=(0.5, 1.5),
    ws_cluster_clients=16,
    ws_operation_clients=4,
    rows_per_epoch=2_000,
    key_space=20_000,
    trigger_interval_s=1.0,
    vnodes=16,
    spark_workers=2,
    max_workers=3,
    state_tmpfs_mb=1024,
    operation_wait_s=600.0,
    final_wait_s=900.0,
)
QUICK = replace(
    FULL,
    name="quick",
    minutes=2,
    operation_interval_s=20.0,
    worker_action_interval_s=45.0,
    faults_per_minute=1.5,
    cancel_share=0.3,
    readers=4,
    ws_cluster_clients=4,
    ws_operation_clients=2,
    rows_per_epoch=1_000,
    key_space=2_000,
    state_tmpfs_mb=512,
    operation_wait_s=300.0,
    final_wait_s=600.0,
)
PROFILES = {p.name: p for p in (FULL, QUICK)}


@dataclass(frozen=True)
class OperationEvent:
    index: int
    at_s: float
    kind: str  # one of OPERATION_KINDS
    granularity: str | dict[str, int] | None  # the body's granularity (None: stop-start)
    cancel_after_s: float | None  # cancel this long after the request (None: never)
    seed: int  # for the run-time choice of PUs


@dataclass(frozen=True)
class WorkerEvent:
    index: int
    at_s: float
    action: str  # add, cordon, drain, notice
    uncordon_after_s: float | None  # cordon only
    granularity: str | None  # drain only
    seed: int


@dataclass(frozen=True)
class FaultEvent:
    index: int
    at_s: float
    kind: str  # one of FAULT_KINDS
    down_s: float
    seed: int


@dataclass(frozen=True)
class Schedule:
    seed: int
    duration_s: float
    profile: str
    fault_kinds: tuple[str, ...]
    operations: tuple[OperationEvent, ...]
    worker_actions: tuple[WorkerEvent, ...]
    faults: tuple[FaultEvent, ...]

    def actions(self) -> list[OperationEvent | WorkerEvent]:
        """The operator's events in time order (an operation before a worker action at a tie)."""
        events: list[OperationEvent | WorkerEvent] = [*self.operations, *self.worker_actions]
        return sorted(events, key=lambda e: (e.at_s, isinstance(e, WorkerEvent), e.index))

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "duration_s": self.duration_s,
            "profile": self.profile,
            "fault_kinds": list(self.fault_kinds),
            "operations": [asdict(e) for e in self.operations],
            "worker_actions": [asdict(e) for e in self.worker_actions],
            "faults": [asdict(e) for e in self.faults],
        }


class _Deck:
    """Deals kinds from a shuffled deck, reshuffled when empty: every kind comes once per deck,
    so a run long enough for one deck has every kind, in an order the seed decides."""

    def __init__(self, kinds: Sequence[str], rng: random.Random) -> None:
        if not kinds:
            raise ValueError("a deck needs at least one kind")
        self.kinds = list(kinds)
        self.rng = rng
        self.left: list[str] = []

    def draw(self) -> str:
        if not self.left:
            self.left = list(self.kinds)
            self.rng.shuffle(self.left)
        return self.left.pop()


def _granularity(kind: str, rng: random.Random) -> str | dict[str, int] | None:
    if kind == "stop_start":
        return None
    if kind == "custom":
        return {"vnodes_per_step": rng.randint(1, 8), "steps_in_flight": rng.randint(1, 4)}
    return kind


def make_schedule(
    seed: int,
    duration_s: float,
    profile: Profile,
    fault_kinds: Sequence[str] = FAULT_KINDS,
) -> Schedule:
    """The whole run's events from ``seed``: the same arguments give the same schedule.

    Faults: in every whole minute ``floor(faults_per_minute)`` faults (one more with the
    fractional part as its chance), each in its own slice of the minute, 5 s clear of the
    minute's edges, so two faults are never closer than the slices allow; a last part-minute
    shorter than 20 s gets none. Operations: one per ``operation_interval_s``, jittered within
    the first half of its interval. Worker actions: one per ``worker_action_interval_s``, the
    same way, starting half an interval in.
    """
    unknown = [k for k in fault_kinds if k not in FAULT_KINDS]
    if unknown:
        raise ValueError(f"unknown fault kinds {unknown}; choose from {', '.join(FAULT_KINDS)}")
    if duration_s <= 0:
        raise ValueError(f"the duration must be positive, not {duration_s}")
    rng = random.Random(seed)

    faults: list[FaultEvent] = []
    if fault_kinds:
        deck = _Deck(fault_kinds, rng)
        whole, frac = int(profile.faults_per_minute), profile.faults_per_minute % 1
        for minute in range(math.ceil(duration_s / 60)):
            start, end = minute * 60.0, min(duration_s, minute * 60.0 + 60.0)
            if end - start < 20:
                break
            n = whole + (1 if rng.random() < frac else 0)
            span = (end - start - 10) / max(n, 1)
            for i in range(n):
                lo = start + 5 + i * span
                kind = deck.draw()
                down_lo, down_hi = FAULT_DOWN_S[kind]
                faults.append(
                    FaultEvent(
                        index=len(faults),
                        at_s=round(rng.uniform(lo, lo + 0.8 * span), 1),
                        kind=kind,
                        down_s=round(rng.uniform(down_lo, down_hi), 1),
                        seed=rng.randrange(2**32),
                    )
                )

    operations: list[OperationEvent] = []
    kinds = _Deck(OPERATION_KINDS, rng)
    step = profile.operation_interval_s
    for i in range(max(1, int(duration_s // step))):
        kind = kinds.draw()
        cancel = rng.random() < profile.cancel_share
        operations.append(
            OperationEvent(
                index=i,
                at_s=round(3 + i * step + rng.uniform(0, step / 2), 1),
                kind=kind,
                granularity=_granularity(kind, rng),
                cancel_after_s=round(rng.uniform(0.5, 25.0), 1) if cancel else None,
                seed=rng.randrange(2**32),
            )
        )

    actions: list[WorkerEvent] = []
    deck = _Deck(WORKER_ACTIONS, rng)
    step = profile.worker_action_interval_s
    for i in range(int(duration_s // step)):
        action = deck.draw()
        actions.append(
            WorkerEvent(
                index=i,
                at_s=round(step / 2 + i * step + rng.uniform(0, step / 2), 1),
                action=action,
                uncordon_after_s=round(rng.uniform(5, 30), 1) if action == "cordon" else None,
                granularity=rng.choice(("fluid", "batched", "all_at_once"))
                if action == "drain"
                else None,
                seed=rng.randrange(2**32),
            )
        )
    return Schedule(
        seed=seed,
        duration_s=float(duration_s),
        profile=profile.name,
        fault_kinds=tuple(fault_kinds),
        operations=tuple(operations),
        worker_actions=tuple(e for e in actions if e.at_s < duration_s),
        faults=tuple(f for f in faults if f.at_s < duration_s),
    )


# == choices made against the live cluster (pure) ==================================================
IN_SERVICE = ("active", "cordoned")


@dataclass(frozen=True)
class WorkerView:
    name: str
    status: str
    alive: bool
    bootstrapped_epoch: int | None
    parallel_units: tuple[int, ...]


@dataclass(frozen=True)
class PuView:
    number: int
    worker: str
    alive: bool
    status: str


@dataclass(frozen=True)
class ClusterView:
    """What the operator needs of ``GET /api/v1/cluster``."""

    fragment_pus: tuple[int, ...]
    busy_with: str | None
    last_epoch: int
    runner_alive: bool
    workers: tuple[WorkerView, ...]
    pus: Mapping[int, PuView]

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> ClusterView:
        frags = [
            f
            for f in body.get("fragments", [])
            if f.get("name") == FRAGMENT and f.get("pipeline") == PIPELINE
        ]
        if not frags:
            raise SoakError(f"GET /api/v1/cluster has no fragment {PIPELINE}/{FRAGMENT} yet")
        pipelines = [p for p in body.get("pipelines", []) if p.get("name") == PIPELINE]
        return cls(
            fragment_pus=tuple(int(p) for p in frags[0]["parallel_units"]),
            busy_with=frags[0].get("busy_with"),
            last_epoch=int(pipelines[0]["last_epoch"]) if pipelines else -1,
            runner_alive=bool(pipelines[0]["runner_alive"]) if pipelines else False,
            workers=tuple(
                WorkerView(
                    name=str(w["name"]),
                    status=str(w["status"]),
                    alive=bool(w["alive"]),
                    bootstrapped_epoch=w.get("bootstrapped_epoch"),
                    parallel_units=tuple(int(p) for p in w["parallel_units"]),
                )
                for w in body.get("workers", [])
                if w.get("pipeline", PIPELINE) == PIPELINE
            ),
            pus={
                int(n): PuView(int(n), str(p["worker"]), bool(p["alive"]), str(p["status"]))
                for n, p in body.get("parallel_units", {}).items()
            },
        )

    def worker(self, name: str) -> WorkerView | None:
        return next((w for w in self.workers if w.name == name), None)

    def open_pus(self) -> list[int]:
        """PUs that may take vnodes: active, on an active, alive, bootstrapped worker."""
        out = []
        for number, pu in sorted(self.pus.items()):
            w = self.worker(pu.worker)
            if (
                pu.status == "active"
                and pu.alive
                and w is not None
                and w.status == "active"
                and w.alive
                and (w.bootstrapped_epoch is None or w.bootstrapped_epoch >= 0)
            ):
                out.append(number)
        return out

    def in_service(self) -> list[WorkerView]:
        return [w for w in self.workers if w.status in IN_SERVICE and w.alive]


@dataclass(frozen=True)
class Change:
    """One fragment's change for ``POST /api/v1/operations``."""

    shape: str  # scale_out, scale_in, migrate, repair
    added: tuple[int, ...]
    removed: tuple[int, ...]

    def body(self) -> dict[str, list[int]]:
        return {
            "added_parallel_units": list(self.added),
            "removed_parallel_units": list(self.removed),
        }


@dataclass(frozen=True)
class Skip:
    """Why an event did nothing (recorded, never silent)."""

    reason: str


def plan_change(view: ClusterView, rng: random.Random) -> Change | Skip:
    """The change an operation event asks for, from what the cluster is now.

    PUs of the fragment that are lost or removed come first: the change removes them (an
    operator's repair after a worker dies, docs/elastic-workers.md "Loss"), adding an open PU
    when no live one would be left. Otherwise one of scale out (one open PU not in the
    fragment), scale in (one of at least two live PUs) or migrate (both), at random.
    """
    in_fragment = set(view.fragment_pus)
    dead = sorted(pu for pu in in_fragment if pu not in view.pus or view.pus[pu].status != "active")
    live = sorted(in_fragment - set(dead))
    outside = [pu for pu in view.open_pus() if pu not in in_fragment]
    if dead:
        added = () if live else tuple(outside[:1])
        if not live and not added:
            return Skip(f"every PU of {FRAGMENT} is lost ({dead}) and no open PU is left")
        return Change("repair", added, tuple(dead))
    shapes = []
    if outside:
        shapes.append("scale_out")
    if len(live) >= 2:
        shapes.append("scale_in")
    if outside and live:
        shapes.append("migrate")
    if not shapes:
        return Skip(f"{FRAGMENT} is on {live} and no other PU is open")
    shape = rng.choice(shapes)
    if shape == "scale_out":
        return Change(shape, (rng.choice(outside),), ())
    if shape == "scale_in":
        return Change(shape, (), (rng.choice(live),))
    return Change(shape, (rng.choice(outside),), (rng.choice(live),))


def pick_worker(
    view: ClusterView, action: str, rng: random.Random, max_workers: int
) -> str | Skip | None:
    """The worker a worker event acts on (None: ``add``, which names none), or why none.

    Drain and notice only pick a worker while another one in service keeps an open PU, so the
    fragment always has somewhere to go (the API would refuse with drain_empties_fragment)."""
    in_service = view.in_service()
    if action == "add":
        if len(in_service) >= max_workers:
            return Skip(f"{len(in_service)} workers in service, the most this profile runs")
        return None
    if action == "cordon":
        candidates = [w.name for w in in_service if w.status == "active"]
    elif action in ("drain", "notice"):
        open_pus = set(view.open_pus())
        candidates = [
            w.name for w in in_service if len(in_service) >= 2 and open_pus - set(w.parallel_units)
        ]
    else:
        raise ValueError(f"unknown worker action {action!r}")
    if not candidates:
        return Skip(f"no worker to {action}: in service {[w.name for w in in_service]}")
    return rng.choice(sorted(candidates))


# == typed records between the pieces =============================================================
@dataclass(frozen=True)
class HttpSample:
    t: float  # seconds since the soak's start
    source: str  # reader, operator, ws-resync
    method: str
    path: str
    status: int  # 0: no HTTP answer (connection refused or reset, timeout)
    latency_s: float
    error: str = ""


@dataclass(frozen=True)
class Window:
    kind: str
    start: float
    end: float


@dataclass
class FaultRecord:
    index: int
    kind: str
    scheduled_at: float
    started_at: float | None = None
    ended_at: float | None = None
    down_s: float = 0.0
    target: str = ""
    detail: str = ""
    error: str = ""


@dataclass
class OperationRecord:
    origin: str  # schedule, drain, notice
    index: int
    kind: str
    at: float
    granularity: Any = None
    change: dict[str, Any] | None = None
    http_status: int = 0
    operation_id: str | None = None
    refused_code: str = ""
    refused_detail: str = ""
    skipped: str = ""
    cancel_at: float | None = None
    cancel_http_status: int | None = None
    final_status: str | None = None
    finished_at: float | None = None
    error_code: str = ""
    outcome: str = ""


@dataclass
class WorkerActionRecord:
    index: int
    action: str
    at: float
    worker: str | None = None
    http_status: int = 0
    code: str = ""
    detail: str = ""
    operation_id: str | None = None


@dataclass(frozen=True)
class UnexpectedExit:
    name: str
    t: float
    returncode: int
    log_tail: str


@dataclass
class WsClientResult:
    name: str
    kind: str  # cluster or operation
    connects: int = 0
    drops: int = 0  # connections refused or ended by the server (daphne down, Redis gone)
    last_error: str = ""
    messages: int = 0
    last_status: dict[str, str] = field(default_factory=dict)
    followed: list[str] = field(default_factory=list)  # operation clients only


@dataclass(frozen=True)
class Diff:
    """A key -> count map against the oracle's."""

    keys_expected: int
    keys_actual: int
    missing_keys: int
    extra_keys: int
    wrong_keys: int
    records_lost: int  # the counts the actual map lacks, summed over keys
    records_duplicated: int  # the counts it has too many, summed over keys
    stored_twice: int  # keys found in more than one store (I1)
    problems: tuple[str, ...]

    @property
    def exact(self) -> bool:
        return not (self.missing_keys or self.extra_keys or self.wrong_keys or self.stored_twice)


# == the report's arithmetic (pure) ================================================================
def count_diff(
    expected: Mapping[str, int], actual: Mapping[str, int], stored_twice: int = 0
) -> Diff:
    """Records lost and duplicated: per key the count short of the oracle's, and over it."""
    lost = sum(max(0, n - int(actual.get(k, 0))) for k, n in expected.items())
    duplicated = sum(max(0, int(n) - expected.get(k, 0)) for k, n in actual.items())
    missing = expected.keys() - actual.keys()
    extra = actual.keys() - expected.keys()
    wrong = [k for k in expected.keys() & actual.keys() if expected[k] != actual[k]]
    problems = [f"missing key {k!r}: expected {expected[k]}" for k in sorted(missing)[:5]]
    problems += [f"unexpected key {k!r} = {actual[k]}" for k in sorted(extra)[:5]]
    problems += [f"key {k!r}: expected {expected[k]}, got {actual[k]}" for k in sorted(wrong)[:5]]
    if stored_twice:
        problems.append(f"{stored_twice} keys are stored in more than one store")
    return Diff(
        keys_expected=len(expected),
        keys_actual=len(actual),
        missing_keys=len(missing),
        extra_keys=len(extra),
        wrong_keys=len(wrong),
        records_lost=lost,
        records_duplicated=duplicated,
        stored_twice=stored_twice,
        problems=tuple(problems),
    )


def in_any(t: float, windows: Iterable[Window]) -> bool:
    return any(w.start <= t <= w.end for w in windows)


def http_summary(
    samples: Sequence[HttpSample], windows: Sequence[Window], *, daphne_grace_s: float = 2.0
) -> dict[str, Any]:
    """5xx counts and the readers' latency.

    ``five_xx_outside_daphne_down`` is the goal's figure: every 5xx answered outside the windows
    in which daphne itself was down (from its kill until it answered again, plus
    ``daphne_grace_s``, as a request sent just before the kill can be answered by nothing else).
    ``five_xx_by_window`` says in which fault's window each 5xx fell (``none``: outside all).
    Read latency is over the readers' requests that got an HTTP answer outside daphne's
    downtime (``read_p99_ms_all``); the goal's ``read_p99_ms`` also leaves out Postgres's
    restarts, where a read waits for the database by design (``RESCALER_DB_WAIT_S``), and
    ``..._steady`` is outside every fault's window."""
    daphne = [
        Window(w.kind, w.start, w.end + daphne_grace_s) for w in windows if w.kind == "kill_daphne"
    ]
    five = [s for s in samples if s.status >= 500]
    attributed = [*daphne, *(w for w in windows if w.kind != "kill_daphne")]
    by_window: dict[str, int] = {}
    for s in five:
        kinds = sorted({w.kind for w in attributed if w.start <= s.t <= w.end}) or ["none"]
        for k in kinds:
            by_window[k] = by_window.get(k, 0) + 1
    postgres = [
        Window(w.kind, w.start, w.end + daphne_grace_s)
        for w in windows
        if w.kind == "restart_postgres"
    ]
    reads = [s for s in samples if s.source == "reader" and s.status and not in_any(s.t, daphne)]
    database_up = [s for s in reads if not in_any(s.t, postgres)]
    steady = [s for s in reads if not in_any(s.t, windows)]
    lat_all = [s.latency_s * 1000 for s in reads]
    lat = [s.latency_s * 1000 for s in database_up]
    lat_steady = [s.latency_s * 1000 for s in steady]
    return {
        "requests": len(samples),
        "reader_requests": sum(1 for s in samples if s.source == "reader"),
        "no_answer": sum(1 for s in samples if s.status == 0),
        "no_answer_outside_daphne_down": sum(
            1 for s in samples if s.status == 0 and not in_any(s.t, daphne)
        ),
        "five_xx": len(five),
        "five_xx_outside_daphne_down": sum(1 for s in five if not in_any(s.t, daphne)),
        "five_xx_by_window": dict(sorted(by_window.items())),
        "five_xx_samples": [asdict(s) for s in five if not in_any(s.t, daphne)][:20],
        "read_p50_ms": _round(common.percentile(lat, 50)),
        "read_p99_ms": _round(common.percentile(lat, 99)),
        "read_p99_ms_all": _round(common.percentile(lat_all, 99)),
        "read_p99_ms_steady": _round(common.percentile(lat_steady, 99)),
        "reads_measured": len(lat_all),
    }


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def stale_clients(
    clients: Sequence[WsClientResult], finals: Mapping[str, str]
) -> list[dict[str, Any]]:
    """Every (client, operation) whose last status seen is not the operation's final status.

    A cluster client is judged on every operation; an operation client on those it followed.
    An operation it never heard of counts too: it missed the final status."""
    out = []
    for c in clients:
        ops = finals.keys() if c.kind == "cluster" else [o for o in c.followed if o in finals]
        for op in sorted(ops):
            seen = c.last_status.get(op)
            if seen != finals[op]:
                out.append(
                    {"client": c.name, "operation_id": op, "seen": seen, "final": finals[op]}
                )
    return out


def operations_summary(
    api_operations: Sequence[Mapping[str, Any]], records: Sequence[OperationRecord]
) -> dict[str, Any]:
    """What became of every operation, by the API's word (the source of truth), joined with
    what the soak asked for: tracked ones, and those the API has that no record names (a
    request whose answer was lost, a drain a notice started later)."""
    by_status: dict[str, int] = {}
    failed = []
    unfinished = []
    for op in api_operations:
        status = str(op["status"])
        by_status[status] = by_status.get(status, 0) + 1
        if status == "failed":
            failed.append(
                {k: op.get(k) for k in ("operation_id", "error_code", "outcome", "strategy")}
            )
        if status not in FINAL_STATUSES:
            unfinished.append({"operation_id": op["operation_id"], "status": status})
    tracked = {r.operation_id for r in records if r.operation_id}
    refused: dict[str, int] = {}
    for r in records:
        if r.operation_id is None and r.refused_code:
            refused[r.refused_code] = refused.get(r.refused_code, 0) + 1
    return {
        "total": len(api_operations),
        "final": sum(n for s, n in by_status.items() if s in FINAL_STATUSES),
        "completed": by_status.get("completed", 0),
        "cancelled": by_status.get("cancelled", 0),
        "failed": by_status.get("failed", 0),
        "unfinished": len(unfinished),
        "unfinished_list": unfinished,
        "failed_list": failed,
        "by_status": dict(sorted(by_status.items())),
        "requested_by_the_soak": sum(1 for r in records if r.operation_id),
        "untracked": sum(1 for op in api_operations if op["operation_id"] not in tracked),
        "refused": dict(sorted(refused.items())),
        "skipped": sum(1 for r in records if r.skipped),
        "cancels_requested": sum(1 for r in records if r.cancel_http_status is not None),
        "cancels_too_late": sum(1 for r in records if r.cancel_http_status == 409),
        "by_kind": _count(r.kind for r in records if r.operation_id),
    }


def _count(items: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        out[item] = out.get(item, 0) + 1
    return dict(sorted(out.items()))


def faults_summary(records: Sequence[FaultRecord], duration_s: float) -> dict[str, Any]:
    injected = [r for r in records if r.started_at is not None and not r.error]
    return {
        "injected": len(injected),
        "by_kind": _count(r.kind for r in injected),
        "failed_to_inject": [
            {"index": r.index, "kind": r.kind, "error": r.error} for r in records if r.error
        ],
        "per_minute": round(len(injected) / (duration_s / 60), 2) if duration_s else None,
    }


GOALS_FULL_MINUTES = 30


def goals(report: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Issue 24's goals, each with its value and whether it was met; never asserted here."""
    ops = report["operations"]
    http = report["http"]
    ver = report["verification"]
    state, sink = ver.get("state") or {}, ver.get("sink") or {}
    lost = (state.get("records_lost") or 0) + (sink.get("records_lost") or 0)
    dup = (state.get("records_duplicated") or 0) + (sink.get("records_duplicated") or 0)
    p99 = http.get("read_p99_ms")
    minutes = report["parameters"]["minutes"]

    def goal(value: Any, met: bool) -> dict[str, Any]:
        return {"value": value, "met": met}

    return {
        "duration_ge_30_min": goal(minutes, minutes >= GOALS_FULL_MINUTES),
        "faults_ge_1_per_min": goal(
            report["faults"]["per_minute"], (report["faults"]["per_minute"] or 0) >= 1
        ),
        "operations_ge_60": goal(ops["final"], ops["final"] >= 60),
        "records_lost_0": goal(lost, lost == 0 and bool(state)),
        "records_duplicated_0": goal(dup, dup == 0 and bool(state)),
        "operations_unfinished_0": goal(ops["unfinished"], ops["unfinished"] == 0),
        "five_xx_0_outside_daphne_down": goal(
            http["five_xx_outside_daphne_down"], http["five_xx_outside_daphne_down"] == 0
        ),
        "read_p99_le_300ms": goal(p99, p99 is not None and p99 <= 300),
        "stale_ws_clients_0": goal(
            report["websockets"]["clients_stale"], report["websockets"]["clients_stale"] == 0
        ),
        # a process that exits when no fault made it is a failure of the run (a Celery worker
        # that died when Redis restarted): the supervisor starts it again only so that the rest
        # of the run is still measured
        "unexpected_exits_0": goal(len(report["unexpected_exits"]), not report["unexpected_exits"]),
    }


# == 3. load: HTTP ================================================================================
class Clock:
    """Seconds since the soak's start (monotonic), shared by every record."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 3)


class HttpLog:
    """Every API call of the run, from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.samples: list[HttpSample] = []

    def add(self, sample: HttpSample) -> None:
        with self._lock:
            self.samples.append(sample)

    def snapshot(self) -> list[HttpSample]:
        with self._lock:
            return list(self.samples)

    def clear(self) -> None:
        with self._lock:
            self.samples.clear()


@dataclass(frozen=True)
class ApiResponse:
    status: int  # 0: no HTTP answer
    body: Any
    error: str = ""

    @property
    def code(self) -> str:
        """The API's refusal code (docs/api.md, "Errors"), or the error without an answer."""
        if isinstance(self.body, dict) and "code" in self.body:
            return str(self.body["code"])
        return self.error or (f"http_{self.status}" if self.status >= 400 else "")


class Api:
    """The REST API through daphne, with the soak user's token; every call is logged."""

    def __init__(self, base_url: str, token: str, log: HttpLog, clock: Clock) -> None:
        self.base_url = base_url
        self.token = token
        self.log = log
        self.clock = clock

    def call(
        self, method: str, path: str, body: Any = None, *, source: str, timeout: float = 15.0
    ) -> ApiResponse:
        request = urllib.request.Request(
            self.base_url + path,
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Token {self.token}", "Content-Type": "application/json"},
        )
        t, started = self.clock.now(), time.perf_counter()
        status, data, error = 0, None, ""
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:  # loopback only
                status, raw = answer.status, answer.read()
        except urllib.error.HTTPError as exc:
            status = exc.code
            try:
                raw = exc.read()
            except (OSError, http_client_errors()):
                raw = b""
        except (OSError, http_client_errors()) as exc:
            raw, error = b"", f"{type(exc).__name__}: {exc}"
        latency = time.perf_counter() - started
        if raw:
            try:
                data = json.loads(raw)
            except ValueError:
                data = raw[:200].decode(errors="replace")
        self.log.add(HttpSample(t, source, method, path.split("?")[0], status, latency, error))
        return ApiResponse(status, data, error)

    def get(self, path: str, *, source: str) -> ApiResponse:
        return self.call("GET", path, source=source)

    def post(self, path: str, body: Any, *, source: str) -> ApiResponse:
        return self.call("POST", path, body if body is not None else {}, source=source)

    def cluster(self, *, source: str = "operator") -> ClusterView | None:
        answer = self.get("/api/v1/cluster", source=source)
        if answer.status != 200:
            return None
        try:
            return ClusterView.from_json(answer.body)
        except SoakError:
            return None

    def operations(self, *, source: str = "operator") -> list[dict[str, Any]] | None:
        """Every operation (newest first), or None when the API did not answer."""
        answer = self.get("/api/v1/operations?page_size=500", source=source)
        if answer.status != 200:
            return None
        results: list[dict[str, Any]] = answer.body["results"]
        if answer.body.get("next"):
            raise SoakError("more than 500 operations: page through GET /api/v1/operations")
        return results


def http_client_errors() -> type[Exception]:
    """What http.client raises on a connection that dies mid-answer (not an OSError)."""
    import http.client

    return http.client.HTTPException


READ_PATHS = (
    "/api/v1/cluster",
    "/api/v1/operations?page_size=20",
    "/api/v1/workers",
    "/api/v1/audit?page_size=20",
)


class Reader(threading.Thread):
    """One API reader: a GET, a pause, the next; every answer logged with its latency."""

    def __init__(
        self,
        index: int,
        api: Api,
        stop: threading.Event,
        pause_s: tuple[float, float],
        seed: int,
        latest_operation: Callable[[], str | None],
    ) -> None:
        super().__init__(name=f"reader-{index}", daemon=True)
        self.api, self.stop, self.pause_s = api, stop, pause_s
        self.rng = random.Random(seed)
        self.latest_operation = latest_operation

    def run(self) -> None:
        while not self.stop.is_set():
            op = self.latest_operation()
            paths = [*READ_PATHS, *([f"/api/v1/operations/{op}"] if op else [])]
            self.api.get(self.rng.choice(paths), source="reader")
            self.stop.wait(self.rng.uniform(*self.pause_s))


# == 3. load: websockets ==========================================================================
# The venv's websocket client library is autobahn on Twisted, whose reactor is process-global
# and cannot be restarted once stopped; every other piece of the soak is a plain thread. So this
# client is RFC 6455 over a blocking socket, one thread per client: the handshake, text frames
# in, ping/pong and close, nothing else (no extensions, no binary messages). Its framing is
# unit-tested (tests/unit/test_bench_soak.py).
WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


def ws_accept(key: str) -> str:
    """The ``Sec-WebSocket-Accept`` a server must answer to ``key``."""
    return base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()


def ws_encode(opcode: int, payload: bytes, mask: bytes) -> bytes:
    """One final frame from the client (always masked, as RFC 6455 requires)."""
    if len(mask) != 4:
        raise ValueError("a mask is 4 bytes")
    head = bytearray([0x80 | opcode])
    n = len(payload)
    if n < 126:
        head.append(0x80 | n)
    elif n < 1 << 16:
        head.append(0x80 | 126)
        head += n.to_bytes(2, "big")
    else:
        head.append(0x80 | 127)
        head += n.to_bytes(8, "big")
    return bytes(head) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


@dataclass(frozen=True)
class WsFrame:
    fin: bool
    opcode: int
    payload: bytes


def ws_decode(buffer: bytes) -> tuple[WsFrame | None, int]:
    """The first frame in ``buffer`` and the bytes it takes; (None, 0) until it is whole."""
    if len(buffer) < 2:
        return None, 0
    fin, opcode = bool(buffer[0] & 0x80), buffer[0] & 0x0F
    masked, n = bool(buffer[1] & 0x80), buffer[1] & 0x7F
    pos = 2
    if n == 126:
        if len(buffer) < 4:
            return None, 0
        n, pos = int.from_bytes(buffer[2:4], "big"), 4
    elif n == 127:
        if len(buffer) < 10:
            return None, 0
        n, pos = int.from_bytes(buffer[2:10], "big"), 10
    mask = b""
    if masked:
        if len(buffer) < pos + 4:
            return None, 0
        mask, pos = buffer[pos : pos + 4], pos + 4
    if len(buffer) < pos + n:
        return None, 0
    payload = buffer[pos : pos + n]
    if masked:
        payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return WsFrame(fin, opcode, payload), pos + n


class WsClosed(Exception):
    """The connection ended (closed, reset, refused); the client reconnects."""


def ws_status_update(message: Mapping[str, Any]) -> tuple[str, str] | None:
    """(operation id, status) an event says, or None. Only events that carry the operation's
    own status count: ``operation.requested`` and ``operation.finished`` (its summary), and
    ``operation.cancelling``; a progress event's ``status`` is the runner's report, not the
    operation's (docs/api.md, "Websocket events")."""
    kind = message.get("type")
    op = message.get("operation_id")
    if not isinstance(op, str):
        return None
    if kind in ("operation.requested", "operation.finished") and "status" in message:
        return op, str(message["status"])
    if kind == "operation.cancelling":
        return op, "cancelling"
    return None


class WsClient(threading.Thread):
    """One websocket client as a console page behaves: connect (session cookie, same Origin),
    re-read what it shows from the API, then apply events; on any close, reconnect with backoff
    and re-read again. ``kind`` ``cluster`` follows ``/ws/cluster/``; ``operation`` follows
    each operation the operator starts, one after another, on ``/ws/operations/<id>/``, until it
    has seen it final."""

    def __init__(
        self,
        name: str,
        kind: str,
        base_url: str,
        session_cookie: str,
        api: Api,
        stop: threading.Event,
        seed: int,
        follow: queue.Queue[str] | None = None,
    ) -> None:
        super().__init__(name=name, daemon=True)
        parts = urlsplit(base_url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.origin = f"http://{parts.netloc}"
        self.cookie = session_cookie
        self.api, self.stop = api, stop
        self.rng = random.Random(seed)
        self.follow = follow
        self.result = WsClientResult(name=name, kind=kind)
        self._lock = threading.Lock()

    # -- the connection --------------------------------------------------------------------
    def _connect(self, path: str) -> tuple[socket.socket, bytes]:
        key = base64.b64encode(secrets.token_bytes(16)).decode()
        sock = socket.create_connection((self.host, self.port), timeout=5)
        try:
            sock.sendall(
                (
                    f"GET {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                    "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                    f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                    f"Origin: {self.origin}\r\nCookie: sessionid={self.cookie}\r\n\r\n"
                ).encode()
            )
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = sock.recv(4096)
                if not chunk:
                    raise WsClosed("closed during the handshake")
                data += chunk
            head, rest = data.split(b"\r\n\r\n", 1)
            lines = head.decode("latin1").split("\r\n")
            if not lines[0].startswith("HTTP/1.1 101"):
                raise WsClosed(f"handshake refused: {lines[0]}")
            headers = {
                k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])
            }
            if headers.get("sec-websocket-accept") != ws_accept(key):
                raise WsClosed("handshake: wrong Sec-WebSocket-Accept")
        except BaseException:
            sock.close()
            raise
        sock.settimeout(1.0)
        return sock, rest

    def _messages(self, sock: socket.socket, buffer: bytes) -> Iterable[dict[str, Any]]:
        """Text messages until the connection ends (WsClosed) or the soak stops."""
        parts: list[bytes] = []
        while not self.stop.is_set():
            frame, used = ws_decode(buffer)
            if frame is None:
                try:
                    chunk = sock.recv(65536)
                except TimeoutError:
                    continue
                except OSError as exc:
                    raise WsClosed(str(exc)) from exc
                if not chunk:
                    raise WsClosed("the server closed the connection")
                buffer += chunk
                continue
            buffer = buffer[used:]
            if frame.opcode == OP_PING:
                sock.sendall(ws_encode(OP_PONG, frame.payload, secrets.token_bytes(4)))
            elif frame.opcode == OP_CLOSE:
                with contextlib.suppress(OSError):
                    sock.sendall(ws_encode(OP_CLOSE, frame.payload[:2], secrets.token_bytes(4)))
                raise WsClosed(f"close frame {frame.payload[:2].hex()}")
            elif frame.opcode in (OP_TEXT, OP_CONT):
                parts.append(frame.payload)
                if frame.fin:
                    text, parts = b"".join(parts), []
                    try:
                        message = json.loads(text)
                    except ValueError:
                        continue
                    if isinstance(message, dict):
                        yield message

    # -- what it shows ---------------------------------------------------------------------
    def _set(self, op: str, status: str) -> None:
        with self._lock:
            self.result.last_status[op] = status

    def _resync(self, op: str | None) -> None:
        """Re-read the statuses from the API (every reconnect, docs/api.md), as a page does:
        again every 2 s while the API does not answer (Postgres down), at most 30 s; events
        that arrive meanwhile wait in the socket and are applied after, in order."""
        for _ in range(15):
            if op is None:
                ops = self.api.operations(source="ws-resync")
                if ops is not None:
                    for row in ops:
                        self._set(str(row["operation_id"]), str(row["status"]))
                    return
            else:
                answer = self.api.get(f"/api/v1/operations/{op}", source="ws-resync")
                if answer.status == 200:
                    self._set(op, str(answer.body["status"]))
                    return
            if self.stop.wait(2.0):
                return
        self.result.last_error = "the API did not answer the re-read for 30 s"

    def _session(self, op: str | None) -> None:
        """One connection: until it closes, the soak stops or (operation) ``op`` is final."""
        path = "/ws/cluster/" if op is None else f"/ws/operations/{op}/"
        sock, rest = self._connect(path)
        self.result.connects += 1
        try:
            self._resync(op)
            if op is not None and self.result.last_status.get(op) in FINAL_STATUSES:
                return
            for message in self._messages(sock, rest):
                self.result.messages += 1
                update = ws_status_update(message)
                if update is not None and (op is None or update[0] == op):
                    self._set(*update)
                    if op is not None and update[1] in FINAL_STATUSES:
                        return
        finally:
            with contextlib.suppress(OSError):
                sock.close()

    def run(self) -> None:
        backoff = 0.5
        op: str | None = None
        while not self.stop.is_set():
            if self.follow is not None and op is None:
                try:
                    op = self.follow.get(timeout=1.0)
                except queue.Empty:
                    continue
                self.result.followed.append(op)
            try:
                self._session(op)
                backoff = 0.5
                if self.follow is not None and not self.stop.is_set():
                    op = None  # seen final: the next one
            except (WsClosed, OSError, SoakError) as exc:
                self.result.drops += 1
                self.result.last_error = f"{type(exc).__name__}: {exc}"
                self.stop.wait(backoff * self.rng.uniform(0.5, 1.5))
                backoff = min(backoff * 2, 5.0)

    def snapshot(self) -> WsClientResult:
        with self._lock:
            return replace(self.result, last_status=dict(self.result.last_status))


# == 2. the stack =================================================================================
@contextlib.contextmanager
def service_call(what: str) -> Any:
    """Errors of a service helper as SoakError. tests/integration/services.py reports a failure
    with ``pytest.fail``, whose exception is a BaseException; KeyboardInterrupt and SystemExit
    pass through."""
    try:
        yield
    except SoakError:
        raise
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:
        raise SoakError(f"{what}: {exc}") from exc


def with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + database, "", ""))


def default_sink_server() -> str:
    """The machine's Postgres (the sink's throwaway database goes there; it is never restarted
    by the soak): ``$DATABASE_URL``'s server, else the default local one."""
    url = os.environ.get("DATABASE_URL", "")
    return url if url.startswith("postgres") else "postgres://postgres@127.0.0.1:5432/postgres"


def make_processes(tmp: Path, port: int, env: Mapping[str, str], runner_args: Sequence[str]) -> Any:
    """``tests/integration/stack.py``'s ``Processes`` (Celery workers, kill, restart, logs kept
    across restarts), with daphne on a fixed port (the clients reconnect to the same URL after
    its restart) and the wordcount runner at a steady rate. Needs Django set up."""
    from tests.integration.stack import Processes

    class SoakProcesses(Processes):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(tmp)
            self.env.update(env)

        def runner(self, *source: str) -> subprocess.Popen[bytes]:
            return self.start(
                "runner", sys.executable, "manage.py", "run_pipeline", "--pipeline", PIPELINE,
                *runner_args, "--no-spark-ui",
            )  # fmt: skip

        def web(self) -> str:
            self.start(
                "web", sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                "rescaler.asgi:application",
            )  # fmt: skip
            return f"http://127.0.0.1:{port}"

    tmp.mkdir(parents=True, exist_ok=True)
    return SoakProcesses()


def answers(url: str) -> bool:
    """Whether anything answers HTTP at ``url`` (a 503 is an answer)."""
    try:
        urllib.request.urlopen(url, timeout=2)  # loopback only
    except urllib.error.HTTPError:
        return True
    except (OSError, http_client_errors()):
        return False
    return True


CELERY_WORKERS = ("celery-1", "celery-2")
WATCHED = ("web", *CELERY_WORKERS, "runner")


class Stack:
    """Every process and service of one soak, private to it; ``close`` stops all of it."""

    def __init__(
        self, run_dir: Path, profile: Profile, *, tmpfs: bool, sink_server: str | None
    ) -> None:
        from workers.provider import free_port

        self.dir = run_dir
        self.profile = profile
        self.state = run_dir / "state"
        self.workers_dir = run_dir / "spark_workers"  # off STATE_DIR's tmpfs (disk_full)
        self.use_tmpfs = tmpfs
        self.mounted = False
        self.sink_server = sink_server
        self.sink_url: str | None = None
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.token = ""
        self.session = ""
        self.pg: Any = None
        self.redis: Any = None
        self.master: Any = None
        self.provider: Any = None
        self.procs: Any = None

    # -- start -----------------------------------------------------------------------------
    def start(self) -> None:
        self._mount_state()
        from tests.integration.services import PrivatePostgres, PrivateRedis

        with service_call("starting the private Postgres (PostgreSQL's server programs)"):
            self.pg = PrivatePostgres()
            self.pg.start()
            self.pg.create_database("rescaler")
        with service_call("starting the private redis-server"):
            self.redis = PrivateRedis(self.dir / "redis.log")
            self.redis.start()
        say(f"private Postgres on port {self.pg.port}, Redis on {self.redis.port}")
        if self.sink_server:
            self.sink_url = self._create_sink_database(self.sink_server)
        # this process's Django (the soak user, the runner's stop, the epochs) uses the same
        os.environ.update(
            {
                "DJANGO_SETTINGS_MODULE": "rescaler.settings.test",
                "DATABASE_URL": self.pg.url("rescaler"),
                "TEST_REDIS_URL": self.redis.url,
                "STATE_DIR": str(self.state),
            }
        )
        migrate = subprocess.run(
            [sys.executable, "manage.py", "migrate", "--no-input", "-v", "0"],
            cwd=ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=300,
            check=False,
        )  # fmt: skip
        if migrate.returncode != 0:
            raise SoakError(f"migrate failed on the private Postgres:\n{migrate.stderr[-2000:]}")
        import django

        django.setup()
        self.token, self.session = self._soak_user()

        from workers.provider import LocalMaster, LocalProvider, ProviderError

        try:
            self.master = LocalMaster(self.dir / "spark")
            self.master.start()
            # the registry directory provider_from_env gives daphne's and Celery's provider, so
            # that the API's "add worker" and a drain's release see these workers too
            # each worker a host with a disk of its own (RESCALER_LOCAL_DISKS below, for the
            # workers Celery adds): a lost one loses its stores
            self.provider = LocalProvider(self.master.url, self.workers_dir, private_disks=True)
            for _ in range(self.profile.spark_workers):
                self.provider.add(1)
        except ProviderError as exc:
            raise SoakError(f"the Spark standalone cluster did not start: {exc}") from exc
        say(f"Spark master {self.master.url}, {self.profile.spark_workers} workers")

        p = self.profile
        env = {
            "DATABASE_URL": self.pg.url("rescaler"),
            "TEST_REDIS_URL": self.redis.url,
            "STATE_DIR": str(self.state),
            "SPARK_MASTER": self.master.url,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "RESCALER_WORKER_PROVIDER": "local",
            "RESCALER_PARALLEL_UNITS": "1",  # one PU per one-core worker
            "RESCALER_INITIAL_PUS": str(p.spark_workers),
            "RESCALER_VNODES": str(p.vnodes),
            # the durable location (off the small tmpfs): what a lost host's stores are rebuilt
            # from, a snapshot every 30 s and after each rescale, and the epochs since
            "RESCALER_RECOVERY_DIR": str(self.dir / "recovery"),
            "RESCALER_SNAPSHOT_EVERY": "30s",
            "RESCALER_LOCAL_DISKS": "private",
            # the workers' own files (executors' logs) too: the disk_full fault is the state's
            "RESCALER_LOCAL_WORKERS_DIR": str(self.workers_dir),
            "RESCALER_SINK": f"{self.sink_url}?table={SINK_TABLE}" if self.sink_url else "",
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PYTHONUNBUFFERED": "1",
        }
        runner_args = [
            "--rows-per-epoch", str(p.rows_per_epoch),
            "--key-space", str(p.key_space),
            "--trigger-interval", str(p.trigger_interval_s),
        ]  # fmt: skip
        self.procs = make_processes(self.dir / "logs", self.port, env, runner_args)
        self.procs.web()
        for name in CELERY_WORKERS:
            self.procs.worker(name)
        self.procs.runner()
        self._wait_answers(60)

    def _mount_state(self) -> None:
        self.state.mkdir(parents=True, exist_ok=True)
        if not self.use_tmpfs:
            return
        if os.geteuid() != 0:
            raise SoakError(
                "STATE_DIR goes on a small tmpfs of its own (the disk_full fault fills it), and "
                "mounting one needs root: run the soak as root, or leave disk_full out "
                f"(--faults {','.join(k for k in FAULT_KINDS if k != 'disk_full')})"
            )
        size = f"size={self.profile.state_tmpfs_mb}m"
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", size, "tmpfs", str(self.state)],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise SoakError(f"mount -t tmpfs -o {size} tmpfs {self.state}: {done.stderr.strip()}")
        self.mounted = True

    def _create_sink_database(self, server: str) -> str:
        import psycopg

        name = f"rescaler_soak_{secrets.token_hex(4)}"
        try:
            with psycopg.connect(
                with_database(server, "postgres"), autocommit=True, connect_timeout=5
            ) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
        except psycopg.Error as exc:
            raise SoakError(
                f"cannot create the sink's database on {urlsplit(server).netloc}: {exc}. Start "
                "the machine's Postgres (docs/development.md, Services), point --sink-server at "
                "one, or pass --no-sink (the state is still checked)"
            ) from exc
        return with_database(server, name)

    def _soak_user(self) -> tuple[str, str]:
        """A user with the rescale permission: its API token and a signed-in session (the
        websockets need a session cookie, as the console's pages have)."""
        from django.contrib.auth import get_user_model
        from django.contrib.auth.models import Permission
        from django.test import Client
        from rest_framework.authtoken.models import Token

        user = get_user_model().objects.create_user("soak", password=secrets.token_hex(12))
        user.user_permissions.add(Permission.objects.get(codename="rescale"))
        client = Client()
        client.force_login(user)
        return Token.objects.create(user=user).key, client.cookies["sessionid"].value

    def _wait_answers(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if answers(f"{self.base_url}/healthz"):
                return
            if not self.procs.alive("web"):
                raise SoakError(f"daphne exited before it answered:\n{self.procs.log('web')}")
            time.sleep(0.5)
        raise SoakError(f"daphne did not answer in {timeout:.0f}s:\n{self.procs.log('web')}")

    def wait_ready(self, api: Api, timeout: float = 300.0) -> ClusterView:
        """The runner's third epoch, on the first workers' PUs."""
        deadline = time.monotonic() + timeout
        view: ClusterView | None = None
        while time.monotonic() < deadline:
            for name in WATCHED:
                if not self.procs.alive(name):
                    raise SoakError(
                        f"{name} exited ({self.procs.procs[name].returncode}) before the stack "
                        f"was ready; {self.dir / 'logs' / (name + '.log')} ends:\n"
                        f"{self.procs.log(name)}"
                    )
            view = api.cluster(source="setup")
            if (
                view is not None
                and view.runner_alive
                and view.last_epoch >= 2
                and len(view.fragment_pus) >= self.profile.spark_workers
            ):
                return view
            time.sleep(2)
        raise SoakError(
            f"the pipeline was not running on {self.profile.spark_workers} PUs after "
            f"{timeout:.0f}s (last view: {view}); see {self.dir / 'logs'}/runner.log:\n"
            f"{self.procs.log('runner')}"
        )

    # -- faults ----------------------------------------------------------------------------
    def kill(self, name: str) -> None:
        self.procs.kill(name)

    def restart(self, name: str) -> None:
        self.procs.restart(name)
        if name == "web":
            self._wait_answers(60)

    def lose_spark_host(self, rng: random.Random) -> str:
        """A host lost: kill -9 of its Spark worker (and its executor), and its disk deleted,
        with the stores of its PUs on it."""
        workers = sorted(self.provider.workers(), key=lambda w: w.worker_id)
        if not workers:
            raise SoakError("no Spark worker is running to kill")
        w = rng.choice(workers)
        os.killpg(w.pid, signal.SIGKILL)
        disk = self.provider.disk_of(Path(w.work_dir))
        shutil.rmtree(disk, ignore_errors=True)
        return f"Spark worker {w.worker_id} (pid {w.pid}) and its disk {disk}"

    def restart_postgres(self, down_s: float) -> None:
        with service_call("restarting the private Postgres"):
            self.pg.restart(down_s)

    def restart_redis(self, down_s: float) -> None:
        with service_call("restarting the private Redis"):
            self.redis.restart(down_s)

    @property
    def ballast(self) -> Path:
        return self.state / ".soak-ballast"

    def fill_state(self) -> int:
        """Fill STATE_DIR's tmpfs to the last byte; returns the bytes written."""
        if not self.mounted:
            raise SoakError("STATE_DIR is not on a tmpfs of the soak's own: nothing to fill")
        written = 0
        fd = os.open(self.ballast, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            for size in (4 * MB, 64 * 1024, 4096, 1):
                chunk = b"\0" * size
                while True:
                    try:
                        n = os.write(fd, chunk)
                    except OSError as exc:
                        if exc.errno != errno.ENOSPC:
                            raise
                        break
                    if n == 0:
                        break
                    written += n
        finally:
            os.close(fd)
        return written

    def free_state(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.ballast.unlink()

    # -- the end ---------------------------------------------------------------------------
    def stop_runner(self, timeout: float = 240.0) -> tuple[bool, str]:
        """Stop the runner through the control plane (tests/integration/stack.py ``finish``)."""
        from django.db import DatabaseError, connection

        from rescaler.cluster.services import command_submit

        proc = self.procs.procs["runner"]
        if proc.poll() is not None:
            return False, f"the runner had already exited ({proc.returncode})"
        for attempt in range(5):
            connection.close()  # it may predate a Postgres restart
            try:
                command_submit(pipeline=PIPELINE, kind="stop")
                break
            except DatabaseError as exc:
                if attempt == 4:
                    return False, f"could not queue the stop command: {exc}"
                time.sleep(2)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.procs.kill("runner")
            return False, f"the runner did not stop within {timeout:.0f}s of the stop command"
        return code == 0, f"exit {code}"

    def end_offset(self) -> int:
        """The source offset after the last committed epoch (as stack.check_oracle reads it)."""
        from django.db import connection

        from rescaler.cluster.models import EpochMetric

        connection.close()  # the connection may predate a Postgres restart
        last = EpochMetric.objects.filter(pipeline__name=PIPELINE).order_by("-epoch").first()
        if last is None:
            raise SoakError("no epoch was ever committed; see the runner's log")
        return int(last.source_offset["offset"])

    def verify(self, end: int) -> dict[str, Any]:
        """State and sink against the oracle over the first ``end`` generator records."""
        from tests.integration.workers.fixtures import assert_matches_oracle
        from workers.oracle import expected_from_generator
        from workers.readout import iter_state
        from workers.sources.generator import GeneratorConfig

        # the generator's records as the runner makes them (stack.check_oracle's config)
        expected = expected_from_generator(
            PIPELINE, GeneratorConfig(kind="lines", key_space=self.profile.key_space), end
        )
        counts = {k: int(v) for k, v in expected.state[FRAGMENT].items()}
        actual: dict[str, int] = {}
        twice = 0
        for row in iter_state(self.state, PIPELINE, FRAGMENT):
            key = str(row["key"])
            twice += key in actual
            actual[key] = actual.get(key, 0) + int(row["value"])
        state = count_diff(counts, actual, twice)
        placement = None
        try:  # every key on the PU its vnode maps to, and equal to the oracle
            assert_matches_oracle(self.state, PIPELINE, expected)
        except AssertionError as exc:
            placement = str(exc)[:2000]
        out: dict[str, Any] = {
            "end_offset": end,
            "records": expected.records,
            "state": {**asdict(state), "exact": state.exact},
            "state_and_placement_problem": placement,
            "sink": None,
            "sink_error": None,
        }
        if self.sink_url:
            import psycopg

            try:
                with psycopg.connect(self.sink_url, connect_timeout=10) as conn:
                    rows = conn.execute(f"SELECT key, count FROM {SINK_TABLE}").fetchall()
                sink = count_diff(counts, {str(k): int(n) for k, n in rows})
                out["sink"] = {**asdict(sink), "exact": sink.exact}
            except psycopg.Error as exc:
                out["sink_error"] = f"reading {SINK_TABLE}: {exc}"
        return out

    def close(self, keep: bool) -> None:
        """Stop everything; ``keep`` leaves the logs, the state (still mounted) and the sink's
        database for a look."""
        steps: list[tuple[str, Callable[[], None]]] = []
        if self.procs is not None:
            steps.append(("the processes", self.procs.stop_all))
        if self.provider is not None:
            steps.append(("the Spark workers", self.provider.stop_all))
        if self.master is not None:
            steps.append(("the Spark master", self.master.stop))
        if self.redis is not None:
            steps.append(("Redis", self.redis.kill))
        steps.append(("Django's connections", _close_django_connections))
        if self.pg is not None:
            steps.append(("Postgres", (lambda: self.pg.stop("fast")) if keep else self.pg.close))
        if self.sink_url and not keep:
            steps.append(("the sink's database", self._drop_sink_database))
        if self.mounted and not keep:
            steps.append(("the tmpfs", self._unmount))
        for what, step in steps:
            try:
                with service_call(f"stopping {what}"):
                    step()
            except SoakError as exc:
                say(f"cleanup: {exc}")
        if keep:
            say(f"kept {self.dir}" + (f" (umount {self.state} when done)" if self.mounted else ""))

    def _drop_sink_database(self) -> None:
        import psycopg

        assert self.sink_url is not None and self.sink_server is not None
        name = urlsplit(self.sink_url).path.lstrip("/")
        with psycopg.connect(
            with_database(self.sink_server, "postgres"), autocommit=True, connect_timeout=5
        ) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def _unmount(self) -> None:
        done = subprocess.run(["umount", str(self.state)], capture_output=True, timeout=60)
        if done.returncode != 0:  # something still holds a file: detach it now, free it later
            subprocess.run(["umount", "-l", str(self.state)], capture_output=True, timeout=60)
        self.mounted = False


def _close_django_connections() -> None:
    if "django" in sys.modules:
        from django.db import connections

        connections.close_all()


# == the run: supervisor, faults, operator, load ==================================================
class Supervisor(threading.Thread):
    """Records each exit of a watched process that no fault holds down: an exit nobody caused
    fails the run (goal ``unexpected_exits_0``, exit status 1). It starts the process again only
    so that the rest of the run is measured; no deployment has such a supervisor."""

    def __init__(self, stack: Stack, clock: Clock, stop: threading.Event) -> None:
        super().__init__(name="supervisor", daemon=True)
        self.stack, self.clock, self.stop = stack, clock, stop
        self.exits: list[UnexpectedExit] = []
        self._held: set[str] = set()
        self._lock = threading.Lock()
        self._last_restart: dict[str, float] = {}

    @contextlib.contextmanager
    def holding(self, name: str) -> Any:
        """While a fault has ``name`` down on purpose."""
        with self._lock:
            self._held.add(name)
        try:
            yield
        finally:
            with self._lock:
                self._held.discard(name)

    def run(self) -> None:
        while not self.stop.wait(1.0):
            for name in WATCHED:
                with self._lock:
                    if name in self._held:
                        continue
                    proc = self.stack.procs.procs.get(name)
                    if proc is None or proc.poll() is None:
                        continue
                    now = self.clock.now()
                    if now - self._last_restart.get(name, -1e9) < 10:
                        continue  # one that keeps exiting is started every 10 s, no faster
                    self.exits.append(
                        UnexpectedExit(name, now, int(proc.returncode), self.stack.procs.log(name))
                    )
                    say(f"{name} exited by itself ({proc.returncode}); starting it again")
                    self._last_restart[name] = now
                    try:
                        self.stack.restart(name)
                    except SoakError as exc:
                        say(f"restarting {name}: {exc}")


@dataclass
class SoakOutcome:
    duration_s: float
    faults: list[FaultRecord]
    operations: list[OperationRecord]
    worker_actions: list[WorkerActionRecord]
    exits: list[UnexpectedExit]
    samples: list[HttpSample]
    clients: list[WsClientResult]
    api_operations: list[dict[str, Any]]
    verification: dict[str, Any]
    errors: list[str]


class Soak:
    """One run of a schedule on a started stack."""

    def __init__(self, stack: Stack, schedule: Schedule, profile: Profile) -> None:
        self.stack, self.schedule, self.profile = stack, schedule, profile
        self.clock = Clock()
        self.http = HttpLog()
        self.api = Api(stack.base_url, stack.token, self.http, self.clock)
        self.over = threading.Event()  # the duration is over: no new event starts
        self.load_stop = threading.Event()
        self.supervisor_stop = threading.Event()
        self.supervisor = Supervisor(stack, self.clock, self.supervisor_stop)
        self.faults: list[FaultRecord] = []
        self.operations: list[OperationRecord] = []
        self.worker_actions: list[WorkerActionRecord] = []
        self.errors: list[str] = []
        self.latest_operation: str | None = None
        self._followups: list[tuple[float, str]] = []  # (when, worker) to uncordon
        rng = random.Random(schedule.seed)
        self.readers = [
            Reader(i, self.api, self.load_stop, profile.reader_pause_s, rng.randrange(2**32),
                   lambda: self.latest_operation)
            for i in range(profile.readers)
        ]  # fmt: skip
        self.follow_queues: list[queue.Queue[str]] = [
            queue.Queue() for _ in range(profile.ws_operation_clients)
        ]
        self.clients = [
            WsClient(f"ws-cluster-{i}", "cluster", stack.base_url, stack.session, self.api,
                     self.load_stop, rng.randrange(2**32))
            for i in range(profile.ws_cluster_clients)
        ] + [
            WsClient(f"ws-operation-{i}", "operation", stack.base_url, stack.session, self.api,
                     self.load_stop, rng.randrange(2**32), follow=q)
            for i, q in enumerate(self.follow_queues)
        ]  # fmt: skip

    # -- the whole run ---------------------------------------------------------------------
    def run(self) -> SoakOutcome:
        self.clock.t0 = time.monotonic()  # t = 0: the schedule starts now (one shared clock)
        self.http.clear()  # the setup's requests are not the run's
        threads = [
            threading.Thread(target=self._guarded(self._inject_all), name="faults", daemon=True),
            threading.Thread(target=self._guarded(self._operate), name="operator", daemon=True),
        ]
        for t in (self.supervisor, *self.readers, *self.clients, *threads):
            t.start()
        duration = self.schedule.duration_s
        next_note = 30.0
        while self.clock.now() < duration:
            time.sleep(1.0)
            if self.clock.now() >= next_note:
                next_note += 30.0
                self._progress()
        self.over.set()
        say("duration over: no new operation or fault; finishing the ones under way")
        for t in threads:
            t.join(timeout=self.profile.operation_wait_s + 120)
            if t.is_alive():
                self.errors.append(f"the {t.name} thread did not finish after the duration")
        return self.finish()

    def _guarded(self, work: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                work()
            except Exception as exc:  # recorded, and the run goes on to its checks
                self.errors.append(f"{threading.current_thread().name}: {exc!r}")
                say(f"{threading.current_thread().name} failed: {exc!r}")

        return run

    def _progress(self) -> None:
        samples = self.http.snapshot()
        say(
            f"t={self.clock.now():.0f}s: {sum(1 for r in self.operations if r.operation_id)} "
            f"operations requested, {sum(1 for f in self.faults if f.started_at is not None)} "
            f"faults, {sum(1 for s in samples if s.status >= 500)} 5xx, "
            f"{len(self.supervisor.exits)} unexpected exits"
        )

    # -- faults ----------------------------------------------------------------------------
    def _inject_all(self) -> None:
        for event in self.schedule.faults:
            while self.clock.now() < event.at_s and not self.over.is_set():
                time.sleep(0.2)
            if self.over.is_set():
                return
            self.faults.append(self.inject(event))

    def inject(self, event: FaultEvent) -> FaultRecord:
        """One fault, start to end; what went wrong injecting it is recorded, not raised."""
        rec = FaultRecord(event.index, event.kind, event.at_s, down_s=event.down_s)
        rng = random.Random(event.seed)
        stack, sup = self.stack, self.supervisor
        rec.started_at = self.clock.now()
        say(f"fault {event.index}: {event.kind} (down {event.down_s}s)")
        try:
            if event.kind in ("kill_runner", "kill_celery", "kill_daphne"):
                name = {"kill_runner": "runner", "kill_daphne": "web"}.get(
                    event.kind, rng.choice(CELERY_WORKERS)
                )
                rec.target = name
                with sup.holding(name):
                    stack.kill(name)
                    time.sleep(event.down_s)
                    stack.restart(name)  # daphne: returns once it answers again
            elif event.kind == "lose_spark_host":
                rec.target = stack.lose_spark_host(rng)
            elif event.kind == "restart_postgres":
                rec.target = "postgres"
                stack.restart_postgres(event.down_s)
            elif event.kind == "restart_redis":
                rec.target = "redis"
                stack.restart_redis(event.down_s)
            elif event.kind == "disk_full":
                # Expected: while STATE_DIR is full, whatever the runner or a Spark task writes
                # there (stores, hold queues, checkpoint and offset logs, operation state files)
                # fails with ENOSPC. The design promises nothing half-done, not that writes
                # succeed: an epoch whose writes fail is not committed (Spark retries it; the
                # runner restarts the query, or stops with the error and the supervisor starts
                # it again once the ballast is gone); an operation in flight completes after the
                # space returns or ends cancelled or failed with its error, a final status either
                # way. The end checks exactly that: every operation final, every key equal to
                # the oracle in the state and the sink, and reports any runner exit.
                rec.target = str(stack.state)
                written = stack.fill_state()
                rec.detail = f"{written / MB:.0f} MB of ballast"
                try:
                    time.sleep(event.down_s)
                finally:
                    stack.free_state()
            else:
                raise SoakError(f"unknown fault kind {event.kind!r}")
        except Exception as exc:
            rec.error = f"{type(exc).__name__}: {exc}"
            say(f"fault {event.index} ({event.kind}) could not be injected: {rec.error}")
        rec.ended_at = self.clock.now()
        return rec

    # -- the operator ----------------------------------------------------------------------
    def _operate(self) -> None:
        events = self.schedule.actions()
        for i, event in enumerate(events):
            while self.clock.now() < event.at_s and not self.over.is_set():
                self._due_followups()
                time.sleep(0.2)
            if self.over.is_set():
                # the operator ran behind its schedule: what it never reached is said so
                for late in events[i:]:
                    if isinstance(late, OperationEvent):
                        self.operations.append(
                            OperationRecord(
                                "schedule", late.index, late.kind, late.at_s,
                                granularity=late.granularity,
                                skipped="the duration ended before the operator reached it",
                            )
                        )  # fmt: skip
                break
            if isinstance(event, OperationEvent):
                self._operation(event)
            else:
                self._worker_action(event)
        for _, worker in self._followups:  # leave no worker cordoned by the soak
            self._uncordon(worker)
        self._followups.clear()

    def _announce(self, operation_id: str) -> None:
        self.latest_operation = operation_id
        for q in self.follow_queues:
            q.put(operation_id)

    def _due_followups(self) -> None:
        now = self.clock.now()
        due = [f for f in self._followups if f[0] <= now]
        self._followups = [f for f in self._followups if f[0] > now]
        for _, worker in due:
            self._uncordon(worker)

    def _uncordon(self, worker: str) -> None:
        rec = WorkerActionRecord(-1, "uncordon", self.clock.now(), worker)
        answer = self.api.post(
            f"/api/v1/workers/{worker}/uncordon", {"reason": "soak"}, source="operator"
        )
        rec.http_status, rec.code = answer.status, answer.code
        self.worker_actions.append(rec)

    def _free_cluster(self) -> ClusterView | None:
        """The cluster once no operation holds the fragment (an earlier one, or a drain a
        notice started), within ``operation_wait_s``; None if it never was."""
        deadline = self.clock.now() + self.profile.operation_wait_s
        while self.clock.now() < deadline and not self.over.is_set():
            view = self.api.cluster()
            if view is not None and view.busy_with is None:
                return view
            self._due_followups()
            time.sleep(1.0)
        return None

    def _top_up(self, view: ClusterView) -> None:
        """Fewer workers in service than at the start (a Spark worker killed, drains): ask for
        one more, as an operator would, before planning."""
        if len(view.in_service()) >= self.profile.spark_workers:
            return
        rec = WorkerActionRecord(-1, "add (top-up)", self.clock.now())
        answer = self.api.post("/api/v1/workers", {"cores": 1}, source="operator")
        rec.http_status, rec.code = answer.status, answer.code
        self.worker_actions.append(rec)

    def _operation(self, event: OperationEvent) -> None:
        rec = OperationRecord(
            "schedule", event.index, event.kind, self.clock.now(), granularity=event.granularity
        )
        self.operations.append(rec)
        view = self._free_cluster()
        if view is None:
            rec.skipped = (
                f"the fragment stayed busy or the API unreadable for {self.profile.operation_wait_s:.0f}s, "
                "or the duration ended meanwhile"
            )
            return
        self._top_up(view)
        change = plan_change(view, random.Random(event.seed))
        if isinstance(change, Skip):
            rec.skipped = change.reason
            return
        body: dict[str, Any] = {
            "changes": {FRAGMENT: change.body()},
            "strategy": "stop_start" if event.kind == "stop_start" else "live",
            "reason": f"soak seed {self.schedule.seed}, operation {event.index} ({change.shape})",
        }
        if event.granularity is not None:
            body["granularity"] = event.granularity
        rec.change = {"shape": change.shape, **change.body()}
        rec.at = self.clock.now()
        answer = self.api.post("/api/v1/operations", body, source="operator")
        rec.http_status = answer.status
        if answer.status != 202:
            rec.refused_code = answer.code
            rec.refused_detail = str(answer.body)[:300] if answer.body else answer.error
            return
        rec.operation_id = str(answer.body["operation_id"])
        self._announce(rec.operation_id)
        self._follow(rec, event.cancel_after_s)

    def _follow(self, rec: OperationRecord, cancel_after_s: float | None) -> None:
        """Poll the operation until it is final (``operation_wait_s`` at most), cancelling it at
        its moment; a cancel that gets no answer is sent again."""
        assert rec.operation_id is not None
        start = self.clock.now()
        cancel_at = None if cancel_after_s is None else start + cancel_after_s
        # after the duration the end waits for it (``finish``), a pending cancel is not sent
        while self.clock.now() < start + self.profile.operation_wait_s and not self.over.is_set():
            self._due_followups()
            if cancel_at is not None and self.clock.now() >= cancel_at:
                answer = self.api.post(
                    f"/api/v1/operations/{rec.operation_id}/cancel", None, source="operator"
                )
                if answer.status and answer.status < 500:
                    rec.cancel_at, rec.cancel_http_status, cancel_at = (
                        self.clock.now(),
                        answer.status,
                        None,
                    )
                else:
                    cancel_at = self.clock.now() + 2.0
            detail = self.api.get(f"/api/v1/operations/{rec.operation_id}", source="operator")
            if detail.status == 200 and detail.body["status"] in FINAL_STATUSES:
                rec.final_status = str(detail.body["status"])
                rec.finished_at = self.clock.now()
                rec.error_code = str(detail.body.get("error_code") or "")
                rec.outcome = str(detail.body.get("outcome") or "")[:300]
                return
            time.sleep(1.0)

    def _worker_action(self, event: WorkerEvent) -> None:
        rec = WorkerActionRecord(event.index, event.action, self.clock.now())
        self.worker_actions.append(rec)
        busy = event.action in ("drain", "notice")  # both start an operation on the fragment
        view = self._free_cluster() if busy else self.api.cluster()
        if view is None:
            rec.code, rec.detail = "skipped", "the cluster was unreadable or stayed busy"
            return
        choice = pick_worker(
            view, event.action, random.Random(event.seed), self.profile.max_workers
        )
        if isinstance(choice, Skip):
            rec.code, rec.detail = "skipped", choice.reason
            return
        rec.worker = choice
        rec.at = self.clock.now()
        if event.action == "add":
            answer = self.api.post("/api/v1/workers", {"cores": 1}, source="operator")
        elif event.action == "cordon":
            answer = self.api.post(
                f"/api/v1/workers/{choice}/cordon", {"reason": "soak"}, source="operator"
            )
            if answer.status == 200 and event.uncordon_after_s is not None and choice is not None:
                self._followups.append((self.clock.now() + event.uncordon_after_s, choice))
        elif event.action == "drain":
            answer = self.api.post(
                f"/api/v1/workers/{choice}/drain",
                {"reason": "soak", "granularity": event.granularity},
                source="operator",
            )
        else:
            answer = self.api.post(
                f"/api/v1/workers/{choice}/notice", {"reason": "soak"}, source="operator"
            )
        rec.http_status, rec.code = answer.status, answer.code
        if answer.status >= 400 or answer.status == 0:
            rec.detail = str(answer.body)[:300] if answer.body else answer.error
        operation = answer.body.get("operation") if isinstance(answer.body, dict) else None
        if answer.status == 202 and isinstance(operation, dict):
            op = OperationRecord(
                event.action, event.index, event.action, rec.at, granularity=event.granularity,
                http_status=202, operation_id=str(operation["operation_id"]),
            )  # fmt: skip
            rec.operation_id = op.operation_id
            self.operations.append(op)
            assert op.operation_id is not None
            self._announce(op.operation_id)
            self._follow(op, None)

    # -- the end ---------------------------------------------------------------------------
    def finish(self) -> SoakOutcome:
        """Every operation final (the supervisor still restarts what dies), the websocket
        clients given a moment for the last events, then the runner stopped and the state and
        sink checked."""
        deadline = self.clock.now() + self.profile.final_wait_s
        api_ops: list[dict[str, Any]] | None = None
        while True:
            try:
                listed = self.api.operations(source="final")
            except SoakError as exc:
                self.errors.append(str(exc))
                break
            if listed is not None:
                api_ops = listed
                if all(op["status"] in FINAL_STATUSES for op in api_ops):
                    break
            if self.clock.now() > deadline:
                self.errors.append(
                    f"operations still unfinished {self.profile.final_wait_s:.0f}s after the end"
                    if api_ops is not None
                    else "GET /api/v1/operations never answered at the end: nothing was judged"
                )
                break
            time.sleep(3.0)
        api_ops = api_ops or []
        say(
            f"{len(api_ops)} operations, every one final: {all(o['status'] in FINAL_STATUSES for o in api_ops)}"
        )
        time.sleep(10.0)  # the last events reach the websocket clients
        self.load_stop.set()
        for t in (*self.readers, *self.clients):
            t.join(timeout=15)
        self.supervisor_stop.set()
        self.supervisor.join(timeout=90)
        verification: dict[str, Any] = {}
        try:
            stopped, detail = self.stack.stop_runner()
            verification = self.stack.verify(self.stack.end_offset())
            verification["runner_stopped_cleanly"] = stopped
            verification["runner_stop"] = detail
        except Exception as exc:
            self.errors.append(f"final check: {exc!r}")
        ids = {op["operation_id"]: op for op in api_ops}
        for rec in self.operations:  # the API's word on how each ended
            row = ids.get(rec.operation_id or "")
            if row is not None:
                rec.final_status = str(row["status"])
                rec.error_code = str(row.get("error_code") or rec.error_code)
        return SoakOutcome(
            duration_s=self.schedule.duration_s,
            faults=self.faults,
            operations=self.operations,
            worker_actions=self.worker_actions,
            exits=list(self.supervisor.exits),
            samples=self.http.snapshot(),
            clients=[c.snapshot() for c in self.clients],
            api_operations=api_ops,
            verification=verification,
            errors=self.errors,
        )


# == 5. the report ================================================================================
def fault_windows(faults: Sequence[FaultRecord]) -> list[Window]:
    return [
        Window(f.kind, f.started_at, f.ended_at)
        for f in faults
        if f.started_at is not None and f.ended_at is not None and not f.error
    ]


def build_report(
    *,
    profile: Profile,
    schedule: Schedule,
    outcome: SoakOutcome | None,
    trust: Mapping[str, Any],
    machine: Mapping[str, Any],
    elapsed_s: float,
    error: str | None,
) -> dict[str, Any]:
    """The JSON report from what the run recorded (``outcome`` None: it never got going)."""
    o = outcome or SoakOutcome(schedule.duration_s, [], [], [], [], [], [], [], {}, [])
    windows = fault_windows(o.faults)
    finals = {
        str(op["operation_id"]): str(op["status"])
        for op in o.api_operations
        if op["status"] in FINAL_STATUSES
    }
    stale = stale_clients(o.clients, finals)
    report: dict[str, Any] = {
        "benchmark": "soak",
        "command": common.command_line(),
        **trust,
        "machine": {**machine, "load_avg_at_end": [round(x, 2) for x in os.getloadavg()]},
        "parameters": {
            "seed": schedule.seed,
            "minutes": round(schedule.duration_s / 60, 2),
            "profile": asdict(profile),
            "fault_kinds": list(schedule.fault_kinds),
            "replay": f"bench/soak.py --seed {schedule.seed} --minutes {schedule.duration_s / 60:g}"
            + (" --quick" if profile.name == "quick" else ""),
        },
        "elapsed_s": round(elapsed_s, 1),
        "error": error,
        "errors": list(o.errors),
        "operations": operations_summary(o.api_operations, o.operations),
        "faults": faults_summary(o.faults, schedule.duration_s),
        "unexpected_exits": [
            {"name": e.name, "t": e.t, "returncode": e.returncode, "log_tail": e.log_tail[-1500:]}
            for e in o.exits
        ],
        "http": http_summary(o.samples, windows),
        "websockets": {
            "clients": len(o.clients),
            "clients_stale": len({s["client"] for s in stale}),
            "stale": stale[:50],
            "drops": sum(c.drops for c in o.clients),
            "messages": sum(c.messages for c in o.clients),
            "per_client": [
                {
                    "name": c.name,
                    "kind": c.kind,
                    "connects": c.connects,
                    "drops": c.drops,
                    "messages": c.messages,
                    "followed": len(c.followed),
                    "last_error": c.last_error,
                }
                for c in o.clients
            ],
        },
        "verification": o.verification,
        "timeline": {
            "faults": [asdict(f) for f in o.faults],
            "operations": [asdict(r) for r in o.operations],
            "worker_actions": [asdict(r) for r in o.worker_actions],
            "five_xx_at": [s.t for s in o.samples if s.status >= 500],
            "reads": [
                [s.t, round(s.latency_s * 1000, 1)]
                for s in o.samples
                if s.source == "reader" and s.status
            ],
        },
        "schedule": schedule.to_json(),
    }
    report["goals"] = goals(report)
    report["table"] = common.with_verdict(table(report), report)
    return report


def table(report: Mapping[str, Any]) -> str:
    ops, faults, http, ws = (
        report["operations"],
        report["faults"],
        report["http"],
        report["websockets"],
    )
    ver = report["verification"] or {}

    def diff_cell(d: Mapping[str, Any] | None) -> str:
        if not d:
            return "-"
        return f"lost {d['records_lost']:,}, duplicated {d['records_duplicated']:,}" + (
            "" if d["exact"] else f" (NOT exact: {'; '.join(d['problems'][:2])})"
        )

    rows: list[list[Any]] = [
        ["seed / minutes", f"{report['parameters']['seed']} / {report['parameters']['minutes']}"],
        [
            "operations completed / cancelled / failed",
            f"{ops['completed']} / {ops['cancelled']} / {ops['failed']}",
        ],
        ["operations unfinished", ops["unfinished"]],
        ["requests refused (code: n)", ", ".join(f"{k}: {v}" for k, v in ops["refused"].items()) or "0"],
        ["faults injected (per minute)", f"{faults['injected']} ({faults['per_minute']})"],
        ["faults by kind", ", ".join(f"{k}: {v}" for k, v in faults["by_kind"].items()) or "-"],
        ["processes that exited by themselves", len(report["unexpected_exits"])],
        ["5xx outside daphne's downtime (all 5xx)", f"{http['five_xx_outside_daphne_down']} ({http['five_xx']})"],
        ["API read p50 / p99 ms (steady; with Postgres's restarts)",
         f"{common.fmt(http['read_p50_ms'], '.0f')} / {common.fmt(http['read_p99_ms'], '.0f')} "
         f"({common.fmt(http['read_p99_ms_steady'], '.0f')}; "
         f"{common.fmt(http.get('read_p99_ms_all'), '.0f')})"],
        ["websocket clients on a stale status", f"{ws['clients_stale']} of {ws['clients']}"],
        ["state vs oracle", diff_cell(ver.get("state"))],
        ["sink vs oracle", diff_cell(ver.get("sink")) if not ver.get("sink_error") else ver["sink_error"]],
        ["runner stopped cleanly", ver.get("runner_stopped_cleanly", "-")],
    ]  # fmt: skip
    text = common.format_table(["figure", "value"], rows)
    goal_rows = [
        [name, g["value"], "yes" if g["met"] else "NO"] for name, g in report["goals"].items()
    ]
    return text + "\n\n" + common.format_table(["goal", "value", "met"], goal_rows)


STATUS_COLOURS = {
    "completed": "tab:green",
    "cancelled": "tab:orange",
    "failed": "tab:red",
    None: "tab:gray",
}


def plot(report: Mapping[str, Any], path: Path) -> None:
    """The timeline: each fault kind's windows, the operations coloured by how they ended, the
    worker actions, 5xx and exits; below, the readers' latency with its p99 per 30 s."""
    plt = common.pyplot()
    tl = report["timeline"]
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(14, 8), sharex=True, gridspec_kw={"height_ratios": [3, 2]}
    )
    lanes = [*FAULT_KINDS, "operations", "workers", "5xx / exits"]
    y = {name: i for i, name in enumerate(lanes)}
    for f in tl["faults"]:
        if f["started_at"] is not None and f["ended_at"] is not None:
            width = max(f["ended_at"] - f["started_at"], 0.5)
            colour = "tab:purple" if not f["error"] else "black"
            top.broken_barh([(f["started_at"], width)], (y[f["kind"]] - 0.4, 0.8), color=colour)
    end = report["schedule"]["duration_s"]
    for r in tl["operations"]:
        if r["operation_id"] is None:
            continue
        stop = r["finished_at"] if r["finished_at"] is not None else end
        top.broken_barh(
            [(r["at"], max(stop - r["at"], 0.5))],
            (y["operations"] - 0.4, 0.8),
            color=STATUS_COLOURS.get(r["final_status"], "tab:gray"),
            alpha=0.7,
        )
    top.scatter(
        [w["at"] for w in tl["worker_actions"]],
        [y["workers"]] * len(tl["worker_actions"]),
        marker="|",
        s=200,
        color="tab:blue",
    )
    top.scatter(
        tl["five_xx_at"], [y["5xx / exits"]] * len(tl["five_xx_at"]), marker="x", color="tab:red"
    )
    exits = [e["t"] for e in report["unexpected_exits"]]
    top.scatter(exits, [y["5xx / exits"]] * len(exits), marker="v", color="black", s=60)
    top.set_yticks(range(len(lanes)), lanes)
    top.set_title(
        f"soak seed {report['parameters']['seed']}: faults, operations (green completed, orange "
        "cancelled, red failed, grey unfinished), worker actions, 5xx (x) and exits (v)"
    )
    reads = tl["reads"]
    if reads:
        bottom.scatter([t for t, _ in reads], [ms for _, ms in reads], s=2, alpha=0.3)
        buckets: dict[int, list[float]] = {}
        for t, ms in reads:
            buckets.setdefault(int(t // 30), []).append(ms)
        xs = sorted(buckets)
        bottom.plot(
            [x * 30 + 15 for x in xs],
            [common.percentile(buckets[x], 99) for x in xs],
            color="tab:red",
            label="p99 per 30 s",
        )
        bottom.axhline(300, color="black", linestyle="--", linewidth=0.8, label="goal 300 ms")
        bottom.set_yscale("log")
        bottom.legend(loc="upper right")
    bottom.set_ylabel("API read ms")
    bottom.set_xlabel("seconds since the start")
    common.save_figure(fig, path)


# == the command line =============================================================================
def run(args: argparse.Namespace) -> int:
    profile = QUICK if args.quick else FULL
    minutes = args.minutes if args.minutes is not None else profile.minutes
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    kinds = (
        common.parse_names(args.faults, FAULT_KINDS, "fault kinds")
        if args.faults
        else list(FAULT_KINDS)
    )
    schedule = make_schedule(seed, minutes * 60, profile, kinds)
    if args.print_schedule:
        print(json.dumps(schedule.to_json(), indent=1))
        return 0
    validity, load_before = common.check_load(args.allow_load, prefix=LOG_PREFIX)
    out = common.results_path(args.out, "soak", args.quick)
    machine = common.machine_info(packages=("pyspark", "django", "channels", "daphne", "celery"))
    sink_server = None if args.no_sink else (args.sink_server or default_sink_server())
    say(
        f"seed {seed} ({profile.name} profile, {minutes:g} min): {len(schedule.operations)} "
        f"operations, {len(schedule.worker_actions)} worker actions, {len(schedule.faults)} "
        f"faults scheduled; replay with --seed {seed}"
    )
    started = time.time()
    outcome: SoakOutcome | None = None
    error: str | None = None

    def stopped(signum: int, _frame: Any) -> None:
        # a SIGTERM (a CI time-out, kill) ends the run like an error: the stack is torn down
        # (its servers, the Spark cluster, the tmpfs) and what was measured is reported
        raise SoakError(f"stopped by signal {signal.Signals(signum).name}")

    signal.signal(signal.SIGTERM, stopped)
    with common.RunDir("soak-", keep=args.keep, log_prefix=LOG_PREFIX) as run_dir:
        stack = Stack(run_dir.path, profile, tmpfs="disk_full" in kinds, sink_server=sink_server)
        try:
            stack.start()
            soak = Soak(stack, schedule, profile)
            stack.wait_ready(soak.api)
            say(f"the stack is up at {stack.base_url}; the schedule starts")
            outcome = soak.run()
        except Exception as exc:  # reported with what was measured until then
            error = str(exc) if isinstance(exc, SoakError) else repr(exc)
            say(f"stopped: {error}")
        finally:
            # a run that went wrong keeps its logs, state and databases for the diagnosis
            keep = args.keep or error is not None or bool(outcome is not None and outcome.errors)
            run_dir.keep = keep
            stack.close(keep=keep)
    report = build_report(
        profile=profile,
        schedule=schedule,
        outcome=outcome,
        trust=common.trust_fields(validity, load_before, []),
        machine=machine,
        elapsed_s=time.time() - started,
        error=error,
    )
    png = common.save_report(out, report, lambda p: plot(report, p), prefix=LOG_PREFIX)
    print(report["table"])
    print(f"\nwrote {out} and {png}")
    if report["unexpected_exits"]:
        names = ", ".join(f"{e['name']} ({e['returncode']})" for e in report["unexpected_exits"])
        say(f"FAILED: processes exited by themselves: {names}; their log tails are in {out}")
        return 1
    return 1 if error else 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--minutes", type=float, help="duration (default: 30; --quick: 2)")
    p.add_argument("--seed", type=int, help="the schedule's seed (default: random, printed)")
    p.add_argument("--quick", action="store_true", help="the 2-minute profile the suite runs")
    p.add_argument(
        "--faults", help=f"fault kinds, comma-separated (default: all: {','.join(FAULT_KINDS)})"
    )
    p.add_argument("--out", help="the report's JSON (default bench/results/soak[_quick].json)")
    p.add_argument("--keep", action="store_true", help="keep logs, state and databases")
    p.add_argument(
        "--allow-load",
        action="store_true",
        help=f"start even when the 1-minute load average is above {common.LOAD_LIMIT:.1f}; the "
        "result is then marked invalid",
    )
    p.add_argument("--sink-server", help="Postgres server for the sink's throwaway database")
    p.add_argument("--no-sink", action="store_true", help="no Postgres sink (the state is checked)")
    p.add_argument(
        "--print-schedule", action="store_true", help="print the schedule; start nothing"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    return run(parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
