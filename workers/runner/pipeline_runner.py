"""The pipeline runner's driver loop: :class:`PipelineRunner` (see :mod:`workers.runner`)."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workers import faults
from workers.barrier import Barrier
from workers.clock import WATERMARK_FILE, Watermark
from workers.config import RunnerConfig
from workers.control import (
    Command,
    ControlInterface,
    EpochReport,
    Heartbeat,
    PatientControl,
    Topology,
)
from workers.epoch.spec import STORE_LOST
from workers.idle import BarrierTicks, NoDataEpochs, awaits_barrier
from workers.job import EpochJob
from workers.layout import prepare_local_root
from workers.pipeline.loading import (
    check_on_executors,
    load_pipeline,
    record,
    resolve_sink,
    ship,
)
from workers.pipeline.model import Pipeline
from workers.pipeline.placement import EpochPlan, PlacementStore, VnodeMapping
from workers.processor.operator import processors_of
from workers.recovery.format import SnapshotManifest
from workers.recovery.replay import ReplayLog
from workers.recovery.snapshots import Snapshots
from workers.recovery.startup import RunnerRecovery
from workers.rescale.executor import RescaleExecutor
from workers.rescale.exports import ExportWaitStopped
from workers.restarts import QueryGivenUp, QueryRestarts
from workers.runner.batch import EpochBatches
from workers.runner.checkpoint import checkpoint_dir, committed_epoch
from workers.runner.checks import check_sink_not_ahead, load_placements
from workers.runner.components import make_executor, make_snapshots, task_modules
from workers.runner.errors import RunnerError, StopRequested
from workers.runner.heartbeat import HeartbeatLoop
from workers.runner.loss import ExecutorLoss
from workers.runner.query import query_status, start_query
from workers.runner.rebuild import StoreRebuild
from workers.runner.replay import ReplayRecording
from workers.runner.reports import EpochTimings
from workers.runner.topology import runner_topology
from workers.sinks.base import Sink
from workers.source_stream import check_source
from workers.sources.control import ControlStream
from workers.spark_session import build_spark, spark_info, stop_spark
from workers.start_phases import Background, StartPhases
from workers.worker_pool import ExecutorsMissing, WorkerPool

log = logging.getLogger("workers.runner")


class PipelineRunner:
    """Runs one pipeline until stopped (a ``stop`` command, ``--epochs``, or a signal)."""

    def __init__(
        self,
        config: RunnerConfig,
        control: ControlInterface,
        *,
        on_epoch: Callable[[EpochReport], None] | None = None,
    ) -> None:
        self.start_phases = StartPhases()  # from here to the first committed epoch
        self._warm: Background  # the executors' import check (_start_with_spark)
        self._fatal: RunnerError | None = None  # ends the runner instead of the query
        self.config = config
        self._stop = threading.Event()
        faults.arm()  # a test's fault: the tasks must find us
        # an outage of the control plane (its database restarting) is waited out, not fatal
        self.control: ControlInterface = PatientControl(
            control, patience_s=config.control_patience_s
        )
        self.heartbeat = HeartbeatLoop(
            self.control, self._heartbeat, config.heartbeat_interval_s, self._stop
        )
        with self.start_phases.phase("pipeline"):
            self.pipeline: Pipeline = load_pipeline(config.ref, config.vnodes)
            self.sink: Sink = resolve_sink(config, self.pipeline)  # none: the start stops here
        self.watermark = self._load_watermark()
        self.placements_store = PlacementStore(config.pipeline_dir)
        self.replay_log = ReplayLog(config.pipeline_dir)
        self.recovery = RunnerRecovery(
            config, self.pipeline, self.control, self.placements_store, self.replay_log
        )
        self.replay = ReplayRecording(config.pipeline_dir, self.replay_log)
        # while lost stores are rebuilt: only the epoch being re-run may start (its plan)
        self.rebuild = StoreRebuild(self.recovery, config.pipeline_dir)
        self.placements: dict[str, VnodeMapping] = {}
        self.executor: RescaleExecutor
        self.snapshots: Snapshots
        self.barrier: Barrier
        self.job: EpochJob
        self.batches: EpochBatches
        self.spark: Any = None
        self.query: Any = None
        self.last_epoch = -1
        self.status = "starting"
        self._batch_lock = threading.Lock()
        self._in_batch = False
        self._on_epoch = on_epoch
        self._error: BaseException | None = None
        self.control_stream: ControlStream
        self.ticks: BarrierTicks
        self._read_control_stream()
        self.no_data = NoDataEpochs(
            (op.time_mode for f in self.pipeline.fragments for op in processors_of(f.operator)),
            lambda: self.watermark.advanced,
            config.idle_barrier_s,
        )
        self.workers = WorkerPool(config, lambda: self.placements, self._workers_changed)
        self.loss = ExecutorLoss(self.workers, lambda: self.workers.observe(self.last_epoch + 1))
        if not config.is_local:  # the stores are on their PUs' home executors
            self.recovery.homes = self.workers.home_locations

    # -- set-up ------------------------------------------------------------------------------
    @property
    def worker_pus(self) -> dict[str, list[int]]:
        return self.workers.worker_pus()

    def _read_control_stream(self) -> None:
        """The control stream the checkpoint was written with (workers/sources/control.py): read
        again once a restore has written the snapshot's checkpoint entries."""
        self.control_stream = ControlStream.of(self.config.pipeline_dir)
        self.ticks = BarrierTicks(self.control_stream, self.config.idle_barrier_s)

    def _load_watermark(self) -> Watermark:
        return Watermark(
            self.config.pipeline_dir / WATERMARK_FILE,
            self.pipeline.watermark_delay_ms,
            event_time=self.pipeline.event_time is not None,
        )

    # -- recovery (docs/recovery.md; restore, rebuild and seal: workers/recovery/startup.py) -----
    def _snapshot_now(self, command: Command) -> str:
        by = str(command.payload.get("requested_by", "") or "unknown")
        self.snapshots.request(by)
        return f"snapshot requested by {by}: taken at the next barrier with no vnode in transit"

    def topology(self) -> Topology:
        return runner_topology(
            pipeline=self.pipeline,
            placements=self.placements,
            workers=self.worker_pus,
            source=self.job.describe_source(),
            sink=self.job.sink.describe(),
            spark=self.spark,
        )

    # -- workers (workers/worker_pool.py) -----------------------------------------------------
    def _workers_changed(self, epoch: int) -> None:
        self.executor.set_worker_pus(self.workers.usable_pus())
        self.control.report_workers(self.pipeline.name, epoch, self.workers.snapshot())
        self.control.register(self.topology())

    def _decommission(self, command: Command) -> str:
        holding = {
            pu for p in self.placements.values() for pu in (*p.parallel_units, *p.mapping)
        } | {s.spec.target_pu for op in self.executor.running() for s in op.steps.values()}
        return self.workers.decommission(command, holding, self.last_epoch + 1)

    # -- the epoch ---------------------------------------------------------------------------
    def _on_batch(self, df: Any, epoch: int) -> None:
        with self._batch_lock:
            if self._stop.is_set():
                raise StopRequested(f"stopped before epoch {epoch}")
            try:
                self._imports_checked()
            except BaseException as exc:
                self._error = exc
                raise
            if self.rebuild.active:
                self._rerun_batch(df, self.rebuild.plan_of(epoch))
                return
            self._in_batch = True
            self.ticks.epoch_started()
            if self.start_phases.current is not None:  # the start's query has its first batch
                self.start_phases.then("first epoch")
        try:
            self._run_batch(df, epoch)
        finally:
            self.ticks.epoch_ended()
            self._in_batch = False

    def _run_batch(self, df: Any, epoch: int) -> None:
        try:
            self.batches.run(df, epoch)
        except ExportWaitStopped as exc:  # stopped at a barrier waiting for full hold queues
            raise StopRequested(f"stopped before epoch {epoch}: {exc}") from exc
        except BaseException as exc:  # surfaced by run(); Spark would otherwise only log it
            self._error = exc
            raise

    def _epoch_committed(self, epoch: int) -> None:
        self.last_epoch = epoch
        self.start_phases.first_epoch_committed(epoch)  # once

    @property
    def last_timings(self) -> EpochTimings:
        """Where the last committed epoch's time went on the driver."""
        return self.batches.last_timings

    # -- lost stores (workers/runner/rebuild.py) -----------------------------------------
    def _rebuild_lost_stores(self) -> bool:
        """A start's store check, and the rebuild of lost stores from the newest snapshot and
        the epochs after it; also when a task found its PU's store behind what the PU committed
        (``StoreLost``) while running. Whether it rebuilt any."""
        return self.rebuild.check(
            self.spark,
            self.placements,
            start_query=self._start_query,
            error=lambda: self._error,
            ran=frozenset(self.job.committed),  # the stores its tasks committed in this run
        )

    def _rerun_batch(self, df: Any, plan: EpochPlan) -> None:
        try:
            self.batches.rerun(df, plan)
        except BaseException as exc:
            self._error = exc
            raise

    # -- the loop ------------------------------------------------------------------------------
    def _heartbeat(self) -> Heartbeat:
        info = spark_info(self.spark) if self.spark is not None else {}
        return Heartbeat(
            self.pipeline.name, self.last_epoch, self.status, info, self.start_phases.to_json()
        )

    def _last_epoch_now(self, epoch: int) -> bool:
        """Whether the runner stops after ``epoch`` (--epochs reached, or a stop asked for)."""
        cfg = self.config
        return (cfg.epochs is not None and epoch >= cfg.epochs - 1) or self._stop.is_set()

    def _done(self) -> bool:
        cfg = self.config
        if cfg.epochs is not None and self.last_epoch >= cfg.epochs - 1:
            return True
        return self._stop.is_set()

    def request_stop(self) -> None:
        self._stop.set()

    def run(self) -> int:
        """Run until done; returns the last committed epoch."""
        cfg = self.config
        phases = self.start_phases
        cfg.pipeline_dir.mkdir(parents=True, exist_ok=True)
        if cfg.is_local:  # the driver is the executor: its directory, ready for this state
            prepare_local_root(
                cfg.pipeline_dir,
                Path(cfg.executor_dir) / cfg.pipeline,
                new=not checkpoint_dir(cfg.pipeline_dir).exists(),
            )
        # beats from the start on, with the start's phases: /healthz says what a start waits for
        self.heartbeat.start()
        try:
            # what needs no Spark first: a refusal says so before a JVM starts
            with phases.phase("checks"):
                restoring = self.recovery.restore_manifest()
                check_source(cfg, self.pipeline)  # a missing stream or server
                check_sink_not_ahead(
                    cfg,
                    self.pipeline,
                    self.sink,
                    restoring.epoch if restoring is not None else None,
                )
                if restoring is not None:
                    self.placements = self.recovery.begin_restore(restoring)
                else:
                    self.placements = load_placements(cfg, self.pipeline, self.placements_store)
            with phases.phase("spark"):
                self.spark = build_spark(cfg, f"rescaler-{self.pipeline.name}")
            self._start_with_spark(restoring)
        except BaseException:  # refused or failed: the JVM goes with the start
            if self.spark is not None:
                stop_spark(self.spark)
            self._start_failed()
            raise
        self.status = "running"
        self.heartbeat.beat()
        clean = False
        try:
            # re-running an epoch is always safe (atomic commits, recorded plans): a transient
            # failure must not end the run, and a full disk is waited out (workers/restarts.py)
            restarts = QueryRestarts(cfg.max_query_restarts, Path(cfg.state_dir))
            while not self._done():
                self._error = None
                started_at = self.last_epoch
                self.query = self._start_query()
                failure = self._watch_query()
                if failure is None:
                    break
                if self._fatal is not None:
                    raise self._fatal
                # a worker's executor went (its PUs move now), or a PU's store went: the lost
                # stores are rebuilt before the query restarts (a store the check finds whole
                # after all counts as a failure like any other, so it cannot loop)
                lost = self.loss.handle()
                if (lost or STORE_LOST in failure) and self._rebuild_lost_stores():
                    continue
                try:
                    wait = restarts.failed(failure, progressed=self.last_epoch > started_at)
                except QueryGivenUp as exc:
                    raise RunnerError(str(exc)) from self._error
                log.error(
                    "the streaming query failed (%s); restarting it in %.0f s (%s)",
                    failure,
                    wait,
                    restarts.describe(),
                )
                time.sleep(wait)
            clean = True
        finally:
            self.status = "stopping"
            self._stop.set()
            if self.query is not None and self.query.isActive:
                # no epoch is in flight here (or the runner is failing): a batch that starts
                # now sees the stop flag and changes nothing
                self.query.stop()
            self.snapshots.query_stopped()
            self.snapshots.wait(timeout=120.0)  # a snapshot being written is finished first
            if clean:
                self.recovery.seal(self.spark, self.placements)
            self.status = "stopped"
            self.heartbeat.beat()
            stop_spark(self.spark)
        return self.last_epoch

    def _start_failed(self) -> None:
        self.status = "stopped"
        self._stop.set()  # the heartbeat thread's last beat says so
        self.heartbeat.beat()

    def _start_with_spark(self, restoring: SnapshotManifest | None) -> None:
        """Everything of the start that needs Spark, up to the query's start. The executors'
        import check (which also starts the epoch tasks' Python workers) runs beside the rest
        and the query's start; the first epoch, or a restart's store check, waits for it."""
        cfg = self.config
        phases = self.start_phases
        shipped = ship(self.spark, cfg.ref, cfg.pipeline_dir / "_ship")
        if shipped is not None:
            log.info("pipeline module %s shipped to the executors (addPyFile)", shipped.name)
        # the executors' import check (it also starts the epoch tasks' Python workers) runs
        # beside the rest of the start and the query's; the first epoch waits for it
        self._warm = Background(
            phases,
            "executors' import check",
            lambda: check_on_executors(self.spark, cfg.ref, warm=task_modules(cfg, self.sink)),
        )
        try:
            record(cfg.pipeline_dir, cfg.ref, self.pipeline)
            with phases.phase("workers"):
                try:
                    self.workers.start(self.spark, committed_epoch(self.config.pipeline_dir) + 1)
                except ExecutorsMissing as exc:
                    raise RunnerError(str(exc)) from None
            if restoring is not None:
                with phases.phase("restore"):
                    self.recovery.restore(self.spark, restoring, self.placements)
                self.watermark = self._load_watermark()  # the snapshot's, as the stores are
                self._read_control_stream()
            # each PU's tasks, epochs and background work alike, on its home executor
            homes = None if cfg.is_local else self.workers.home_locations
            self.snapshots = make_snapshots(cfg, self.pipeline, self.spark, homes)
            self.executor = make_executor(
                cfg,
                self.placements,
                worker_pus=self.workers.usable_pus(),
                report=lambda progress: self.control.report_progress(self.pipeline.name, progress),
                spark=self.spark,
                should_stop=self._stop.is_set,
                homes=homes,
            )
            self.barrier = Barrier(
                self.pipeline.name,
                self.control,
                self.executor,
                self.placements,
                self.placements_store,
                on_stop=self._stop.set,
                # before any operation reports its end, the control plane has the new placement
                on_placements_changed=lambda: self.control.register(self.topology()),
                on_barrier=self.workers.observe,
                on_decommission=self._decommission,
                on_snapshot=self._snapshot_now,
                clock=self.watermark.clock,
            )
            self.placements_store.save(self.placements)  # a restart may have reconciled an op
            self.executor.placements_saved()
            self.job = EpochJob(
                self.spark,
                cfg,
                self.pipeline,
                self.sink,
                control=self.control_stream,
                homes=homes,
            )
            self.batches = EpochBatches(
                config=cfg,
                pipeline=self.pipeline,
                job=self.job,
                barrier=self.barrier,
                executor=self.executor,
                snapshots=self.snapshots,
                control=self.control,
                replay=self.replay,
                watermark=self.watermark,
                no_data=self.no_data,
                last_epoch_now=self._last_epoch_now,
                committed=self._epoch_committed,
                on_epoch=self._on_epoch,
            )
            with phases.phase("prepare check"):
                self.job.check_prepared()
            if restoring is None:
                if (
                    committed_epoch(self.config.pipeline_dir) >= 0
                ):  # a restart: the check has stores to read
                    # its tasks then take the Python workers the import check started, rather
                    # than starting as many again beside them on the same cores
                    self._imports_checked()
                with phases.phase("store check"):
                    self._rebuild_lost_stores()
            with phases.phase("register"):
                self.control.register(self.topology())
                self.last_epoch = committed_epoch(self.config.pipeline_dir)
                self.control.report_workers(
                    self.pipeline.name, self.last_epoch, self.workers.snapshot()
                )
        except BaseException:
            with contextlib.suppress(BaseException):  # the start's own error is the one said
                self._warm.result()
            raise

    def _imports_checked(self) -> None:
        """Before the first task that needs them: the executors' import check is done. Its
        failure (the pipeline's module does not import there) ends the runner with its message,
        not just the query."""
        if self._fatal is not None:
            raise self._fatal
        try:
            self._warm.result()
        except BaseException as exc:
            self._fatal = RunnerError(str(exc))
            raise self._fatal from exc

    def _start_query(self) -> Any:
        cfg = self.config
        phases = self.start_phases
        starting = phases.finished_s is None and phases.current is None
        if starting and not self.rebuild.active:  # a rebuild's re-runs are the store check's
            phases.then("query start")
        return start_query(self.job, self._on_batch, cfg, self.pipeline.name)

    def _watch_query(self) -> str | None:
        """Wait until done (None) or until the query fails (its error). Meanwhile, force a
        barrier whenever control work waits on an idle stream (see workers/idle.py)."""
        while not self._done() or self._in_batch:
            if not self.query.isActive:
                if self._stop.is_set():
                    return None  # the batch after the stop refused to start: a clean stop
                return str(self._error or self.query.exception())
            self.loss.watch(self.spark, self.query, self._in_batch)
            self.ticks.poll(
                # Spark may be planning a micro-batch before foreachBatch runs: that is a
                # barrier on its way, and a tick now would only add an empty epoch behind it
                self._in_batch or query_status(self.query, "isTriggerActive"),
                lambda: (
                    self._first_epoch_waits()
                    or awaits_barrier(self.executor.running())
                    or self.workers.executors_changed()
                    or (self.last_epoch >= 0 and self.no_data.due(self.ticks.since_epoch_s()))
                ),
                lambda: bool(self.control.poll_commands(self.pipeline.name)),
            )
            time.sleep(0.05)
        return None

    def _first_epoch_waits(self) -> bool:
        """No epoch yet and Spark found nothing to read: the pipeline is up once it has one, so
        an empty source gets a first (empty) epoch; a source with data gets its own."""
        return self.last_epoch < 0 and not query_status(self.query, "isDataAvailable", default=True)
