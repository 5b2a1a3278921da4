"""The control plane at scale: 1,024 PUs x 32,768 vnodes, against the real Postgres, no Spark.

In a throwaway database (created and dropped here, never the project's), it registers a pipeline
as the runner does: ``--pus`` PUs on workers of ``--pus-per-worker``, a stateful fragment of
``--vnodes`` vnodes on the first half of the PUs, with a skewed measured load per vnode. Then:

* **planner**: ``plan_request`` of a 2x scale-out (the other half of the PUs added), plain and
  weighted, on the cluster view read from Postgres; and the read itself, and ``validate``;
* **dry run through the API**: ``POST /api/v1/operations`` with ``dry_run`` (Django's test client
  in process: middleware, token auth, DRF, the queries, JSON both ways), plain and weighted;
* **``GET /api/v1/cluster``**: p50/p99 over ``--requests`` requests, and its query count;
* **a simulated runner** driven through the whole operation (fluid: one vnode per step, so
  V/2 = 16,384 steps at full size): the runner's side is simulated (its barrier moves each
  step one phase on, with no state to move and no epoch to wait for), the control plane's is
  the product's own: the orchestrator (``Orchestrator`` over ``OrmChannel``, as the drive loop
  runs it), commands polled and acknowledged and progress recorded through ``OrmControl`` (the
  runner's side of Postgres), the operation's delta event built by the dashboard's receiver.
  It reports handoffs (vnodes moved) per second, Postgres writes per barrier, and the websocket
  bytes of a progress event (one step of 1,000 known changing) against the whole operation
  document (``GET /api/v1/operations/<id>``).

    .venv/bin/python bench/control_plane.py                    # 1,024 PUs x 32,768 vnodes
    .venv/bin/python bench/control_plane.py --quick            # 64 PUs x 1,024 vnodes, a smoke run
    .venv/bin/python bench/control_plane.py --only handoffs    # the simulated runner only

Prints a table and writes ``bench/results/control_plane.json`` (``_quick`` with ``--quick``).
Refuses to start above a 1-minute load average of 1.0 unless ``--allow-load`` (then the result
is marked invalid).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # runnable as `python bench/control_plane.py` from anywhere
    sys.path.insert(0, str(ROOT))

from bench._common import (  # noqa: E402
    check_load,
    command_line,
    fmt,
    format_table,
    log,
    machine_info,
    parse_names,
    percentile,
    results_path,
    trust_fields,
    write_json,
)
from workers.cycles import cycle_collection_paused  # noqa: E402

PREFIX = "control_plane"
PIPELINE = "wordcount"
FRAGMENT = "word_count"
WRITES = ("INSERT", "UPDATE", "DELETE")
HEARTBEAT_S = 2.0  # the runner's heartbeat interval (workers/config.py, heartbeat_interval_s)


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


class Times(list[float]):
    """Wall times (s) of runs, with the CPU time of this process in each (``cpu``): on a
    loaded machine the wall time is stretched by other work, the CPU time much less so (it is
    what the wall time approaches on a quiet one, less the waits on Postgres)."""

    def __init__(self) -> None:
        super().__init__()
        self.cpu: list[float] = []

    @contextmanager
    def run(self) -> Iterator[None]:
        t0, c0 = time.perf_counter(), time.process_time()
        yield
        self.append(time.perf_counter() - t0)
        self.cpu.append(time.process_time() - c0)


def _timed(fn: Callable[[], Any], runs: int) -> tuple[Times, Any]:
    """``fn`` run ``runs`` times: their times and the last result."""
    times, result = Times(), None
    for _ in range(runs):
        with times.run():
            result = fn()
    return times, result


@contextmanager
def request_queries() -> Iterator[list[str]]:
    """The SQL of the queries run in the block (a request through the test client), copied at
    its end: Django empties the log when a request starts, which would cut the capture of a
    request by the next one."""
    from django.db import connection, reset_queries
    from django.test.utils import CaptureQueriesContext

    sql: list[str] = []
    reset_queries()
    with CaptureQueriesContext(connection) as queries:
        yield sql
    sql += [q["sql"] for q in queries.captured_queries]


def _summary(times: Times) -> dict[str, Any]:
    return {
        "runs": len(times),
        "median_ms": _ms(statistics.median(times)),
        "min_ms": _ms(min(times)),
        "max_ms": _ms(max(times)),
        "cpu_median_ms": _ms(statistics.median(times.cpu)),
    }


# -- the cluster -----------------------------------------------------------------------------------
def vnode_load(vnodes: int) -> dict[int, tuple[int, int]]:
    """Keys and bytes per vnode, skewed (a few vnodes hold many times the mean), deterministic."""
    load = {}
    for v in range(vnodes):
        weight = 1 + (v * 2654435761 % 97 == 0) * 40 + (v * 40503 % 13 == 0) * 4
        keys = 200 + (v * 7919) % 400
        load[v] = (keys * weight, keys * weight * 80)
    return load


def build_cluster(pus: int, pus_per_worker: int, vnodes: int) -> dict[str, Any]:
    """Register the pipeline and report an epoch as the runner would; returns what was built
    and what registering it cost."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from rest_framework.authtoken.models import Token

    from rescaler.cluster import services as cluster_services
    from workers.control import EpochReport, PuLoad, Topology
    from workers.pipeline.placement import VnodeMapping

    workers = {
        f"executor-{w}": list(range(w * pus_per_worker, min((w + 1) * pus_per_worker, pus)))
        for w in range((pus + pus_per_worker - 1) // pus_per_worker)
    }
    fragment_pus = list(range(pus // 2))
    placement = VnodeMapping.initial(FRAGMENT, vnodes, fragment_pus)
    topology = Topology(
        pipeline=PIPELINE,
        workers=workers,
        fragments={
            "source": {"kind": "source", "parallel_units": fragment_pus},
            FRAGMENT: {
                "kind": "stateful", "region": 1, "vnodes": vnodes, "key": "word",
                "operator": "count", "parallel_units": fragment_pus,
                "mapping": list(placement.mapping), "version": 1,
            },
            "sink": {"kind": "sink", "parallel_units": fragment_pus},
        },
        spark={"alive": True, "master": "local[2]"},
    )  # fmt: skip
    with CaptureQueriesContext(connection) as queries:
        t0 = time.perf_counter()
        cluster_services.topology_register(topology=topology)
        register_s = time.perf_counter() - t0
    load = vnode_load(vnodes)
    report = EpochReport(
        pipeline=PIPELINE, epoch=1, rows=200_000, malformed=0, duration_s=0.4,
        committed_at=time.time(), source_offset={"offset": 200_000},
        per_pu=[PuLoad(FRAGMENT, pu, 400, 3000, 240_000) for pu in fragment_pus],
        per_vnode={FRAGMENT: load}, mapping_versions={FRAGMENT: 1},
    )  # fmt: skip
    t0 = time.perf_counter()
    cluster_services.epoch_record(report=report)
    epoch_s = time.perf_counter() - t0
    cluster_services.runner_heartbeat(
        pipeline=PIPELINE, epoch=1, status="running", spark={"alive": True}
    )
    user = get_user_model().objects.create_user("bench-control-plane")
    user.user_permissions.add(Permission.objects.get(codename="rescale"))
    return {
        "parallel_units": pus,
        "workers": len(workers),
        "vnodes": vnodes,
        "fragment_parallel_units": len(fragment_pus),
        "added_parallel_units": list(range(pus // 2, pus)),
        "token": Token.objects.create(user=user).key,
        "user": user,
        "register": {
            "topology_register_ms": _ms(register_s),
            "topology_register_queries": len(queries),
            "epoch_record_ms": _ms(epoch_s),
        },
    }


def scale_out_body(added: list[int], **extra: Any) -> dict[str, Any]:
    # fluid unless told: one step per vnode, the most steps a plan can have (the auto default
    # would cut a 2x scale-out into a few large steps)
    return {"changes": {FRAGMENT: {"added_parallel_units": added}}, "granularity": "fluid", **extra}


# -- planner, dry run, GET /cluster ------------------------------------------------------------------
def measure_planner(added: list[int], runs: int) -> dict[str, Any]:
    from rescaler.cluster.models import Pipeline
    from rescaler.operations.selectors import cluster_view
    from workers.rescale.planner import plan_request
    from workers.rescale.protocol import OperationRequest
    from workers.rescale.request import validate

    pipeline = Pipeline.objects.get(name=PIPELINE)
    view_times, cluster = _timed(lambda: cluster_view(pipeline), runs)
    result: dict[str, Any] = {"cluster_view": _summary(view_times)}
    for weighted in (False, True):
        request = OperationRequest.parse(scale_out_body(added, weighted=weighted))
        validate_times, _ = _timed(lambda r=request: validate(r, cluster), runs)
        plan_times, plan = _timed(lambda r=request: plan_request(r, cluster), runs)
        name = "weighted" if weighted else "plain"
        result[f"validate_{name}"] = _summary(validate_times)
        result[f"plan_{name}"] = {
            **_summary(plan_times),
            "steps": len(plan.steps),
            "vnodes_moved": sum(len(f.moves) for f in plan.fragments.values()),
        }
    return result


def beat() -> None:
    """The runner's heartbeat (a request planned against a silent runner is refused)."""
    from rescaler.cluster import services as cluster_services

    cluster_services.runner_heartbeat(
        pipeline=PIPELINE, epoch=1, status="running", spark={"alive": True}
    )


def measure_dry_run(client: Any, added: list[int], runs: int) -> dict[str, Any]:
    result = {}
    for weighted in (False, True):
        body = json.dumps(scale_out_body(added, dry_run=True, weighted=weighted))

        def post(times: Times, body: str = body) -> Any:
            beat()  # not timed
            with times.run():
                response = client.post("/api/v1/operations", body, content_type="application/json")
            assert response.status_code == 200, response.content[:500]
            return response

        post(Times())  # warm-up
        with request_queries() as queries:
            post(Times())
        times = Times()
        for _ in range(runs):
            response = post(times)
        result["weighted" if weighted else "plain"] = {
            **_summary(times),
            "queries": len(queries),
            "response_bytes": len(response.content),
        }
    return result


def measure_cluster(client: Any, requests: int, warmup: int) -> dict[str, Any]:

    def get() -> Any:
        response = client.get("/api/v1/cluster")
        assert response.status_code == 200, response.content[:500]
        return response

    for _ in range(warmup):
        get()
    with request_queries() as queries:
        get()
    times, response = _timed(get, requests)
    ms = [t * 1000 for t in times]
    return {
        "requests": requests,
        "p50_ms": round(percentile(ms, 50) or 0, 2),
        "p99_ms": round(percentile(ms, 99) or 0, 2),
        "max_ms": round(max(ms), 2),
        "cpu_median_ms": _ms(statistics.median(times.cpu)),
        "queries": len(queries),
        "response_bytes": len(response.content),
    }


def measure_document(client: Any, operation_id: str, runs: int) -> dict[str, Any]:

    def get() -> Any:
        response = client.get(f"/api/v1/operations/{operation_id}")
        assert response.status_code == 200, response.content[:500]
        return response

    with request_queries() as queries:
        get()
    times, response = _timed(get, runs)
    return {**_summary(times), "queries": len(queries), "response_bytes": len(response.content)}


# -- the simulated runner ---------------------------------------------------------------------------
@dataclass
class SimulatedRunner:
    """The runner's side of a live operation as the control plane sees it, with no state to move
    and no epoch to wait for. Its barrier: the commands polled and acknowledged; each step one
    phase on (acquiring: done; collecting: its export finished during the epoch, so it is
    acquired now; pending: collected while fewer than ``steps_in_flight`` hold their vnodes);
    then the steps that changed since the acknowledged report reported, as the runner does
    (``OperationLedger`` with ``ProgressReports``), through the runner's own control interface
    (``OrmControl``). Each part of it runs with Python's cycle collector paused, as the runner's
    do (``workers.barrier`` applies commands and moves steps on under it, ``workers.runner``
    records what an epoch committed under it)."""

    control: Any
    pipeline: str
    epoch: int = 0
    operation_id: str = ""
    fragments: tuple[str, ...] = ()
    steps_in_flight: int = 1
    begun_epoch: int | None = None
    finish_requested: bool = False
    finished_epoch: int | None = None
    steps: dict[int, Any] = field(default_factory=dict)  # step -> StepProgress
    reports: Any = None  # workers.rescale.reports.ProgressReports
    moved: list[int] = field(default_factory=lambda: [0, 0, 0])  # vnodes, keys, bytes
    _planned: dict[int, tuple[int, int]] = field(default_factory=dict)  # step -> keys, bytes
    beat_at: float = float("-inf")

    def heartbeat(self) -> None:
        """As the runner's heartbeat thread: every 2 s, whatever the barriers do."""
        from workers.control import Heartbeat

        if time.monotonic() - self.beat_at >= HEARTBEAT_S:
            beat = Heartbeat(self.pipeline, self.epoch, "running", {"alive": True})
            self.control.heartbeat(beat)
            self.beat_at = time.monotonic()

    @cycle_collection_paused()  # as the runner's (see the class)
    def poll(self) -> None:
        from workers.rescale.protocol import (
            BeginPayload,
            CommandKind,
            StepPayload,
            StepPhase,
            StepProgress,
        )

        acks: list[tuple[int, str, str]] = []
        for command in self.control.poll_commands(self.pipeline):
            if command.kind == CommandKind.OPERATION_BEGIN:
                begin = BeginPayload.from_json(command.payload)
                self.operation_id, self.fragments = begin.operation_id, tuple(begin.fragments)
                self.steps_in_flight = begin.granularity.steps_in_flight if begin.granularity else 1
                self.begun_epoch = self.epoch
            elif command.kind == CommandKind.OPERATION_STEP:
                spec = StepPayload.from_json(command.payload).step
                if spec.step not in self.steps:
                    self.steps[spec.step] = StepProgress(
                        step=spec.step, fragment=spec.fragment, source_pu=spec.source_pu,
                        target_pu=spec.target_pu, vnodes=spec.vnodes, phase=StepPhase.PENDING,
                        timings={StepPhase.PENDING: time.time()},
                        per_vnode={str(v): {"keys": 0, "bytes": 0} for v in spec.vnodes},
                    )  # fmt: skip
                    self._planned[spec.step] = (spec.keys, spec.bytes)
            elif command.kind == CommandKind.OPERATION_FINISH:
                self.finish_requested = True
            acks.append((command.id, "done", ""))
        if acks:  # as the runner's barrier: every command of the barrier at once
            self.control.ack_commands(acks)

    def _enter(self, number: int, phase: Any, **figures: Any) -> None:
        step = self.steps[number]
        self.steps[number] = replace(
            step, phase=phase, timings={**step.timings, phase: time.time()}, **figures
        )

    @cycle_collection_paused()  # as the runner's (see the class)
    def advance(self) -> None:
        """One barrier's worth of phases (see the class)."""
        from workers.rescale.protocol import STEP_HOLDING, StepPhase

        epoch = self.epoch
        holding = 0
        for number, step in sorted(self.steps.items()):
            if step.phase == StepPhase.ACQUIRING:
                self._enter(number, StepPhase.DONE, drop_epoch=epoch)
            elif step.phase in STEP_HOLDING:
                keys, nbytes = self._planned[number]
                share = len(step.vnodes)
                per_vnode = {
                    str(v): {"keys": keys // share, "bytes": nbytes // share} for v in step.vnodes
                }
                self._enter(
                    number, StepPhase.ACQUIRING, acquire_epoch=epoch, keys_moved=keys,
                    bytes_moved=nbytes, per_vnode=per_vnode,
                )  # fmt: skip
                self.moved[0] += share
                self.moved[1] += keys
                self.moved[2] += nbytes
        for number, step in sorted(self.steps.items()):
            if step.phase != StepPhase.PENDING:
                continue
            if holding >= self.steps_in_flight:
                break
            self._enter(number, StepPhase.COLLECTING, collect_epoch=epoch, hold_queue=0)
            holding += 1

    @cycle_collection_paused()  # as the runner's (see the class)
    def report(self, *, finished: bool = False, full: bool = False) -> Any:
        """The barrier's report (an ``OperationProgress``): the steps changed since the
        acknowledged one."""
        from workers.rescale.protocol import (
            OperationProgress,
            OperationStatus,
            StopStartPhase,
            Strategy,
        )
        from workers.rescale.reports import ProgressReports

        if self.reports is None:
            self.reports = ProgressReports()
        status = OperationStatus.COMPLETED if finished else OperationStatus.RUNNING
        head = OperationProgress(
            operation_id=self.operation_id, strategy=Strategy.LIVE, fragments=self.fragments,
            status=status, phase=StopStartPhase.BEGUN, begun_epoch=self.begun_epoch,
            finished_epoch=self.epoch if finished else None, vnodes_moved=self.moved[0],
            keys_moved=self.moved[1], bytes_moved=self.moved[2],
        )  # fmt: skip
        return self.reports.report(head, self.steps, lambda step: step, full=full)

    @cycle_collection_paused()  # as the runner's (see the class)
    def send(self, report: Any) -> None:
        """As the runner's ledger: send, and at once a full report if the control plane asks."""
        ack = self.control.report_progress(self.pipeline, report.to_json())
        if self.reports.answered(report, ack):
            full = self.report(finished=report.final, full=True)
            self.reports.answered(full, self.control.report_progress(self.pipeline, full.to_json()))

    @property
    def all_done(self) -> bool:
        from workers.rescale.protocol import StepPhase

        return bool(self.steps) and all(s.phase == StepPhase.DONE for s in self.steps.values())


@contextmanager
def captured_events(
    kept: list[str] | None = None,
) -> Iterator[list[tuple[str, str, int]]]:
    """Every event published, as (group, type, bytes of its JSON as a page receives it); the
    payloads of operation.progress events that name a page's changes also go to ``kept``, as
    that JSON: a process that publishes holds no event once it is sent, where the objects of
    67 events of 768 steps each, held to the end, would be walked by every full collection of
    the cycle collector while the handoffs are timed."""
    from django.core.serializers.json import DjangoJSONEncoder

    from dashboard.live import PAGE_CHANGES
    from rescaler import events

    sent: list[tuple[str, str, int]] = []

    def publish(group: str, event_type: Any, payload: dict[str, Any]) -> None:
        message = {"type": str(event_type), "payload": {**payload, "published_at": time.time()}}
        text = json.dumps(message, cls=DjangoJSONEncoder)
        sent.append((group, str(event_type), len(text)))
        if kept is not None and PAGE_CHANGES in payload:
            kept.append(text)

    with mock.patch.object(events, "publish", publish):
        yield sent


def page_renders(operation_id: str, events: list[str]) -> list[float]:
    """The time (s) the operation page's socket takes to render each delta event for a page
    showing the first 100 steps (``dashboard.live.operation_page_delta``, the first page in the
    process; the others of the same rows read it rendered). Not a part of recording a barrier:
    it runs in daphne, once per event while a page watches. Every 4th event, after the run."""
    from dashboard import live

    spent = []
    for text in events[::4]:
        payload = json.loads(text)["payload"]  # as the page's socket receives it
        live._RENDERED.clear()
        t0 = time.perf_counter()
        live.operation_page_delta(operation_id=operation_id, payload=payload, shown=((1, 100),))
        spent.append(time.perf_counter() - t0)
    return spent


@contextmanager
def timed_deltas(name: str = "operation_delta") -> Iterator[list[float]]:
    """The time (s) the dashboard's receiver takes to build each operation delta event, a part
    of recording a barrier (``dashboard.live.operation_delta``)."""
    from dashboard import live

    spent: list[float] = []
    build = getattr(live, name)

    def timed(**report: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return build(**report)
        finally:
            spent.append(time.perf_counter() - t0)

    with mock.patch.object(live, name, timed):
        yield spent


def _writes(queries: Any) -> int:
    return sum(1 for q in queries.captured_queries if q["sql"].lstrip().startswith(WRITES))


def drive_operation(
    client: Any, user: Any, added: list[int], steps_in_flight: int, probe_known: int
) -> dict[str, Any]:
    """Start a fluid 2x scale-out and drive it to completion against the simulated runner."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from rescaler.operations import drive
    from rescaler.operations.models import RescaleOperation
    from rescaler.runner.control import OrmControl
    from workers.rescale.orchestrator import Orchestrator
    from workers.rescale.protocol import OperationStatus, TickStatus

    body = scale_out_body(
        added, granularity={"vnodes_per_step": 1, "steps_in_flight": steps_in_flight}
    )
    beat()
    t0 = time.perf_counter()
    response = client.post("/api/v1/operations", json.dumps(body), content_type="application/json")
    start_s = time.perf_counter() - t0
    assert response.status_code == 202, response.content[:500]
    operation_id = response.json()["operation_id"]
    # as the drive loop reads the operation it holds (``drive.operation_drive``)
    op = (
        RescaleOperation.objects.select_related("pipeline")
        .defer("plan")
        .get(operation_id=operation_id)
    )
    planned_steps = op.steps.count()
    document_at_start = measure_document(client, operation_id, 1)

    # what the drive loop does before its first tick
    RescaleOperation.objects.filter(pk=op.pk).update(
        status=OperationStatus.RUNNING, started_at=timezone.now()
    )
    orchestrator = Orchestrator(drive.OrmChannel(op), operation_id, op.plan_record())
    runner = SimulatedRunner(OrmControl(), PIPELINE)
    runner.heartbeat()
    barriers: list[dict[str, Any]] = []
    probe: dict[str, Any] | None = None
    control_s = runner_s = probe_s = 0.0
    tick_s: list[float] = []
    progress_events: list[str] = []
    with (
        captured_events(progress_events) as events,
        timed_deltas() as delta_s,
    ):
        t_start = time.perf_counter()
        while True:
            t0 = time.perf_counter()
            tick = drive.orchestrator_tick(orchestrator)
            tick_s.append(time.perf_counter() - t0)
            control_s += tick_s[-1]
            if tick.status == TickStatus.COMPLETED:
                break
            if tick.status not in (TickStatus.STARTING, TickStatus.RUNNING):
                raise RuntimeError(f"operation {operation_id}: {tick.status} {tick.error}")
            runner.epoch += 1
            t0 = time.perf_counter()
            runner.heartbeat()
            runner.poll()
            poll_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            runner.advance()
            finished = runner.finish_requested and runner.all_done
            report = runner.report(finished=finished)
            runner_s += time.perf_counter() - t0
            sample = len(barriers) % 8 == 0 or finished
            t0 = time.perf_counter()
            if sample:
                with CaptureQueriesContext(connection) as queries:
                    runner.send(report)
            else:
                runner.send(report)
            record_s = time.perf_counter() - t0
            control_s += poll_s + record_s
            barriers.append(
                {
                    "known_steps": len(runner.steps),
                    "reported_steps": len(report.steps),
                    "record_ms": _ms(record_s),
                    "queries": len(queries) if sample else None,
                    "writes": _writes(queries) if sample else None,
                }
            )
            if probe is None and len(runner.steps) >= min(probe_known, planned_steps):
                # a measurement of its own (one more barrier, and the operation document read
                # through the API, 11 MB at this size): not part of the handoffs' time
                t0 = time.perf_counter()
                probe = websocket_probe(client, runner, events, operation_id)
                probe_s = time.perf_counter() - t0
        elapsed = time.perf_counter() - t_start - probe_s
    html_s = page_renders(operation_id, progress_events)
    t0 = time.perf_counter()
    assert drive.operation_drive(pk=op.pk, budget_s=30, poll_s=0) == OperationStatus.COMPLETED
    finalize_s = time.perf_counter() - t0
    document_at_end = measure_document(client, operation_id, 1)
    operation_events = [b for g, _, b in events if g == f"operation_{operation_id}"]
    sampled = [b for b in barriers if b["writes"] is not None]
    return {
        "operation_id": operation_id,
        "granularity": body["granularity"],
        "steps": planned_steps,
        "vnodes_moved": runner.moved[0],
        "start_202_ms": _ms(start_s),
        "barriers": len(barriers),
        "elapsed_s": round(elapsed, 3),  # without the websocket probe's
        "websocket_probe_s": round(probe_s, 3),
        "control_plane_s": round(control_s, 3),
        "simulated_runner_s": round(runner_s, 3),
        "finalize_ms": _ms(finalize_s),
        "handoffs_per_s": round(runner.moved[0] / elapsed, 1),
        "handoffs_per_control_plane_s": round(runner.moved[0] / control_s, 1),
        "reported_steps_per_barrier": {
            "median": statistics.median(b["reported_steps"] for b in barriers),
            "max": max(b["reported_steps"] for b in barriers),
        },
        "record_per_barrier_ms": {
            "median": round(statistics.median(b["record_ms"] for b in barriers), 2),
            "max": round(max(b["record_ms"] for b in barriers), 2),
        },
        # of recording a barrier: building the page's delta event (the dashboard's receiver)
        "delta_event_per_barrier_ms": {
            "median": _ms(statistics.median(delta_s)) if delta_s else None,
            "max": _ms(max(delta_s)) if delta_s else None,
            "total_s": round(sum(delta_s), 3),
        },
        # not in recording: the page's socket rendering an event for a page showing 100 steps
        "page_render_per_event_ms": {
            "median": _ms(statistics.median(html_s)) if html_s else None,
            "max": _ms(max(html_s)) if html_s else None,
            "total_s": round(sum(html_s), 3),
        },
        "orchestrator_tick_ms": {
            "median": _ms(statistics.median(tick_s)),
            "max": _ms(max(tick_s)),
            "total_s": round(sum(tick_s), 3),
        },
        "per_barrier_sampled": len(sampled),
        "queries_per_barrier": {
            "median": statistics.median(b["queries"] for b in sampled),
            "max": max(b["queries"] for b in sampled),
        },
        "writes_per_barrier": {
            "median": statistics.median(b["writes"] for b in sampled),
            "max": max(b["writes"] for b in sampled),
        },
        "operation_events": len(operation_events),
        "event_bytes": {
            "median": statistics.median(operation_events) if operation_events else None,
            "max": max(operation_events) if operation_events else None,
        },
        "websocket_probe": probe,
        "document_at_start": document_at_start,
        "document_at_end": document_at_end,
    }


def websocket_probe(
    client: Any, runner: SimulatedRunner, events: list[tuple[str, str, int]], operation_id: str
) -> dict[str, Any]:
    """One more barrier at which one step of those the runner knows changes (its hold queue
    grows): the bytes of its delta event, against the operation document a page would
    otherwise re-read."""
    from workers.rescale.protocol import StepPhase

    changing = next(
        (n for n, s in sorted(runner.steps.items()) if s.phase == StepPhase.COLLECTING),
        min(runner.steps),
    )
    step = runner.steps[changing]
    runner.steps[changing] = replace(step, hold_queue=step.hold_queue + 17)
    before = len(events)
    runner.send(runner.report())
    group = f"operation_{operation_id}"
    (delta,) = [b for g, _, b in events[before:] if g == group]
    document = client.get(f"/api/v1/operations/{operation_id}")
    return {
        "known_steps": len(runner.steps),
        "changed_steps": 1,
        "event_bytes": delta,
        "document_bytes": len(document.content),
        "document_over_event": round(len(document.content) / delta, 1),
    }


# -- the run ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Sizes:
    pus: int
    pus_per_worker: int
    vnodes: int
    runs: int
    requests: int
    steps_in_flight: int
    probe_known: int


FULL = Sizes(pus=1024, pus_per_worker=8, vnodes=32768, runs=5, requests=200,
             steps_in_flight=256, probe_known=1000)  # fmt: skip
QUICK = Sizes(pus=64, pus_per_worker=8, vnodes=1024, runs=2, requests=20,
              steps_in_flight=32, probe_known=100)  # fmt: skip


PARTS = ("planner", "dry_run", "get_cluster", "handoffs")


def run(sizes: Sizes, only: tuple[str, ...] = PARTS) -> dict[str, Any]:
    """Every measure (those named in ``only``), in the current database (empty; the caller
    owns it)."""
    from django.test import Client

    with mock.patch("rescaler.operations.enqueue.operation_drive_enqueue", lambda pk: None):
        log(f"registering {sizes.pus} PUs, {sizes.vnodes} vnodes", prefix=PREFIX)
        built = build_cluster(sizes.pus, sizes.pus_per_worker, sizes.vnodes)
        client = Client(HTTP_AUTHORIZATION=f"Token {built.pop('token')}")
        user = built.pop("user")
        # as the server's process at its start (rescaler/asgi.py): what is alive before the
        # requests is frozen, out of every full collection's walk
        gc.collect()
        gc.freeze()
        added = built["added_parallel_units"]
        result: dict[str, Any] = {"cluster": built}
        if "planner" in only:
            log("planner", prefix=PREFIX)
            result["planner"] = measure_planner(added, sizes.runs)
        if "dry_run" in only:
            log("dry run through the API", prefix=PREFIX)
            result["dry_run"] = measure_dry_run(client, added, sizes.runs)
        if "get_cluster" in only:
            log("GET /api/v1/cluster", prefix=PREFIX)
            warmup = max(sizes.requests // 10, 2)
            result["get_cluster"] = measure_cluster(client, sizes.requests, warmup=warmup)
        if "handoffs" in only:
            log(f"driving {sizes.vnodes // 2} steps with the simulated runner", prefix=PREFIX)
            result["handoffs"] = drive_operation(
                client, user, added, sizes.steps_in_flight, sizes.probe_known
            )
    built["added_parallel_units"] = len(added)
    return result


GOALS = {
    "plan_ms": 100,
    "dry_run_ms": 500,
    "get_cluster_p99_ms": 200,
    "handoffs_per_s": 1000,
}


def table(result: dict[str, Any]) -> str:
    rows: list[tuple[str, str, str, str]] = []
    if "planner" in result:
        rows += _planner_rows(result["planner"])
    if "dry_run" in result:
        rows += _dry_run_rows(result["dry_run"])
    if "get_cluster" in result:
        rows += _cluster_rows(result["get_cluster"])
    if "handoffs" in result:
        rows += _handoff_rows(result["handoffs"])
    return format_table(("measure", "plain / a", "weighted / b", "goal"), rows)


def _planner_rows(p: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    return [
        ("plan, 2x scale-out (planner)", fmt(p["plan_plain"]["median_ms"], ",.1f", " ms"),
         fmt(p["plan_weighted"]["median_ms"], ",.1f", " ms"), f"<= {GOALS['plan_ms']} ms"),
        ("  its CPU time in this process, median", fmt(p["plan_plain"]["cpu_median_ms"],
         ",.1f", " ms"), fmt(p["plan_weighted"]["cpu_median_ms"], ",.1f", " ms"), "-"),
        ("cluster view + validate (Postgres)", fmt(p["cluster_view"]["median_ms"], ",.1f", " ms"),
         fmt(p["validate_weighted"]["median_ms"], ",.2f", " ms"), "-"),
    ]  # fmt: skip


def _dry_run_rows(d: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    return [
        ("dry run through the API", fmt(d["plain"]["median_ms"], ",.0f", " ms"),
         fmt(d["weighted"]["median_ms"], ",.0f", " ms"), f"<= {GOALS['dry_run_ms']} ms"),
        ("  its CPU time in this process, median", fmt(d["plain"]["cpu_median_ms"], ",.0f",
         " ms"), fmt(d["weighted"]["cpu_median_ms"], ",.0f", " ms"), "-"),
    ]  # fmt: skip


def _cluster_rows(c: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    return [
        ("GET /api/v1/cluster p50 / p99", fmt(c["p50_ms"], ",.1f", " ms"),
         fmt(c["p99_ms"], ",.1f", " ms"), f"p99 <= {GOALS['get_cluster_p99_ms']} ms"),
        ("  its CPU time in this process, median", fmt(c["cpu_median_ms"], ",.1f", " ms"),
         "", "-"),
        ("GET /api/v1/cluster queries / bytes", fmt(c["queries"]), fmt(c["response_bytes"]), "-"),
    ]  # fmt: skip


def _handoff_rows(h: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    probe = h["websocket_probe"] or {}
    return [
        (f"handoffs ({h['steps']:,} steps), wall / control plane",
         fmt(h["handoffs_per_s"], ",.0f", " vnodes/s"),
         fmt(h["handoffs_per_control_plane_s"], ",.0f", " vnodes/s"),
         f">= {GOALS['handoffs_per_s']:,} vnodes/s"),
        ("Postgres writes / queries per barrier (median)", fmt(h["writes_per_barrier"]["median"]),
         fmt(h["queries_per_barrier"]["median"]), "-"),
        ("recording one barrier (median / max)", fmt(h["record_per_barrier_ms"]["median"], ",.1f",
         " ms"), fmt(h["record_per_barrier_ms"]["max"], ",.1f", " ms"), "-"),
        ("of which the delta event (dashboard), median / max",
         fmt(h["delta_event_per_barrier_ms"]["median"], ",.1f", " ms"),
         fmt(h["delta_event_per_barrier_ms"]["max"], ",.1f", " ms"), "-"),
        ("a page's socket renders an event, 100 rows shown (not recording)",
         fmt(h["page_render_per_event_ms"]["median"], ",.1f", " ms"),
         fmt(h["page_render_per_event_ms"]["max"], ",.1f", " ms"), "-"),
        ("reported steps per barrier (median / max)",
         fmt(h["reported_steps_per_barrier"]["median"]),
         fmt(h["reported_steps_per_barrier"]["max"]), "-"),
        ("orchestrator tick (median / max)", fmt(h["orchestrator_tick_ms"]["median"], ",.1f",
         " ms"), fmt(h["orchestrator_tick_ms"]["max"], ",.1f", " ms"), "-"),
        (f"websocket event, 1 of {probe.get('known_steps', 0):,} steps changed / document",
         fmt(probe.get("event_bytes"), ",", " B"), fmt(probe.get("document_bytes"), ",", " B"),
         "a delta"),
        ("operation document GET (at the end)", fmt(h["document_at_end"]["median_ms"], ",.0f",
         " ms"), fmt(h["document_at_end"]["response_bytes"], ",", " B"), "-"),
    ]  # fmt: skip


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="64 PUs x 1,024 vnodes: a smoke run")
    parser.add_argument("--pus", type=int, help="parallel units (default 1,024)")
    parser.add_argument("--vnodes", type=int, help="vnodes of the fragment (default 32,768)")
    parser.add_argument("--steps-in-flight", type=int, help="of the driven operation (256)")
    parser.add_argument("--requests", type=int, help="GET /api/v1/cluster requests (200)")
    parser.add_argument("--allow-load", action="store_true", help="run above load 1.0, INVALID")
    parser.add_argument(
        "--only",
        help=f"comma-separated parts to measure, of {', '.join(PARTS)} (default: all)",
    )
    parser.add_argument("--out", help="the JSON report (default bench/results/control_plane.json)")
    return parser


def sizes_of(args: argparse.Namespace) -> Sizes:
    """The sizes of a run: the full or quick ones, with what the command line overrides."""
    given = {
        "pus": args.pus,
        "vnodes": args.vnodes,
        "steps_in_flight": args.steps_in_flight,
        "requests": args.requests,
    }
    return replace(
        QUICK if args.quick else FULL, **{k: v for k, v in given.items() if v is not None}
    )


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    validity, load = check_load(args.allow_load, prefix=PREFIX)
    sizes = sizes_of(args)
    only = tuple(parse_names(args.only, PARTS, "part")) if args.only else PARTS

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rescaler.settings.test")
    import django
    from django.conf import settings

    settings.DATABASES["default"].setdefault("TEST", {})["NAME"] = (
        f"bench_control_plane_{os.getpid()}"
    )
    django.setup()
    from django.db import connection
    from django.test.utils import setup_test_environment

    setup_test_environment()
    log(
        f"creating the throwaway database {settings.DATABASES['default']['TEST']['NAME']}",
        prefix=PREFIX,
    )
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        result = run(sizes, only)
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
    out = results_path(args.out, PREFIX, args.quick)
    load_end = [round(x, 2) for x in os.getloadavg()]
    report = {
        "benchmark": "control plane at scale",
        "command": command_line(),
        "quick": args.quick,
        "only": list(only),
        "sizes": vars(sizes),
        **trust_fields(validity, load, [{"phase": "end", "load": load_end}]),
        "load_1m_at_start": load[0],
        "goals": GOALS,
        "method": "in process, against Postgres: Django's test client for the API (no network, "
        "no ASGI server); a simulated runner (no Spark, no state moved, no epoch waited for) "
        "with the product's orchestrator, OrmChannel, OrmControl and delta events",
        **result,
        "machine": machine_info(packages=("django", "djangorestframework", "psycopg")),
    }
    write_json(out, report)
    print(table(result))
    status = "" if validity.valid else f"  INVALID: {validity.reason}"
    print(f"\nload average {load} at the start, {load_end} at the end{status}")
    print(f"-> {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
