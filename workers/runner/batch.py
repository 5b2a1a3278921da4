"""One epoch's batch on the driver (``foreachBatch``): its plan, its Spark job, and what the
runner books and reports once the PU tasks have committed it. :class:`PipelineRunner` decides
whether a batch may run (a stop, a rebuild's re-runs); this module runs it."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

from workers.barrier import Barrier
from workers.clock import Watermark
from workers.config import RunnerConfig
from workers.control import ControlInterface, EpochReport
from workers.cycles import cycle_collection_paused
from workers.idle import NoDataEpochs
from workers.job import EpochJob
from workers.pipeline.model import Pipeline
from workers.pipeline.placement import EpochPlan
from workers.recovery.snapshots import Snapshots
from workers.rescale.executor import RescaleExecutor
from workers.runner.checkpoint import source_offset
from workers.runner.replay import ReplayRecording
from workers.runner.reports import EpochTimings, check_reports, epoch_report, log_committed
from workers.vnode_load import RecordsPerVnode

log = logging.getLogger("workers.runner")


class EpochBatches:
    """Runs the batches of the runner's query, with the parts its start made once Spark was up
    (``PipelineRunner._start_with_spark``). ``last_epoch_now(epoch)``: whether the runner
    stops after ``epoch`` (its snapshot, if one is due, is taken then); ``committed(epoch)``:
    the epoch is committed, before it is reported; ``on_epoch``: its report, once reported."""

    def __init__(
        self,
        *,
        config: RunnerConfig,
        pipeline: Pipeline,
        job: EpochJob,
        barrier: Barrier,
        executor: RescaleExecutor,
        snapshots: Snapshots,
        control: ControlInterface,
        replay: ReplayRecording,
        watermark: Watermark,
        no_data: NoDataEpochs,
        last_epoch_now: Callable[[int], bool],
        committed: Callable[[int], None],
        on_epoch: Callable[[EpochReport], None] | None = None,
    ) -> None:
        self.config = config
        self.pipeline = pipeline
        self.job = job
        self.barrier = barrier
        self.executor = executor
        self.snapshots = snapshots
        self.control = control
        self.replay = replay
        self.watermark = watermark
        self.no_data = no_data
        self._last_epoch_now = last_epoch_now
        self._committed = committed
        self._on_epoch = on_epoch
        self.vnode_records = RecordsPerVnode()  # the vnodes' load, for the planner
        self.last_timings = EpochTimings(0.0, 0.0, 0.0, 0.0, 0.0)

    def run(self, df: Any, epoch: int) -> None:
        """Plan ``epoch`` at the barrier, run its job, and book and report what it committed.
        Raises what the barrier or the job raised (the runner keeps it as the query's error)."""
        started = time.perf_counter()
        plan = self.replay.recorded(self.barrier.plan(epoch), self.snapshots)
        pending = self.snapshots.due(
            epoch, busy=bool(self.executor.running()), last=self._last_epoch_now(epoch)
        )
        if pending is not None:
            plan = dataclasses.replace(plan, snapshot=pending.snapshot_id)
        planned = time.perf_counter()
        results = self.job.run(df, plan)
        ran = time.perf_counter()
        stats = [r for r in results if r["kind"] == "stat"]
        check_reports(self.pipeline, plan, stats)
        malformed = [r["text"] for r in results if r["kind"] == "malformed"]
        self.vnode_records.epoch((f.name for f in self.pipeline.fragments), stats)
        offset = source_offset(self.config.pipeline_dir, epoch)
        report = epoch_report(
            pipeline=self.pipeline,
            plan=plan,
            stats=stats,
            malformed=malformed,
            started=started,
            source_offset=offset,
            records_per_vnode=self.vnode_records.report(),
            source_backlog=self.job.sources.backlog(offset),
        )
        with cycle_collection_paused():  # the steps the epoch moved on, and their report
            self.executor.committed(epoch, stats)
        self.watermark.committed(plan, stats)
        self.no_data.epoch_committed(stats)
        if pending is not None:  # the stores are copied: written out beside the next epochs
            self.snapshots.epoch_committed(pending, plan.placements)
        self._committed(epoch)
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
        if self._on_epoch is not None:
            self._on_epoch(report)
        log_committed(report, self.last_timings, malformed)

    def rerun(self, df: Any, plan: EpochPlan) -> None:
        """A committed epoch run again with its recorded plan, for a rebuild of lost stores
        (workers/runner/rebuild.py): only the stores behind it fold its records again, and
        nothing is booked or reported (the epoch was, when it first committed)."""
        results = self.job.run(df, plan)
        stats = [r for r in results if r["kind"] == "stat"]
        check_reports(self.pipeline, plan, stats)
        log.info(
            "epoch %d re-run for the rebuild: %d records folded again",
            plan.epoch,
            sum(s["records"] for s in stats if not s["replay"]),
        )
