"""The pipeline runner: a long-running Spark driver that runs one job per epoch.

Each epoch (a Structured Streaming micro-batch, handled in ``foreachBatch``):

1. the barrier (:mod:`workers.barrier`) applies pending commands and plans the epoch's placement
   durably, so a re-run of this epoch after a crash routes identically;
2. the epoch's Spark job (:mod:`workers.job`) routes every record to its PU's task, which folds
   it into the PU's store;
3. the runner checks that every PU task reported, then reports the epoch: rows, duration, per-PU
   and per-vnode load, malformed lines.

Between epochs it watches the query, and forces an empty epoch when control work waits on an idle
stream (:mod:`workers.idle`).

Exactly once comes from the stores (updates + applied-epoch marker in one atomic write) and from
Spark's offset log (a crashed epoch is re-run with the same offsets and the same plan).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workers import faults
from workers.barrier import Barrier
from workers.clock import WATERMARK_FILE, Watermark
from workers.config import RunnerConfig
from workers.control import (
    Command,
    ControlInterface,
    ControlUnavailable,
    EpochReport,
    Heartbeat,
    PatientControl,
    PuLoad,
    Topology,
)
from workers.cycles import cycle_collection_paused
from workers.idle import BarrierTicks, NoDataEpochs, awaits_barrier
from workers.job import EpochJob
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
from workers.recovery.location import RecoveryLocation
from workers.recovery.rebuild import pending_rebuild
from workers.recovery.replay import ReplayLog
from workers.recovery.snapshots import SnapshotEvery, Snapshots, recovery_partitions
from workers.recovery.startup import RunnerRecovery
from workers.rescale.executor import HoldQueueBounds, RescaleExecutor
from workers.rescale.exports import ExportWaitStopped
from workers.rescale.protocol import ProgressAck
from workers.restarts import QueryGivenUp, QueryRestarts
from workers.sinks.base import Sink, SinkError
from workers.source_stream import check_source
from workers.sources.control import ControlStream
from workers.spark_session import build_spark, spark_info
from workers.start_phases import Background, StartPhases
from workers.vnode_load import RecordsPerVnode
from workers.worker_pool import ExecutorsMissing, WorkerPool

log = logging.getLogger("workers.runner")


class RunnerError(Exception):
    """The runner cannot start or continue; the message says what to do."""


class StopRequested(Exception):
    """Raised at the start of a micro-batch after a stop: the batch changes nothing and Spark
    does not commit it, so the next start re-runs it from its logged offsets."""


@dataclass(frozen=True)
class EpochTimings:
    """Where one epoch's time went on the driver, inside Spark's ``foreachBatch`` (Spark's own
    share around it, offsets and commit logs, is in the query's progress ``durationMs``)."""

    plan_s: float  # the barrier: commands, operation phases, the recorded plan
    build_s: float  # the epoch's DataFrame, built and analysed (py4j calls into the JVM)
    spark_job_s: float  # the Spark job: scheduling, every PU task, the collected reports
    bookkeeping_s: float  # checking the reports, the rescale ledger
    report_s: float  # the epoch report to the control plane

    def __str__(self) -> str:  # formatted only when the log line is written
        parts = ("plan", "build", "spark_job", "bookkeeping", "report")
        return ", ".join(f"{p} {getattr(self, p + '_s') * 1000:.0f} ms" for p in parts)


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
        faults.arm()  # a test's fault: the tasks must find us
        # an outage of the control plane (its database restarting) is waited out, not fatal
        self.control: ControlInterface = PatientControl(
            control, patience_s=config.control_patience_s
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
        self._replay_pruned: int | None = None
        # while lost stores are rebuilt: only the epoch being re-run may start (its plan)
        self._rebuilding = False
        self._rerun_plan: EpochPlan | None = None
        self.placements: dict[str, VnodeMapping] = {}
        self.executor: RescaleExecutor
        self.snapshots: Snapshots
        self.barrier: Barrier
        self.job: EpochJob
        self.spark: Any = None
        self.query: Any = None
        self.last_epoch = -1
        self.status = "starting"
        self._stop = threading.Event()
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
        self.last_timings = EpochTimings(0.0, 0.0, 0.0, 0.0, 0.0)
        self.vnode_records = RecordsPerVnode()  # the vnodes' load, for the planner

    # -- set-up ------------------------------------------------------------------------------
    @property
    def worker_pus(self) -> dict[str, list[int]]:
        return self.workers.worker_pus()

    def _check_sink_not_ahead(self, committed: int | None = None) -> None:
        """Refuse to write into another run's target. A sink's record of what it wrote is keyed
        by (fragment, epoch, PU), and a fresh state directory numbers epochs from 0 again, so its
        epochs would be taken for replays and never written. The sink may be one epoch ahead of
        the checkpoint (a crash between its write and Spark's commit), never more."""
        fragment = self.pipeline.fragments[-1].name
        held = self.sink.last_epoch(fragment)
        if committed is None:
            committed = self._committed_epoch()
            pending = pending_rebuild(self.config.pipeline_dir)
            if pending is not None:  # the rebuild's re-runs rewound the checkpoint for a while
                committed = max(committed, int(pending["target"]))
        if held is not None and held > committed + 1:
            raise SinkError(
                f"{self.sink.describe()} already holds epoch {held} of {fragment}, but this "
                f"state directory ({self.config.pipeline_dir}) has committed only up to epoch "
                f"{committed}: its epochs {committed + 1}..{held} would be taken for replays and "
                f"never written. The sink belongs to an earlier run whose state is gone: point it "
                f"at a new table, Delta path or subject, or clear what it holds "
                f"(docs/sources-and-sinks.md, 'One identity per (fragment, epoch, PU)')"
            )

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
    def _make_snapshots(self) -> Snapshots:
        cfg = self.config
        return Snapshots(
            spark=self.spark,
            pipeline=self.pipeline.name,
            pipeline_dir=cfg.pipeline_dir,
            location=RecoveryLocation(cfg.recovery_location),
            every=SnapshotEvery.parse(cfg.snapshot_every),
            partitions=recovery_partitions(cfg.pipeline_dir, cfg.recovery_partitions),
            keep=cfg.snapshots_kept,
            backend=cfg.backend,
        )

    def _snapshot_now(self, command: Command) -> str:
        by = str(command.payload.get("requested_by", "") or "unknown")
        self.snapshots.request(by)
        return f"snapshot requested by {by}: taken at the next barrier with no vnode in transit"

    def _load_placements(self) -> dict[str, VnodeMapping]:
        saved = self.placements_store.load()
        if saved is not None:
            names = {f.name for f in self.pipeline.fragments}
            if set(saved) != names:
                raise RunnerError(
                    f"state directory {self.config.pipeline_dir} holds fragments {sorted(saved)}, "
                    f"pipeline {self.pipeline.name!r} has {sorted(names)}: use another STATE_DIR"
                )
            return saved
        initial = list(range(self.config.initial_pus))
        placements = {
            f.name: VnodeMapping.initial(f.name, f.vnodes, initial) for f in self.pipeline.fragments
        }
        self.placements_store.save(placements)
        return placements

    def _make_executor(self) -> RescaleExecutor:
        def report(progress: dict[str, Any]) -> ProgressAck | None:
            return self.control.report_progress(self.pipeline.name, progress)

        return RescaleExecutor(
            self.config.pipeline_dir,
            self.placements,
            backend=self.config.backend,
            worker_pus=self.workers.usable_pus(),
            report=report,
            spark=self.spark,
            hold_queue_bounds=HoldQueueBounds(
                self.config.hold_queue_step_bytes, self.config.hold_queue_pu_bytes
            ),
            should_stop=self._stop.is_set,
        )

    def topology(self) -> Topology:
        fragments: dict[str, dict[str, Any]] = {}
        described = {"source": self.job.describe_source(), "sink": self.job.sink.describe()}
        for row in self.pipeline.topology_fragments():
            entry = dict(row)
            if row["kind"] in described:
                entry["operator"] = described[row["kind"]]
            placement = self.placements.get(row["name"])
            if placement is not None:
                entry.update(
                    parallel_units=list(placement.parallel_units),
                    mapping=list(placement.mapping),
                    version=placement.version,
                )
            else:
                entry["parallel_units"] = sorted(
                    {pu for p in self.placements.values() for pu in p.parallel_units}
                )
            fragments[row["name"]] = entry
        return Topology(
            pipeline=self.pipeline.name,
            workers=self.worker_pus,
            fragments=fragments,
            spark=spark_info(self.spark) if self.spark is not None else {},
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
    def _source_offset(self, epoch: int) -> dict[str, Any]:
        """The pipeline's source offset after ``epoch``, from Spark's offset log: a version line,
        the batch's metadata, then one line per source, the pipeline's first (the control
        stream's second)."""
        path = self.config.pipeline_dir / "checkpoint" / "offsets" / str(epoch)
        try:
            lines = path.read_text("utf-8").splitlines()
            offset: dict[str, Any] = json.loads(lines[2])
            return offset
        except (OSError, ValueError, IndexError):
            return {}

    def _on_batch(self, df: Any, epoch: int) -> None:
        with self._batch_lock:
            if self._stop.is_set():
                raise StopRequested(f"stopped before epoch {epoch}")
            try:
                self._imports_checked()
            except BaseException as exc:
                self._error = exc
                raise
            if self._rebuilding:
                plan = self._rerun_plan
                if plan is None or plan.epoch != epoch:
                    raise StopRequested(f"the rebuild re-runs committed epochs only, not {epoch}")
                self._rerun_batch(df, plan)
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
        started = time.perf_counter()
        try:
            plan = self._recorded(self.barrier.plan(epoch))
            pending = self.snapshots.due(
                epoch, busy=bool(self.executor.running()), last=self._last_epoch_now(epoch)
            )
            if pending is not None:
                plan = dataclasses.replace(plan, snapshot=pending.snapshot_id)
            planned = time.perf_counter()
            results = self.job.run(df, plan)
        except ExportWaitStopped as exc:  # stopped at a barrier waiting for full hold queues
            raise StopRequested(f"stopped before epoch {epoch}: {exc}") from exc
        except BaseException as exc:  # surfaced by run(); Spark would otherwise only log it
            self._error = exc
            raise
        ran = time.perf_counter()
        stats = [r for r in results if r["kind"] == "stat"]
        self._check_reports(plan, stats)
        malformed = [r["text"] for r in results if r["kind"] == "malformed"]
        first = self.pipeline.fragments[0].name
        self.vnode_records.epoch((f.name for f in self.pipeline.fragments), stats)
        report = EpochReport(
            pipeline=self.pipeline.name,
            epoch=epoch,
            rows=sum(s["source_rows"] for s in stats if s["fragment"] == first) + len(malformed),
            malformed=len(malformed),
            duration_s=round(time.perf_counter() - started, 4),
            committed_at=time.time(),
            source_offset=self._source_offset(epoch),
            per_pu=[
                PuLoad(
                    s["fragment"],
                    s["pu"],
                    s["records"],
                    s["keys"],
                    s["bytes"],
                    executor=s.get("executor", ""),
                    host=s.get("host", ""),
                )
                for s in stats
            ],
            per_vnode={
                frag.name: {
                    int(v): (kb[0], kb[1])
                    for s in stats
                    if s["fragment"] == frag.name
                    for v, kb in s["vnodes"].items()
                }
                for frag in self.pipeline.fragments
            },
            mapping_versions={n: p.version for n, p in plan.placements.items()},
            malformed_samples=malformed[:5],
            records_per_vnode=self.vnode_records.report(),
        )
        with cycle_collection_paused():  # the steps the epoch moved on, and their report
            self.executor.committed(epoch, stats)
        self.watermark.committed(plan, stats)
        self.no_data.epoch_committed(stats)
        if pending is not None:  # the stores are copied: written out beside the next epochs
            self.snapshots.epoch_committed(pending, plan.placements)
        self.last_epoch = epoch
        self.start_phases.first_epoch_committed(epoch)  # once
        booked = time.perf_counter()
        self.control.report_epoch(report)
        build_s, job_s = self.job.last_timings
        self.last_timings = EpochTimings(
            plan_s=planned - started,
            build_s=build_s,
            spark_job_s=job_s,
            bookkeeping_s=booked - ran,
            report_s=time.perf_counter() - booked,
        )
        if malformed:
            log.warning(
                "epoch %d: %d malformed records, e.g. %s", epoch, len(malformed), malformed[0]
            )
        if self._on_epoch is not None:
            self._on_epoch(report)
        log.info(
            "epoch %d committed: %d rows in %.3fs (%s)%s",
            epoch,
            report.rows,
            report.duration_s,
            self.last_timings,
            "" if report.rows else " (empty: a barrier for waiting control work)",
        )

    def _recorded(self, plan: EpochPlan) -> EpochPlan:
        """Keep the epoch's plan and offsets in the replay log while there is a snapshot to
        rebuild a lost store from (or one is due), and have the stores keep their outputs of
        the epochs a rebuild would re-run."""
        replay_from = self.snapshots.replay_from()
        if replay_from is None and not self.snapshots.every.enabled:
            return plan
        offsets = self.config.pipeline_dir / "checkpoint" / "offsets" / str(plan.epoch)
        try:
            self.replay_log.record(plan, offsets.read_text("utf-8"))
        except OSError as exc:  # a rebuild will refuse for want of this epoch, saying so
            log.warning("epoch %d is not in the replay log: %s", plan.epoch, exc)
        latest = self.snapshots.latest_epoch
        if latest is not None and latest != self._replay_pruned:
            self.replay_log.prune(before=latest)
            self._replay_pruned = latest
        return dataclasses.replace(plan, outputs_from=replay_from)

    # -- lost stores (workers/recovery/rebuild.py) -------------------------------------------
    def _check_stores(self) -> None:
        """Check every store against the epoch Spark committed last, and rebuild the lost ones
        (Spark re-runs the epochs after the snapshot: only those may start meanwhile)."""
        found = self.recovery.lost_stores(self.spark, self.placements, self._committed_epoch())
        if found is None:
            return
        self._rebuilding = True
        try:
            self.recovery.rebuild(found, self.spark, self.placements, rerun=self._rerun_epoch)
        finally:
            self._rebuilding = False

    def _rerun_epoch(self, plan: EpochPlan) -> None:
        """Spark re-runs the committed epoch ``plan.epoch`` (the checkpoint was set for it);
        returns once it is committed again."""
        self._rerun_plan = plan
        query = self._start_query()
        try:
            while self._committed_epoch() < plan.epoch:
                if not query.isActive:
                    raise RunnerError(
                        f"re-running epoch {plan.epoch} to rebuild lost stores failed: "
                        f"{self._error or query.exception()}; the next start tries again"
                    )
                time.sleep(0.05)
        finally:
            self._rerun_plan = None
            if query.isActive:
                query.stop()

    def _rerun_batch(self, df: Any, plan: EpochPlan) -> None:
        try:
            results = self.job.run(df, plan)
        except BaseException as exc:
            self._error = exc
            raise
        stats = [r for r in results if r["kind"] == "stat"]
        self._check_reports(plan, stats)
        log.info(
            "epoch %d re-run for the rebuild: %d records folded again",
            plan.epoch,
            sum(s["records"] for s in stats if not s["replay"]),
        )

    def _check_reports(self, plan: EpochPlan, stats: list[dict[str, Any]]) -> None:
        """Every PU task of every fragment must have reported: a rescale action (seal, ingest,
        drop) happens inside the task, so an epoch with a silent task is not committed as done."""
        reported = {(s["fragment"], s["pu"]) for s in stats}
        for frag in self.pipeline.fragments:
            missing = [
                pu
                for pu in plan.placements[frag.name].parallel_units
                if (frag.name, pu) not in reported
            ]
            if missing:
                raise RunnerError(
                    f"epoch {plan.epoch}: {frag.name} PU tasks {missing} did not report; "
                    f"the epoch is re-run"
                )

    # -- the loop ------------------------------------------------------------------------------
    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(self.config.heartbeat_interval_s):
            self._beat()

    def _beat(self) -> None:
        try:
            info = spark_info(self.spark) if self.spark is not None else {}
            beat = Heartbeat(
                self.pipeline.name, self.last_epoch, self.status, info, self.start_phases.to_json()
            )
            self.control.heartbeat(beat)
        except ControlUnavailable as exc:  # waited out by the epochs; the next beat replaces it
            log.warning("heartbeat missed: %s", exc)
        except Exception:  # a missed heartbeat must never kill the pipeline
            log.exception("heartbeat failed")

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
        # beats from the start on, with the start's phases: /healthz says what a start waits for
        heart = threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True)
        heart.start()
        try:
            # what needs no Spark first: a refusal says so before a JVM starts
            with phases.phase("checks"):
                restoring = self.recovery.restore_manifest()
                check_source(cfg, self.pipeline)  # a missing stream or server
                self._check_sink_not_ahead(restoring.epoch if restoring is not None else None)
                if restoring is not None:
                    self.placements = self.recovery.begin_restore(restoring)
                else:
                    self.placements = self._load_placements()
            with phases.phase("spark"):
                self.spark = build_spark(cfg, f"rescaler-{self.pipeline.name}")
            self._start_with_spark(restoring)
        except BaseException:  # refused or failed: the JVM goes with the start
            if self.spark is not None:
                self.spark.stop()
            self._start_failed()
            raise
        self.status = "running"
        self._beat()
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
            self._beat()
            self.spark.stop()
        return self.last_epoch

    def _start_failed(self) -> None:
        self.status = "stopped"
        self._stop.set()  # the heartbeat thread's last beat says so
        self._beat()

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
            lambda: check_on_executors(self.spark, cfg.ref, warm=self._task_modules()),
        )
        try:
            record(cfg.pipeline_dir, cfg.ref, self.pipeline)
            with phases.phase("workers"):
                try:
                    self.workers.start(self.spark, self._committed_epoch() + 1)
                except ExecutorsMissing as exc:
                    raise RunnerError(str(exc)) from None
            if restoring is not None:
                with phases.phase("restore"):
                    self.recovery.restore(self.spark, restoring, self.placements)
                self.watermark = self._load_watermark()  # the snapshot's, as the stores are
                self._read_control_stream()
            self.snapshots = self._make_snapshots()
            self.executor = self._make_executor()
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
                self.spark, cfg, self.pipeline, self.sink, control=self.control_stream
            )
            with phases.phase("prepare check"):
                self.job.check_prepared()
            if restoring is None:
                if self._committed_epoch() >= 0:  # a restart: the check has stores to read
                    # its tasks then take the Python workers the import check started, rather
                    # than starting as many again beside them on the same cores
                    self._imports_checked()
                with phases.phase("store check"):
                    self._check_stores()
            with phases.phase("register"):
                self.control.register(self.topology())
                self.last_epoch = self._committed_epoch()
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

    def _task_modules(self) -> tuple[str, ...]:
        """What an epoch's task imports beyond the pipeline's module: the task itself, the
        state store's backend and the sink."""
        backend = f"workers.state.{self.config.backend}_store"
        return ("workers.epoch", backend, type(self.sink).__module__)

    def _start_query(self) -> Any:
        cfg = self.config
        phases = self.start_phases
        starting = phases.finished_s is None and phases.current is None
        if starting and not self._rebuilding:  # a rebuild's re-runs are the store check's
            phases.then("query start")
        return (
            self.job.stream()
            .writeStream.foreachBatch(self._on_batch)
            .option("checkpointLocation", str(cfg.pipeline_dir / "checkpoint"))
            .trigger(processingTime=f"{cfg.trigger_interval_s} seconds")
            .queryName(f"rescaler_{self.pipeline.name}")
            .start()
        )

    def _watch_query(self) -> str | None:
        """Wait until done (None) or until the query fails (its error). Meanwhile, force a
        barrier whenever control work waits on an idle stream (see workers/idle.py)."""
        while not self._done() or self._in_batch:
            if not self.query.isActive:
                if self._stop.is_set():
                    return None  # the batch after the stop refused to start: a clean stop
                return str(self._error or self.query.exception())
            self.ticks.poll(
                # Spark may be planning a micro-batch before foreachBatch runs: that is a
                # barrier on its way, and a tick now would only add an empty epoch behind it
                self._in_batch or self._spark_status("isTriggerActive"),
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
        return self.last_epoch < 0 and not self._spark_status("isDataAvailable", default=True)

    def _spark_status(self, flag: str, *, default: bool = False) -> bool:
        """One flag of the streaming query's status (a call into the JVM)."""
        try:
            return bool(self.query.status.get(flag, default))
        except Exception:  # the query is stopping or the JVM is gone: the loop ends soon
            return default

    def _committed_epoch(self) -> int:
        commits = self.config.pipeline_dir / "checkpoint" / "commits"
        if not commits.is_dir():
            return -1
        epochs = [int(p.name) for p in commits.iterdir() if p.name.isdigit()]
        return max(epochs, default=-1)


def run(config: RunnerConfig, control: ControlInterface | None = None) -> int:
    """Run a pipeline with the file-backed control interface unless another is given."""
    from workers.control import LocalControl

    control = control or LocalControl(Path(config.pipeline_dir) / "control")
    return PipelineRunner(config, control).run()
