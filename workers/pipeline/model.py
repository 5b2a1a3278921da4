"""What a pipeline is: a source, keyed stateful fragments in keyed regions, and a sink."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from workers.operators.base import KeyedOperator
from workers.sinks.base import Sink

DEFAULT_VNODES = 256
SINK_NODE = "sink"  # the sink's name in the fragment matrix


class PipelineError(Exception):
    """Base class of pipeline definition errors."""


class UnknownPipeline(PipelineError):
    """No built-in pipeline has that name, or the reference does not lead to a pipeline."""


class InvalidPipeline(PipelineError):
    """The pipeline's definition cannot run; the message names what is wrong."""


_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,62}")
#: columns the runner adds to the prepared records: a user's prepare must give seq, _malformed, src
INTERNAL_COLUMNS = ("kind", "key", "vnode", "slot", "info")


class UnknownFragment(PipelineError):
    """The pipeline has no fragment of that name."""


@dataclass(frozen=True)
class Fragment:
    """A keyed stateful operator stage: its own keyed region, vnodes and per-PU stores.

    ``upstream`` None means the fragment reads the source's records (after ``Pipeline.prepare``);
    otherwise it reads the outputs of the named fragment, re-keyed by their output key.
    """

    name: str
    operator: KeyedOperator
    key: str  # the input column holding this fragment's key
    region: int
    vnodes: int = DEFAULT_VNODES
    upstream: str | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.vnodes <= 1 << 16:
            raise InvalidPipeline(f"{self.name}: vnodes must be in 1..65536, not {self.vnodes}")
        # a processor's rows carry the key column as Spark's grouped rows do
        if getattr(self.operator, "key_column", "") is None:
            self.operator.key_column = self.key  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Pipeline:
    """A source kind, a record preparation in Spark SQL, and stateful fragments in order."""

    name: str
    #: the shape of the runner's source records: "lines", "events" (the built-in pipelines') or
    #: "json" (any JSON object, handed to prepare as its text, ``value``: workers.sources.jsonl)
    source_kind: str
    fragments: tuple[Fragment, ...]
    # source DataFrame (seq, fields..., _malformed) -> the first fragment's input: seq, its key
    # column, its operator's columns, ``_malformed`` (every malformed source row kept as exactly
    # one row) and ``src`` (1 on exactly one record per good source row: how rows are counted)
    prepare: Callable[[Any], Any]
    description: str = ""
    #: the stream of source records: SparkSession -> streaming DataFrame (any Spark source; its
    #: rows go through ``prepare``). None: the runner's ``--source`` (generator, dir:, nats:)
    source: Callable[[Any], Any] | None = None
    #: the records ``source`` holds past an epoch's end, now (its backlog, the autoscaler's
    #: signal): the source's entry of Spark's offset log for the epoch (Kafka: topic ->
    #: partition -> offset) -> a count, or None when it cannot tell. None: not reported
    source_backlog: Callable[[dict[str, Any]], int | None] | None = None
    #: where the last fragment's outputs go (workers.sinks); None: the runner's ``--sink``
    sink: Sink | None = None
    #: the prepared bigint column that orders one key's records as the source did (Kafka:
    #: ``offset`` when the topic is partitioned by this key; docs/sources-and-sinks.md). None:
    #: the source has none, and the runner numbers the records as Spark reads them
    #: (``workers.source_order``: epoch by epoch, each partition in its order)
    order: str | None = "seq"
    extra: dict[str, Any] = field(default_factory=dict)
    #: the prepared column giving event time (a timestamp, or seconds), for watermarks
    event_time: str | None = None
    watermark_delay_ms: int = 0  # Spark's withWatermark delay

    def validate(self) -> None:
        """Everything that can be checked without Spark; raises InvalidPipeline naming it."""
        from workers.operators.base import KeyedOperator

        where = f"pipeline {self.name!r}"
        if not _NAME.fullmatch(self.name):
            raise InvalidPipeline(
                f"{where}: a name is a letter then letters, digits, '_' or '-' (it names the "
                f"state directory)"
            )
        if not self.fragments:
            raise InvalidPipeline(f"{where} has no stateful fragment")
        seen: set[str] = set()
        for i, frag in enumerate(self.fragments):
            if not _NAME.fullmatch(frag.name) or frag.name in ("source", SINK_NODE):
                raise InvalidPipeline(
                    f"{where}: fragment name {frag.name!r} must be a letter then letters, "
                    f"digits, '_' or '-', and not 'source' or {SINK_NODE!r}"
                )
            if frag.name in seen:
                raise InvalidPipeline(f"{where}: two fragments are named {frag.name!r}")
            seen.add(frag.name)
            expected = self.fragments[i - 1].name if i else None
            if frag.upstream != expected:
                after = f"its upstream must be {expected!r}" if expected else "it reads the source"
                raise InvalidPipeline(
                    f"{where}: fragment {frag.name!r} has upstream {frag.upstream!r}, but "
                    f"fragments run as a chain in the order given: {after}"
                    + (
                        ""
                        if frag.upstream in seen or frag.upstream is None
                        else " (no earlier fragment has that name)"
                    )
                )
            if not isinstance(frag.operator, KeyedOperator):
                raise InvalidPipeline(
                    f"{where}: fragment {frag.name!r}: {type(frag.operator).__name__} is not a "
                    f"KeyedOperator; wrap a StatefulProcessor in workers.processor.ProcessorOperator"
                )
            inspect = getattr(frag.operator, "inspect", None)
            if inspect is not None:
                try:
                    inspect()
                except ValueError as exc:
                    raise InvalidPipeline(f"{where}: fragment {frag.name!r}: {exc}") from exc
                except Exception as exc:  # the user's init() itself failed
                    raise InvalidPipeline(
                        f"{where}: fragment {frag.name!r}: the processor's init() failed "
                        f"({type(exc).__name__}: {exc})"
                    ) from exc
                mode = getattr(frag.operator, "time_mode", "none")
                if mode == "eventtime" and self.event_time is None:
                    raise InvalidPipeline(
                        f"{where}: fragment {frag.name!r} runs in EventTime: give the pipeline "
                        f"event_time (a column) and watermark_delay_ms, as withWatermark would"
                    )
                if mode == "eventtime" and i and self.event_time_of(i) is None:
                    raise InvalidPipeline(
                        f"{where}: fragment {frag.name!r} runs in EventTime after another "
                        f"fragment: give the processor before it event_time_column (Spark's "
                        f"eventTimeColumnName), the output column that carries event time on"
                    )
                if getattr(frag.operator, "event_time_column", None) and self.event_time is None:
                    raise InvalidPipeline(
                        f"{where}: fragment {frag.name!r} has an event_time_column, which needs "
                        f"a watermark: give the pipeline event_time and watermark_delay_ms"
                    )
            _check_pickles(where, frag)
        if self.watermark_delay_ms < 0:
            raise InvalidPipeline(f"{where}: watermark_delay_ms must be >= 0")
        if self.order is not None and (
            not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", self.order)
            or self.order in INTERNAL_COLUMNS
        ):
            raise InvalidPipeline(
                f"{where}: order {self.order!r} must name a prepared column (not one of "
                f"{', '.join(INTERNAL_COLUMNS)}), or be None for the runner's order of a source "
                f"that has none"
            )
        if self.source is not None and not callable(self.source):
            raise InvalidPipeline(
                f"{where}: source must be a function from a SparkSession to a streaming "
                f"DataFrame, not {type(self.source).__name__}"
            )
        if self.source_backlog is not None and not callable(self.source_backlog):
            raise InvalidPipeline(
                f"{where}: source_backlog must be a function from the source's end offset of an "
                f"epoch to the records it holds past it, not {type(self.source_backlog).__name__}"
            )
        if self.sink is not None and not isinstance(self.sink, Sink):
            raise InvalidPipeline(
                f"{where}: sink must be a workers.sinks.Sink (sink_from_uri('postgres://...'), "
                f"FunctionSink(fn), ...), not {type(self.sink).__name__}"
            )

    def check_prepared(self, columns: dict[str, str]) -> None:
        """The prepared records' columns (name -> Spark type) against what the fragments read."""
        where = f"pipeline {self.name!r}"
        first = self.fragments[0]
        needed: dict[str, str | None] = {"_malformed": "string", "src": None}
        if self.order is not None:
            needed = {self.order: "bigint", **needed}
        order = (
            f"{self.order!r} (the source order of each key's records, or order=None when the "
            f"source has none), "
            if self.order is not None
            else ""
        )
        for name, typ in needed.items():
            if name not in columns:
                raise InvalidPipeline(
                    f"{where}: the prepared records lack column {name!r}; prepare must give "
                    f"{order}_malformed (the reason a row is malformed, or null) and src (1 per "
                    f"source row)"
                )
            if typ and columns[name] != typ:
                raise InvalidPipeline(
                    f"{where}: prepared column {name!r} is {columns[name]}, not {typ}"
                )
        if first.key not in columns:
            raise InvalidPipeline(
                f"{where}: fragment {first.name!r} is keyed by {first.key!r}, which the prepared "
                f"records lack (they have: {', '.join(sorted(columns))})"
            )
        if columns[first.key] != "string":
            raise InvalidPipeline(
                f"{where}: key column {first.key!r} is {columns[first.key]}; cast it to string in "
                f"prepare (keys are hashed to vnodes as strings)"
            )
        for col in (*first.operator.columns, *([self.event_time] if self.event_time else [])):
            if col not in columns:
                raise InvalidPipeline(
                    f"{where}: fragment {first.name!r} reads column {col!r}, which the prepared "
                    f"records lack (they have: {', '.join(sorted(columns))})"
                )
            if col in INTERNAL_COLUMNS and col != first.key:
                raise InvalidPipeline(
                    f"{where}: column {col!r} is a name the runner uses: rename it"
                )

    def event_time_of(self, index: int) -> str | None:
        """The column a fragment's event time is in: the source's ``event_time`` for the first,
        for a later one the ``event_time_column`` of the processor before it (Spark's
        ``eventTimeColumnName``; the watermark stays the source's, as Spark's does), or None."""
        if index == 0:
            return self.event_time
        from workers.processor.operator import processors_of

        before = processors_of(self.fragments[index - 1].operator)
        column: str | None = before[-1].event_time_column if before else None
        return column

    def fragment(self, name: str) -> Fragment:
        for frag in self.fragments:
            if frag.name == name:
                return frag
        known = ", ".join(f.name for f in self.fragments)
        raise UnknownFragment(f"pipeline {self.name!r} has no fragment {name!r} (it has: {known})")

    def with_vnodes(self, vnodes: int) -> Pipeline:
        return replace(self, fragments=tuple(replace(f, vnodes=vnodes) for f in self.fragments))

    def topology_fragments(self) -> list[dict[str, Any]]:
        """Source, stateful fragments and sink, in dataflow order, for the fragment matrix."""
        rows: list[dict[str, Any]] = [{"name": "source", "kind": "source", "region": 0}]
        for frag in self.fragments:
            rows.append(
                {
                    "name": frag.name,
                    "kind": "stateful",
                    "region": frag.region,
                    "vnodes": frag.vnodes,
                    "key": frag.key,
                    "operator": frag.operator.describe(),
                    "upstream": frag.upstream or "source",
                }
            )
        rows.append({"name": SINK_NODE, "kind": "sink", "region": self.fragments[-1].region})
        return rows


def _check_pickles(where: str, frag: Fragment) -> None:
    """The operator travels to Spark's executors by cloudpickle: fail here, not in a task."""
    from pyspark import cloudpickle

    try:
        cloudpickle.dumps(frag.operator)
    except Exception as exc:
        raise InvalidPipeline(
            f"{where}: fragment {frag.name!r}: its operator cannot be pickled for Spark's "
            f"executors ({type(exc).__name__}: {exc}); keep connections, locks and open files "
            f"out of it (open them in init())"
        ) from exc
