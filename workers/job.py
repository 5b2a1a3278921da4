"""The Spark side of the runner: the session, the source stream and one epoch's job.

One Spark job per epoch: source records → the first fragment's key → ``vnode`` and PU slot in
Spark SQL (no Python UDF for routing) → ``repartitionById`` (exactly one task per PU) →
``mapInArrow`` running :func:`workers.epoch.run_task` on the PU's store; each next fragment's
input is the previous one's outputs, re-keyed and routed the same way, so two stateful fragments
are two shuffles in one job. The small per-task reports come back in a single collect.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from workers.barrier import owned_vnodes, route_slots
from workers.config import RunnerConfig
from workers.epoch import TaskSpec, make_task, output_schema
from workers.hashing import key_range_sql, vnode_sql
from workers.natsio import redact
from workers.partials import Aggregates, aggregates_of, refusal, spark_aggregations
from workers.pipeline.loading import resolve_sink
from workers.pipeline.model import Pipeline
from workers.pipeline.placement import EpochPlan, FragmentActions, VnodeMapping
from workers.processor.initial import check_initial_states, has_initial_state, with_initial_states
from workers.processor.layout import INITIAL_KIND
from workers.processor.operator import processors_of
from workers.processor.schema import wire_name
from workers.sinks.base import Sink
from workers.source_order import position_seq, read_partitions, with_read_ids
from workers.sources import jsonl
from workers.sources.control import ControlStream
from workers.sources.jetstream import JETSTREAM, JetStreamStreamReader
from workers.sources.jetstream import register as register_jetstream
from workers.sources.spark import GENERATOR, JSONL, register
from workers.spark_tasks import scheduler_conf

log = logging.getLogger(__name__)

CHECKPOINT_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)
_SPARK_TYPES = {
    "string": "string",
    "int64": "bigint",
    "double": "double",
    "int32": "int",
    "bool": "boolean",
}


def _event_time(pipeline: Any, index: int, named: Callable[[str], str]) -> str | None:
    """A fragment's event-time column in the epoch's tables: the source's for the first, an
    upstream processor's output (``event_time_column``, under its name there) for a later one."""
    column = pipeline.event_time_of(index)
    if column is None:
        return None
    return named(column) if index == 0 else wire_name(column)


def _columns_of(key: str, columns: tuple[str, ...], event_time: str | None) -> list[str]:
    """The operator's columns and the event-time column, once each, without the key."""
    wanted = [*columns, *([event_time] if event_time else [])]
    return [c for c in dict.fromkeys(wanted) if c != key]


def _array_literal(items: str, element: str) -> str:
    """A constant array in Spark SQL from comma-separated ``items``: parsed from one JSON string
    and folded into a literal by the optimizer, instead of ``array(a, b, ...)``, whose one
    expression per element costs the driver's parser and analyser some 20 ms per epoch at 256
    vnodes."""
    return f"from_json('[{items}]', 'array<{element}>')"


class SourceMissing(Exception):
    """The configured source cannot be read; the message says what to do."""


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
        # a decommissioning executor (its worker got SIGPWR, its pod an eviction) is the
        # worker's preemption notice (docs/elastic-workers.md, "Preemption")
        .config("spark.decommission.enabled", "true")
    )
    for key, value in scheduler_conf(config.pipeline_dir).items():
        builder = builder.config(key, value)
    for key, value in config.spark_conf:
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    # no Python data source is registered here: the first registration makes Spark look for
    # installed ones in a Python process of its own (a second or two of every start), which a
    # pipeline on a JVM source (Kafka, files) never needs; EpochJob registers the one it reads
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


def jetstream_options(config: RunnerConfig, pipeline: Pipeline) -> dict[str, str]:
    """A ``nats:STREAM`` source's options: the stream's messages are JSON objects of the
    pipeline's source kind (what ``python -m workers.sources.jetstream_feed`` publishes)."""
    if pipeline.source_kind not in ("lines", "events"):
        raise SourceMissing(
            f"pipeline {pipeline.name!r} (source_kind {pipeline.source_kind!r}): --source "
            f"nats:STREAM reads the built-in record shapes only; give the pipeline a source "
            f"function reading your stream, or --source dir:PATH"
        )
    schema = jsonl.schema_for(pipeline.source_kind)
    fields = ", ".join(
        f"`{f.name}` {_SPARK_TYPES[str(f.type)]}"
        for f in schema
        if f.name not in ("seq", "_malformed")
    )
    return {
        "stream": str(config.source_stream_name),
        "url": config.nats_url,
        "schema": fields,
        "max_records_per_epoch": str(config.rows_per_epoch),
        "partitions": str(config.source_partitions),
        # shows the query's progress in `nats consumer info` (read by nothing)
        "consumer": f"rescaler-{pipeline.name}",
    }


def check_source(config: RunnerConfig, pipeline: Pipeline) -> None:
    """Stop the start, before Spark, with the source's own message when it cannot be read (a
    JetStream server or stream missing, a source directory absent) instead of failing the
    query's first epoch."""
    if config.source_stream_name is not None:
        JetStreamStreamReader(jetstream_options(config, pipeline)).initialOffset()
    directory = config.source_dir
    if directory is not None and not directory.is_dir():
        raise SourceMissing(f"source directory {directory} does not exist: create it first")


class EpochJob:
    """Builds and runs one epoch's Spark job for a pipeline."""

    def __init__(
        self,
        spark: Any,
        config: RunnerConfig,
        pipeline: Pipeline,
        sink: Sink | None = None,
        *,
        control: ControlStream | None = None,
    ) -> None:
        self.spark = spark
        self.config = config
        self.control = control or ControlStream.of(config.pipeline_dir)
        self.pipeline = pipeline
        self.sink: Sink = sink or resolve_sink(config, pipeline)
        self.last_timings: tuple[float, float] = (0.0, 0.0)
        self._source: Any = None  # the source's streaming DataFrame, analysed once
        self._stream: Any = None  # and unioned with the control stream
        # fragment -> the aggregates its records are folded by in Spark (workers.partials)
        self._preaggregated: dict[str, Aggregates] = {}

    def source_stream(self) -> Any:
        """The pipeline's own stream of source records: the pipeline's ``source`` function, or
        the source the runner was given (``--source``). It knows nothing of barriers.

        Built once: each query start (the first, a restart after a failure, a rebuild's re-runs)
        starts from the same DataFrame, so Spark looks a Python data source up (a Python process
        on the driver) and analyses the user's ``prepare`` once per runner, not at every start."""
        if self._source is None:
            self._source = self._new_source_stream()
        return self._source

    def _new_source_stream(self) -> Any:
        cfg = self.config
        reader = self.spark.readStream
        if not cfg.source and self.pipeline.source is not None:
            stream = self.pipeline.source(self.spark)
            if not getattr(stream, "isStreaming", False):
                raise SourceMissing(
                    f"pipeline {self.pipeline.name!r}: its source function returned "
                    f"{type(stream).__name__}, not a streaming DataFrame (spark.readStream...load())"
                )
            return stream
        if self.pipeline.source_kind == "json" and not cfg.source_dir:
            raise SourceMissing(
                f"pipeline {self.pipeline.name!r} reads JSON records of its own "
                f"(source_kind 'json'): give --source dir:PATH (a directory of JSON-lines files) "
                f"or a source function in the pipeline"
            )
        if cfg.source in ("", "generator"):
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
            if cfg.source_rows is not None:
                options["max_rows"] = cfg.source_rows
            elif cfg.epochs is not None:
                options["max_rows"] = cfg.epochs * cfg.rows_per_epoch
            register(self.spark)
            return (
                reader.format(GENERATOR).options(**{k: str(v) for k, v in options.items()}).load()
            )
        if cfg.source_stream_name is not None:
            register_jetstream(self.spark)
            return reader.format(JETSTREAM).options(**self._jetstream_options()).load()
        directory = cfg.source_dir
        assert directory is not None
        if not directory.is_dir():
            raise SourceMissing(f"source directory {directory} does not exist: create it first")
        register(self.spark)
        return (
            reader.format(JSONL)
            .option("kind", self.pipeline.source_kind)
            .option("path", str(directory))
            .option("manifest", str(cfg.pipeline_dir / "source-manifest.txt"))
            .option("max_files_per_epoch", str(cfg.max_files_per_epoch))
            .load()
        )

    def _jetstream_options(self) -> dict[str, str]:
        return jetstream_options(self.config, self.pipeline)

    def stream(self) -> Any:
        """What the query reads: the pipeline's stream unioned with the runner's control stream,
        so that the runner can force a barrier on any source (workers/sources/control.py)."""
        if self._stream is None:
            self._stream = self.control.union(self.spark, self.source_stream())
        return self._stream

    def describe_source(self) -> str:
        """One line for the fragment matrix: what the pipeline reads."""
        cfg = self.config
        if not cfg.source and self.pipeline.source is not None:
            fn = self.pipeline.source
            return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
        if cfg.source_stream_name:
            return f"JetStream stream {cfg.source_stream_name} at {redact(cfg.nats_url)}"
        if cfg.source_dir:
            return f"JSON-lines files in {cfg.source_dir}"
        return f"generator, {cfg.rows_per_epoch} rows per epoch"

    def check_prepared(self) -> None:
        """The user's ``prepare`` against the source's schema: Spark analyses it, nothing runs."""
        prepared = self.pipeline.prepare(self.source_stream())
        types = {f.name: f.dataType.simpleString() for f in prepared.schema}
        self.pipeline.check_prepared(types)
        first = self.pipeline.fragments[0]
        # pandas processors read and write timestamps in the session's time zone, as in Spark
        timezone = self.spark.conf.get("spark.sql.session.timeZone")
        for i, frag in enumerate(self.pipeline.fragments):
            for op in processors_of(frag.operator):
                op.timezone = timezone
            if has_initial_state(frag):
                check_initial_states(self.spark, frag, types[first.key] if i == 0 else "string")

    def stage(
        self,
        df: Any,
        placement: VnodeMapping,
        actions: FragmentActions,
        spec: TaskSpec,
        key_col: str,
        *,
        from_outputs: bool = False,
        preaggregated: Aggregates = (),
    ) -> Any:
        """Route records to their PU's task in Spark SQL: vnode, then slot (held vnodes go to
        their target, marked ``held``), then one partition per PU.

        ``preaggregated``: fold the records per (key, vnode, slot, kind) with these aggregates
        after the shuffle, in Spark, before they are handed to the PU's Python task
        (``workers.partials``); every other row keeps a group of its own.

        One projection computes it all (each DataFrame step costs the driver an analysis and
        py4j round trips at every epoch; Spark's code generation evaluates the repeated vnode
        hash once per row). ``from_outputs``: ``df`` holds the previous fragment's outputs
        (kind ``out``), which become this fragment's records.
        """
        kind = "(CASE WHEN kind = 'out' THEN 'rec' ELSE kind END)" if from_outputs else "kind"
        is_rec = f"{kind} = 'rec'"
        # an initial state's rows (the first epoch) go where their key's records go, never held
        routed_rec = f"{kind} IN ('rec', '{INITIAL_KIND}')"
        vnode = vnode_sql(key_col, placement.vnodes)
        slots = ",".join(map(str, route_slots(placement, actions)))
        routed_kind = kind
        held_when: list[str] = []
        if actions.held:
            flags = ",".join(
                "true" if v in actions.held else "false" for v in range(placement.vnodes)
            )
            held_when.append(
                f"element_at({_array_literal(flags, 'boolean')}, cast({vnode} + 1 as int))"
            )
        # a hot vnode moving key range by key range: its ranges moved or in flight go to the
        # cut's target (``workers.barrier.route_record``), one CASE arm per cut vnode
        cut_slot = []
        for v, cut in sorted(actions.cut.items()):
            in_range = key_range_sql(key_col, cut.count)
            going = ",".join(map(str, (*cut.moved, *cut.held)))
            target = placement.parallel_units.index(cut.target)
            cut_slot.append(f"WHEN {vnode} = {v} AND {in_range} IN ({going}) THEN {target}")
            if cut.held:
                held_ranges = ",".join(map(str, cut.held))
                held_when.append(f"({vnode} = {v} AND {in_range} IN ({held_ranges}))")
        if held_when:
            held = " OR ".join(held_when)
            routed_kind = f"CASE WHEN {is_rec} AND ({held}) THEN 'held' ELSE {kind} END"
        slot = f"element_at({_array_literal(slots, 'int')}, cast({vnode} + 1 as int))"
        if cut_slot:
            slot = f"CASE {' '.join(cut_slot)} ELSE {slot} END"
        columns = []
        for name in df.columns:
            if name == key_col:
                columns.append(f"`{name}` AS key")
            elif name == "kind":
                columns.append(f"{routed_kind} AS kind")
            elif name == "src" and from_outputs:
                columns.append("0 AS src")
            else:
                columns.append(f"`{name}`")
        if from_outputs and "src" not in df.columns:
            columns.append("0 AS src")
        if preaggregated:
            # a row that is no record (a malformed line, an upstream report) is its own group
            columns.append(f"CASE WHEN {is_rec} THEN NULL ELSE seq END AS _own")
        routed = df.selectExpr(
            *columns,
            f"CASE WHEN {routed_rec} THEN {vnode} END AS vnode",
            f"CASE WHEN {routed_rec} THEN {slot} ELSE 0 END AS slot",
        )
        routed = routed.repartitionById(len(placement.parallel_units), "slot")
        if preaggregated:
            from pyspark.sql import functions as F

            # after the shuffle, before the hand-off to Python: each partition is one PU's, and
            # Spark adds no exchange for a grouping that includes the slot
            routed = routed.groupBy("kind", "key", "vnode", "slot", "info", "_own").agg(
                *(F.expr(e) for e in spark_aggregations(preaggregated, spec.event_time))
            )
        from pyspark.sql.pandas.types import from_arrow_schema

        # a StructType built in Python: a DDL string would be parsed in the JVM, a py4j round
        # trip at every epoch
        return routed.mapInArrow(make_task(spec), from_arrow_schema(output_schema(spec.operator)))

    def run(self, df: Any, plan: EpochPlan) -> list[dict[str, Any]]:
        """Run ``plan`` over the epoch's records ``df``: one Spark job, every fragment; returns
        the rows the tasks sent back (``stat`` reports of every PU task, ``malformed`` lines).

        ``last_timings`` is then (seconds building the job's DataFrame on the driver, seconds of
        the Spark job itself, from submission to the collected reports)."""
        started = time.perf_counter()
        stream = self.build(df, plan)
        built = time.perf_counter()
        rows = stream.select("kind", "info").collect()
        self.last_timings = (built - started, time.perf_counter() - built)
        return [
            {"kind": r.kind, **json.loads(r.info)}
            if r.kind == "stat"
            else {"kind": r.kind, "text": r.info}
            for r in rows
        ]

    def build(self, df: Any, plan: EpochPlan) -> Any:
        """The epoch's DataFrame: every fragment staged, one shuffle per stateful fragment (a
        keyed region of several operators is one fragment, so one shuffle)."""
        cfg = self.config
        first = self.pipeline.fragments[0]
        events = self.pipeline.event_time
        # one pass over the source: malformed rows ride along (kind "malformed") instead of
        # being split off into a second branch, which would make Spark read the source twice
        prepared = self.pipeline.prepare(df)
        if self.pipeline.order is None:  # no order column: the runner's (workers.source_order)
            partitions = read_partitions(prepared)
            prepared = with_read_ids(prepared)
            seq = position_seq(plan.epoch, partitions)
        else:
            seq = f"`{self.pipeline.order}`"
        bad = "_malformed IS NOT NULL"
        # a processor's columns are the user's; a built-in operator's are Rescaler's own
        named = wire_name if processors_of(first.operator) else str
        stream = prepared.selectExpr(
            f"CASE WHEN {bad} THEN 'malformed' ELSE 'rec' END AS kind",
            f"CASE WHEN {bad} THEN NULL ELSE `{first.key}` END AS `{first.key}`",
            f"{seq} AS seq",
            # the user's columns under their names in Rescaler's tables (a column named like
            # one of Rescaler's, kind or seq, stays the user's: workers.processor.schema)
            *(
                f"`{c}` AS `{named(c)}`"
                for c in _columns_of(first.key, first.operator.columns, events)
            ),
            f"CASE WHEN {bad} THEN 0 ELSE src END AS src",
            "_malformed AS info",
        )
        for i, frag in enumerate(self.pipeline.fragments):
            placement = plan.placements[frag.name]
            actions = plan.fragment_actions(frag.name)
            spec = TaskSpec(
                fragment=frag.name,
                operator=frag.operator,
                epoch=plan.epoch,
                parallel_units=placement.parallel_units,
                owned=owned_vnodes(placement, actions),
                state_root=str(cfg.pipeline_dir),
                backend=cfg.backend,
                terminal=i == len(self.pipeline.fragments) - 1,
                actions=tuple(actions.slot(pu) for pu in placement.parallel_units),
                clock=plan.clock,
                event_time=_event_time(self.pipeline, i, named),
                chained_event_time=i > 0,
                sink=self.sink if i == len(self.pipeline.fragments) - 1 else None,
                snapshot=plan.snapshot,
                outputs_from=plan.outputs_from,
                rebuilding=plan.rebuilding,
            )
            key_col = "key" if i > 0 else frag.key
            if plan.epoch == 0 and has_initial_state(frag):  # Spark's first batch only
                stream = with_initial_states(self.spark, stream, frag, key_col)
            stream = self.stage(
                stream,
                placement,
                actions,
                spec,
                key_col,
                from_outputs=i > 0,
                preaggregated=self.preaggregated(frag.name, frag.operator, stream),
            )
        return stream

    def preaggregated(self, fragment: str, operator: Any, df: Any) -> Aggregates:
        """The aggregates the fragment's records are folded by in Spark before its PU tasks; ()
        for the record path. Decided at the query's first epoch from the columns' types (the
        schema is the query's), and said once in the log."""
        if fragment not in self._preaggregated:
            aggregates = aggregates_of(operator) if self.config.preaggregate else ()
            if aggregates:
                types = {f.name: f.dataType.simpleString() for f in df.schema}
                reason = refusal(operator, types)
                if reason is not None:
                    log.info("%s: records handed to Python unfolded: %s", fragment, reason)
                    aggregates = ()
                else:
                    log.info(
                        "%s: records folded per key in Spark by %s",
                        fragment,
                        ", ".join(f"{f}({c})" for c, f in aggregates),
                    )
            self._preaggregated[fragment] = aggregates
        return self._preaggregated[fragment]
