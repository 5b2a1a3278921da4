"""One epoch's Spark job (the session: ``workers.spark_session``; what it reads:
``workers.source_stream``).

One Spark job per epoch: source records → the first fragment's key → ``vnode`` and PU slot in
Spark SQL (no Python UDF for routing) → ``repartitionById`` (exactly one task per PU) →
``mapInArrow`` running :func:`workers.epoch.run_task` on the PU's store; each next fragment's
input is the previous one's outputs, re-keyed and routed the same way, so two stateful fragments
are two shuffles in one job. The small per-task reports come back in a single collect.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from workers.barrier import owned_vnodes, route_slots
from workers.config import RunnerConfig
from workers.epoch import TaskSpec, make_task, output_schema
from workers.hashing import key_range_sql, vnode_sql
from workers.partials import Aggregates, aggregates_of, refusal, spark_aggregations
from workers.pinning import executor_of, pin
from workers.pipeline.loading import resolve_sink
from workers.pipeline.model import Pipeline
from workers.pipeline.placement import EpochPlan, FragmentActions, VnodeMapping
from workers.processor.initial import check_initial_states, has_initial_state, with_initial_states
from workers.processor.layout import INITIAL_KIND
from workers.processor.operator import processors_of
from workers.processor.schema import wire_name
from workers.sinks.base import Sink
from workers.source_order import position_seq, read_partitions, with_read_ids
from workers.source_stream import SourceStreams
from workers.sources.control import ControlStream
from workers.store_homes import StoreHomes

log = logging.getLogger(__name__)

#: the Spark job tag of every epoch's job (``SparkContext.cancelJobsWithTag`` ends it)
EPOCH_JOB_TAG = "rescaler-epoch"


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
        homes: Callable[[], dict[int, str]] | None = None,
    ) -> None:
        """``homes``: PU -> its home executor's location (``workers.pinning``), read at each
        epoch; each PU task is pinned there. None (local mode, tests): Spark places them."""
        self.spark = spark
        self.homes = homes
        self.config = config
        self.control = control or ControlStream.of(config.pipeline_dir)
        self.pipeline = pipeline
        self.sink: Sink = sink or resolve_sink(config, pipeline)
        self.last_timings: tuple[float, float] = (0.0, 0.0)
        self.sources = SourceStreams(spark, config, pipeline, self.control)
        # fragment -> the aggregates its records are folded by in Spark (workers.partials)
        self._preaggregated: dict[str, Aggregates] = {}
        # (fragment, PU) -> the last epoch its task reported committed, since this start: the
        # least its store must hold at the next epoch (StoreLost otherwise)
        self.committed: dict[tuple[str, int], int] = {}
        self.store_homes = StoreHomes(config.pipeline_dir)  # where each store is, as reported

    def source_stream(self) -> Any:
        """The pipeline's own stream of source records (``SourceStreams.source_stream``)."""
        return self.sources.source_stream()

    def stream(self) -> Any:
        """What the query reads (``SourceStreams.stream``)."""
        return self.sources.stream()

    def describe_source(self) -> str:
        return self.sources.describe_source()

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
        homes: dict[int, str] | None = None,
    ) -> Any:
        """Route records to their PU's task in Spark SQL: vnode, then slot (held vnodes go to
        their target, marked ``held``), then one partition per PU.

        ``preaggregated``: fold the records per (key, vnode, slot, kind) with these aggregates
        after the shuffle, in Spark, before they are handed to the PU's Python task
        (``workers.partials``); every other row keeps a group of its own.

        ``homes``: PU -> its home executor's location; each PU's task is pinned there.

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
        if homes is not None:  # each PU's task on its home executor (workers.pinning)
            routed = pin(routed, [homes.get(pu) for pu in placement.parallel_units])
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
        # tagged, so that a lost executor can end the epoch at once (workers/runner/loss.py):
        # its jobs are not in the streaming query's job group, which is another thread's
        sc = df.sparkSession.sparkContext
        sc.addJobTag(EPOCH_JOB_TAG)
        try:
            rows = stream.select("kind", "info").collect()
        finally:
            sc.removeJobTag(EPOCH_JOB_TAG)
        self.last_timings = (built - started, time.perf_counter() - built)
        results = [
            {"kind": r.kind, **json.loads(r.info)}
            if r.kind == "stat"
            else {"kind": r.kind, "text": r.info}
            for r in rows
        ]
        stats = [r for r in results if r["kind"] == "stat"]
        for r in stats:
            where = (r["fragment"], r["pu"])
            self.committed[where] = max(self.committed.get(where, -1), r["epoch"])
        self.store_homes.update(stats)
        return results

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
        homes = self.homes() if self.homes is not None else None  # read once per epoch
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
                durable=cfg.durable,
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
                expected=()
                if plan.rebuilding
                else tuple(
                    self.committed.get((frag.name, pu), -1) for pu in placement.parallel_units
                ),
                homes=tuple(
                    executor_of((homes or {}).get(pu, "")) for pu in placement.parallel_units
                ),
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
                homes=homes,
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
