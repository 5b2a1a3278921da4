"""The pipeline runner: a long-running Spark driver that runs one job per epoch.

Each epoch (a Structured Streaming micro-batch, handled in ``foreachBatch``):

1. at the barrier, read pending commands through the control interface and plan the epoch's
   placement (durably, so a re-run of this epoch after a crash routes identically);
2. build one Spark job: source records → the first fragment's key → ``vnode`` and PU slot in
   Spark SQL → ``repartitionById`` (one task per PU) → ``mapInArrow`` merging into the PU's store;
   the outputs of a fragment are re-keyed and routed the same way into the next one;
3. collect the small per-task reports and report the epoch: rows, duration, per-PU and per-vnode
   load, malformed lines.

Exactly once comes from the stores (updates + applied-epoch marker in one atomic write) and from
Spark's offset log (a crashed epoch is re-run with the same offsets and the same plan).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workers.config import RunnerConfig
from workers.control import Command, ControlInterface, EpochReport, PuLoad, Topology
from workers.epoch import TaskSpec, make_task, output_schema
from workers.hashing import vnode_sql
from workers.pipeline.builtins import get_pipeline
from workers.pipeline.model import Pipeline
from workers.pipeline.placement import (
    EpochPlan,
    FragmentActions,
    FragmentPlacement,
    PlacementStore,
)
from workers.rescale.executor import CommandRefused, RescaleExecutor
from workers.sources.spark import GENERATOR, JSONL, register

log = logging.getLogger("workers.runner")

LOCAL_WORKER = "local-0"
CHECKPOINT_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)


class RunnerError(Exception):
    """The runner cannot start or continue; the message says what to do."""


class StopRequested(Exception):
    """Raised at the start of a micro-batch after a stop: the batch changes nothing and Spark
    does not commit it, so the next start re-runs it from its logged offsets."""


def build_spark(config: RunnerConfig, app_name: str) -> Any:
    """A SparkSession configured for epoch jobs (one task per PU, no partition coalescing)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.appName(app_name)
        .master(config.spark_master)
        # one task per PU: adaptive execution must not coalesce or split the PU partitions
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(max(config.pus_per_worker, 2)))
        .config("spark.sql.streaming.checkpointFileManagerClass", CHECKPOINT_MANAGER)
        .config("spark.ui.enabled", "true" if config.spark_ui else "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "50000")
        .config("spark.sql.streaming.minBatchesToRetain", "20")
    )
    for key, value in config.spark_conf:
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    return spark


def spark_info(spark: Any) -> dict[str, Any]:
    sc = spark.sparkContext
    try:
        alive = not sc._jsc.sc().isStopped()
        executors = max(sc._jsc.sc().getExecutorMemoryStatus().size() - 1, 1)
    except Exception:  # the JVM is gone: report Spark as down, the heartbeat says so
        return {"alive": False, "master": sc.master, "app_id": sc.applicationId}
    return {
        "alive": alive,
        "master": sc.master,
        "app_id": sc.applicationId,
        "ui_url": sc.uiWebUrl or "",
        "version": sc.version,
        "executors": executors,
    }


class PipelineRunner:
    """Runs one pipeline until stopped (a ``stop`` command, ``--epochs``, or a signal)."""

    def __init__(
        self,
        config: RunnerConfig,
        control: ControlInterface,
        *,
        on_epoch: Callable[[EpochReport], None] | None = None,
    ) -> None:
        self.config = config
        self.control = control
        self.pipeline: Pipeline = get_pipeline(config.pipeline, config.vnodes)
        self.placements_store = PlacementStore(config.pipeline_dir)
        self.placements: dict[str, FragmentPlacement] = {}
        self.executor: RescaleExecutor
        self.spark: Any = None
        self.query: Any = None
        self.last_epoch = -1
        self.status = "starting"
        self._stop = threading.Event()
        self._batch_lock = threading.Lock()
        self._in_batch = False
        self._on_epoch = on_epoch
        self._error: BaseException | None = None

    # -- set-up ------------------------------------------------------------------------------
    @property
    def worker_pus(self) -> dict[str, list[int]]:
        return {LOCAL_WORKER: list(range(self.config.pus_per_worker))}

    def _load_placements(self) -> dict[str, FragmentPlacement]:
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
            f.name: FragmentPlacement.initial(f.name, f.vnodes, initial)
            for f in self.pipeline.fragments
        }
        self.placements_store.save(placements)
        return placements

    def _make_executor(self) -> RescaleExecutor:
        def report(progress: dict[str, Any]) -> None:
            self.control.report_progress(self.pipeline.name, progress)

        return RescaleExecutor(
            self.config.pipeline_dir,
            self.placements,
            backend=self.config.backend,
            worker_pus={pu for pus in self.worker_pus.values() for pu in pus},
            report=report,
        )

    def topology(self) -> Topology:
        fragments: dict[str, dict[str, Any]] = {}
        for row in self.pipeline.topology_fragments():
            entry = dict(row)
            placement = self.placements.get(row["name"])
            if placement is not None:
                entry.update(
                    pus=list(placement.pus),
                    mapping=list(placement.mapping),
                    version=placement.version,
                )
            else:
                entry["pus"] = sorted({pu for p in self.placements.values() for pu in p.pus})
            fragments[row["name"]] = entry
        return Topology(
            pipeline=self.pipeline.name,
            workers=self.worker_pus,
            fragments=fragments,
            spark=spark_info(self.spark) if self.spark is not None else {},
        )

    def _source_stream(self) -> Any:
        cfg = self.config
        reader = self.spark.readStream
        if cfg.source == "generator":
            options = {
                "kind": self.pipeline.source_kind,
                "key_space": cfg.key_space,
                "zipf_s": cfg.zipf_s,
                "seed": cfg.seed,
                "pages": cfg.pages,
                "words_per_line": cfg.words_per_line,
                "rows_per_epoch": cfg.rows_per_epoch,
                "partitions": cfg.source_partitions,
            }
            if cfg.epochs is not None:
                options["max_rows"] = cfg.epochs * cfg.rows_per_epoch
            return (
                reader.format(GENERATOR).options(**{k: str(v) for k, v in options.items()}).load()
            )
        directory = cfg.source_dir
        assert directory is not None
        if not directory.is_dir():
            raise RunnerError(f"source directory {directory} does not exist: create it first")
        return (
            reader.format(JSONL)
            .option("kind", self.pipeline.source_kind)
            .option("path", str(directory))
            .option("manifest", str(cfg.pipeline_dir / "source-manifest.txt"))
            .option("max_files_per_epoch", str(cfg.max_files_per_epoch))
            .load()
        )

    # -- the epoch ---------------------------------------------------------------------------
    def _apply_commands(self, epoch: int) -> list[tuple[int, str, str]]:
        """Apply pending commands; returns the acks to send once the epoch's plan is durable."""
        acks = []
        for command in self.control.poll_commands(self.pipeline.name):
            status, detail = self._apply_command(command, epoch)
            acks.append((command.id, status, detail))
        return acks

    def _apply_command(self, command: Command, epoch: int) -> tuple[str, str]:
        if command.kind == "stop":
            self._stop.set()
            return "done", f"stopping after epoch {epoch - 1}"
        if command.kind.startswith("rescale."):
            try:
                return "done", self.executor.handle(command)
            except CommandRefused as exc:
                return "failed", str(exc)
            except (KeyError, TypeError, ValueError) as exc:
                return "failed", f"malformed {command.kind} command: {exc!r}"
        return "failed", (
            f"unknown command {command.kind!r}; this runner knows: stop, rescale.begin, "
            f"rescale.step, rescale.cancel, rescale.finish"
        )

    def _plan(self, epoch: int) -> EpochPlan:
        """The placements of ``epoch``: the recorded plan if it is a re-run, else a new one."""
        last = self.placements_store.last_plan()
        if last is not None and last.epoch == epoch:
            log.warning("epoch %d is a re-run: reusing its recorded placement", epoch)
            return last
        if last is not None and epoch < last.epoch:
            raise RunnerError(
                f"Spark asks for epoch {epoch} but epoch {last.epoch} was already planned: the "
                f"checkpoint is older than the state directory {self.config.pipeline_dir}"
            )
        acks = self._apply_commands(epoch)
        versions = {n: p.version for n, p in self.placements.items()}
        pus = {n: p.pus for n, p in self.placements.items()}
        actions = self.executor.plan(epoch)
        self.placements_store.save(self.placements)
        if versions != {n: p.version for n, p in self.placements.items()} or pus != {
            n: p.pus for n, p in self.placements.items()
        }:
            self.control.register(self.topology())  # before any operation reports its end
        self.executor.placements_saved()
        plan = EpochPlan(epoch, dict(self.placements), actions)
        self.placements_store.save_plan(plan)
        for command_id, status, detail in acks:
            self.control.ack_command(command_id, status, detail)
        return plan

    def _stage(
        self,
        df: Any,
        placement: FragmentPlacement,
        actions: FragmentActions,
        spec: TaskSpec,
        key_col: str,
    ) -> Any:
        """Route records to their PU's task in Spark SQL: vnode, then slot (held vnodes go to
        their target, marked ``held``), then one partition per PU."""
        from pyspark.sql import functions as F

        slot_of = {pu: i for i, pu in enumerate(placement.pus)}
        slot_list = placement.slot_of_vnode()
        for vnode, pu in actions.held.items():
            slot_list[vnode] = slot_of[pu]
        slots = ",".join(map(str, slot_list))
        is_rec = F.col("kind") == F.lit("rec")
        routed = (
            df.withColumnRenamed(key_col, "key")
            .withColumn("vnode", F.when(is_rec, F.expr(vnode_sql("key", placement.vnodes))))
            .withColumn(
                "slot",
                F.when(
                    is_rec, F.expr(f"element_at(array({slots}), cast(vnode + 1 as int))")
                ).otherwise(F.lit(0)),
            )
        )
        if actions.held:
            flags = ",".join(
                "true" if v in actions.held else "false" for v in range(placement.vnodes)
            )
            is_held = F.expr(f"element_at(array({flags}), cast(vnode + 1 as int))")
            routed = routed.withColumn(
                "kind", F.when(is_rec & is_held, F.lit("held")).otherwise(F.col("kind"))
            )
        schema = output_schema(spec.operator)
        ddl = ", ".join(f"`{f.name}` {_SPARK_TYPES[str(f.type)]}" for f in schema)
        return routed.repartitionById(len(placement.pus), "slot").mapInArrow(make_task(spec), ddl)

    def _epoch_job(self, df: Any, plan: EpochPlan) -> list[dict[str, Any]]:
        from pyspark.sql import functions as F

        cfg = self.config
        first = self.pipeline.fragments[0]
        # one pass over the source: malformed rows ride along (kind "malformed") instead of
        # being split off into a second branch, which would make Spark read the source twice
        prepared = self.pipeline.prepare(df)
        bad = F.col("_malformed").isNotNull()
        stream = prepared.select(
            F.when(bad, F.lit("malformed")).otherwise(F.lit("rec")).alias("kind"),
            F.when(bad, F.lit(None)).otherwise(F.col(first.key)).alias(first.key),
            "seq",
            *first.operator.columns,
            F.when(bad, F.lit(0)).otherwise(F.col("src")).alias("src"),
            F.col("_malformed").alias("info"),
        )
        for i, frag in enumerate(self.pipeline.fragments):
            placement = plan.placements[frag.name]
            actions = plan.fragment_actions(frag.name)
            spec = TaskSpec(
                fragment=frag.name,
                operator=frag.operator,
                epoch=plan.epoch,
                pus=placement.pus,
                owned=tuple(
                    tuple(v for v in placement.vnodes_of(pu) if v not in actions.held)
                    for pu in placement.pus
                ),
                state_root=str(cfg.pipeline_dir),
                backend=cfg.backend,
                terminal=i == len(self.pipeline.fragments) - 1,
                actions=tuple(actions.slot(pu) for pu in placement.pus),
            )
            if i > 0:
                stream = stream.withColumn(
                    "kind", F.when(F.col("kind") == "out", F.lit("rec")).otherwise(F.col("kind"))
                ).withColumn("src", F.lit(0))
            stream = self._stage(stream, placement, actions, spec, "key" if i > 0 else frag.key)
        rows = stream.select("kind", "info").collect()
        return [
            {"kind": r.kind, **json.loads(r.info)}
            if r.kind == "stat"
            else {"kind": r.kind, "text": r.info}
            for r in rows
        ]

    def _source_offset(self, epoch: int) -> dict[str, Any]:
        path = self.config.pipeline_dir / "checkpoint" / "offsets" / str(epoch)
        try:
            lines = path.read_text("utf-8").splitlines()
            offset: dict[str, Any] = json.loads(lines[-1])
            return offset
        except (OSError, ValueError, IndexError):
            return {}

    def _on_batch(self, df: Any, epoch: int) -> None:
        with self._batch_lock:
            if self._stop.is_set():
                raise StopRequested(f"stopped before epoch {epoch}")
            self._in_batch = True
        try:
            self._run_batch(df, epoch)
        finally:
            self._in_batch = False

    def _run_batch(self, df: Any, epoch: int) -> None:
        started = time.perf_counter()
        try:
            plan = self._plan(epoch)
            results = self._epoch_job(df, plan)
        except BaseException as exc:  # surfaced by run(); Spark would otherwise only log it
            self._error = exc
            raise
        stats = [r for r in results if r["kind"] == "stat"]
        malformed = [r["text"] for r in results if r["kind"] == "malformed"]
        first = self.pipeline.fragments[0].name
        report = EpochReport(
            pipeline=self.pipeline.name,
            epoch=epoch,
            rows=sum(s["source_rows"] for s in stats if s["fragment"] == first) + len(malformed),
            malformed=len(malformed),
            duration_s=round(time.perf_counter() - started, 4),
            committed_at=time.time(),
            source_offset=self._source_offset(epoch),
            per_pu=[
                PuLoad(s["fragment"], s["pu"], s["records"], s["keys"], s["bytes"]) for s in stats
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
        )
        self.executor.committed(epoch, stats)
        self.last_epoch = epoch
        self.control.report_epoch(report)
        if malformed:
            log.warning(
                "epoch %d: %d malformed records, e.g. %s", epoch, len(malformed), malformed[0]
            )
        if self._on_epoch is not None:
            self._on_epoch(report)
        log.info("epoch %d committed: %d rows in %.3fs", epoch, report.rows, report.duration_s)

    # -- the loop ------------------------------------------------------------------------------
    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(self.config.heartbeat_interval_s):
            self._beat()

    def _beat(self) -> None:
        try:
            info = spark_info(self.spark) if self.spark is not None else {}
            self.control.heartbeat(self.pipeline.name, self.last_epoch, self.status, info)
        except Exception:  # a missed heartbeat must never kill the pipeline
            log.exception("heartbeat failed")

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
        cfg.pipeline_dir.mkdir(parents=True, exist_ok=True)
        self.placements = self._load_placements()
        self.executor = self._make_executor()
        self.placements_store.save(self.placements)  # a restart may have reconciled an operation
        self.executor.placements_saved()
        self.spark = build_spark(cfg, f"rescaler-{self.pipeline.name}")
        self.control.register(self.topology())
        self.last_epoch = self._committed_epoch()
        self.status = "running"
        heart = threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True)
        heart.start()
        self._beat()
        try:
            failures = 0
            while not self._done():
                self._error = None
                self.query = self._start_query()
                failure = self._watch_query()
                if failure is None:
                    break
                failures += 1
                if failures > cfg.max_query_restarts:
                    raise RunnerError(
                        f"the streaming query failed {failures} times in a row; last: {failure}"
                    ) from self._error
                # re-running an epoch is always safe (atomic commits, recorded plans): a
                # transient failure (an overloaded host, a lost executor) must not end the run
                log.error(
                    "the streaming query failed (%s); restarting it (%d/%d)",
                    failure,
                    failures,
                    cfg.max_query_restarts,
                )
                time.sleep(min(2.0**failures, 30.0))
        finally:
            self.status = "stopping"
            self._stop.set()
            if self.query is not None and self.query.isActive:
                # no epoch is in flight here (or the runner is failing): a batch that starts
                # now sees the stop flag and changes nothing
                self.query.stop()
            self.status = "stopped"
            self._beat()
            self.spark.stop()
        return self.last_epoch

    def _start_query(self) -> Any:
        cfg = self.config
        return (
            self._source_stream()
            .writeStream.foreachBatch(self._on_batch)
            .option("checkpointLocation", str(cfg.pipeline_dir / "checkpoint"))
            .trigger(processingTime=f"{cfg.trigger_interval_s} seconds")
            .queryName(f"rescaler_{self.pipeline.name}")
            .start()
        )

    def _watch_query(self) -> str | None:
        """Wait until done (None) or until the query fails (its error)."""
        while not self._done() or self._in_batch:
            if not self.query.isActive:
                if self._stop.is_set():
                    return None  # the batch after the stop refused to start: a clean stop
                return str(self._error or self.query.exception())
            time.sleep(0.1)
        return None

    def _committed_epoch(self) -> int:
        commits = self.config.pipeline_dir / "checkpoint" / "commits"
        if not commits.is_dir():
            return -1
        epochs = [int(p.name) for p in commits.iterdir() if p.name.isdigit()]
        return max(epochs, default=-1)


_SPARK_TYPES = {"string": "string", "int64": "bigint", "double": "double"}


def run(config: RunnerConfig, control: ControlInterface | None = None) -> int:
    """Run a pipeline with the file-backed control interface unless another is given."""
    from workers.control import LocalControl

    control = control or LocalControl(Path(config.pipeline_dir) / "control")
    return PipelineRunner(config, control).run()
