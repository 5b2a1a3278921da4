"""A fragment's operator made of Spark's ``StatefulProcessor``: what it declares, checked once
at start-up, and how its state is encoded and shown."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pyarrow as pa

from workers.operators.base import KeyedOperator, Output
from workers.processor.schema import (
    INTERFACES,
    TIME_MODES,
    UnsupportedProcessor,
    output_arrow_type,
    simple_output,
    struct_of,
    type_name,
    user_name,
    wire_name,
)
from workers.processor.state import KeyState, ProcessorHandle, StateVariable
from workers.processor.values import jsonable


class ProcessorOperator(KeyedOperator):
    """A fragment's operator made of a ``pyspark.sql.streaming.StatefulProcessor``.

    ``columns``: the input columns the processor's rows carry, in order (the fragment's key
    column may be one of them); ``output_schema``: the processor's output (StructType or DDL);
    ``time_mode``: Spark's ``timeMode`` ("None", "ProcessingTime", "EventTime");
    ``interface``: "row" (``transformWithState``) or "pandas" (``transformWithStateInPandas``);
    ``output_key``: the output column a downstream fragment is keyed by (default: the first);
    ``initial_state``: Spark's ``initialState``, as a function of the Spark session returning the
    DataFrame (it is grouped by ``initial_state_key``, default the fragment's key column, which
    must have the type of the fragment's key): at the pipeline's first epoch, each key's rows
    are handed to ``handleInitialState`` before any input row, as Spark does in its first batch;
    ``event_time_column``: Spark's ``eventTimeColumnName``, the timestamp output column that
    carries event time into the next fragment (which may then run in EventTime on it); an
    emitted row at or below the epoch's watermark for late rows fails the epoch, as Spark's
    ``EMITTED_ROWS_OLDER_THAN_WATERMARK`` fails the batch.
    """

    name = "processor"
    order_sensitive = True

    def __init__(
        self,
        processor: Any,
        *,
        columns: Iterable[str],
        output_schema: Any,
        time_mode: str = "None",
        interface: str = "row",
        output_key: str | None = None,
        key_column: str | None = None,
        initial_state: Callable[[Any], Any] | None = None,
        initial_state_key: str | None = None,
        event_time_column: str | None = None,
    ) -> None:
        self.processor = processor
        self.columns = tuple(columns)  # type: ignore[misc]
        self.time_mode = time_mode.lower()
        self.interface = interface.lower()
        # as given, for Spark's own transformWithState (the same processor under both engines)
        self.time_mode_spark = {"none": "None", "processingtime": "ProcessingTime"}.get(
            self.time_mode, "EventTime"
        )
        self.output_schema_spark = output_schema
        self._output_schema = output_schema
        self.key_column = key_column  # set by the fragment: its key column, if among columns
        out = self._output_struct = struct_of(output_schema)
        self.output_key = output_key or (out.fields[0].name if out.fields else "")
        # every output column, under its name in Rescaler's tables (workers.processor.schema
        # wire_name: a column named like one of Rescaler's, "key" or "seq", stays the user's),
        # with the Arrow type Spark's transformWithState gives it (refused by inspect if none)
        self.output_fields = tuple(  # type: ignore[misc]
            (wire_name(f.name), _arrow_or_none(f)) for f in out.fields
        )
        #: whether every output column reaches Arrow as it is (no Spark conversion needed)
        self.simple_outputs = all(simple_output(f) for f in out.fields)
        #: Spark's session time zone, which pandas timestamps are read and written in (set by
        #: the job from its Spark session)
        self.timezone = "UTC"
        self.variables: dict[str, StateVariable] = {}
        self.deleted: frozenset[str] = frozenset()
        self.initial_state = initial_state
        self.initial_state_key = initial_state_key
        self.event_time_column = event_time_column

    def initial_state_frame(self, spark: Any) -> Any:
        """The initial state's DataFrame (Spark analyses it; nothing runs until it is read)."""
        assert self.initial_state is not None
        frame = self.initial_state(spark)
        if not hasattr(frame, "schema") or not hasattr(frame, "select"):
            raise UnsupportedProcessor(
                f"initial_state must return a DataFrame (what Spark's initialState is grouped "
                f"from), not {type(frame).__name__}"
            )
        return frame

    @property
    def output_struct(self) -> Any:
        return self._output_struct

    def _names_out(self) -> list[str]:
        return [f.name for f in self.output_struct.fields]

    @property
    def has_timers(self) -> bool:
        return self.time_mode != "none"

    def describe(self) -> str:
        kind = type(self.processor).__name__
        states = "; ".join(v.describe() for v in self.variables.values())
        return f"{kind} ({self.interface}, time {self.time_mode}{'; ' + states if states else ''})"

    def inspect(self) -> None:
        """Check what the processor uses, once, at start-up: every refusal names the feature."""
        if self.time_mode not in TIME_MODES:
            raise UnsupportedProcessor(
                f"timeMode {self.time_mode!r}: Spark's modes are None, ProcessingTime, EventTime"
            )
        if self.interface not in INTERFACES:
            raise UnsupportedProcessor(f"interface {self.interface!r}: use 'row' or 'pandas'")
        from pyspark.sql.streaming import StatefulProcessor

        if not isinstance(self.processor, StatefulProcessor):
            raise UnsupportedProcessor(
                f"{type(self.processor).__name__} is not a pyspark.sql.streaming.StatefulProcessor"
            )
        for f in self.output_struct.fields:
            output_arrow_type(f)  # refuses a type Rescaler does not carry, naming it
        if not self.output_struct.fields:
            raise UnsupportedProcessor("the output schema has no columns")
        if self.initial_state is not None and not callable(self.initial_state):
            raise UnsupportedProcessor(
                "initial_state is a function of the Spark session returning the initial "
                "state's DataFrame (for example lambda spark: spark.read.parquet(path))"
            )
        if self.event_time_column is not None:
            field = next(
                (f for f in self.output_struct.fields if f.name == self.event_time_column), None
            )
            if field is None or type(field.dataType).__name__ != "TimestampType":
                found = "not an output column" if field is None else type_name(field.dataType)
                raise UnsupportedProcessor(
                    f"event_time_column {self.event_time_column!r} (Spark's eventTimeColumnName) "
                    f"must be a timestamp output column: it is {found}"
                )
        if self.output_key not in self._names_out():
            raise UnsupportedProcessor(
                f"output_key {self.output_key!r} is not an output column "
                f"({', '.join(self._names_out())})"
            )
        handle = ProcessorHandle(self.time_mode)
        self.processor.init(handle)  # type: ignore[arg-type]  # the same methods, our storage
        self.variables = dict(handle.variables)
        # deleted and not declared again: what the key finder never shows
        self.deleted = frozenset(handle.deleted - set(handle.variables))
        try:
            self.processor.close()
        except Exception as exc:
            raise UnsupportedProcessor(f"close() failed after init(): {exc!r}") from exc

    def sink_table(self, outputs: pa.Table) -> pa.Table:
        """The epoch's outputs as the sink gets them: the output schema's columns, by their own
        names, as Spark's ``foreachBatch`` gets them (no column of Rescaler's)."""
        return sink_columns(outputs, self.output_fields)

    # KeyedOperator's per-key form is not used: the task calls ProcessorRun instead
    def update(self, key: str, state: Any, records: Any) -> tuple[Any, list[Output]]:
        raise NotImplementedError("a processor folds through workers.processor.ProcessorRun")

    def decode(self, data: bytes) -> Any:
        return KeyState.decode(data)

    def encode(self, state: Any) -> bytes:
        encoded: bytes = state.encode()
        return encoded

    def to_json(self, state: Any) -> Any:
        """Per state variable, as the key finder shows it, plus the pending timers."""
        out: dict[str, Any] = {}
        if self.deleted:
            state = KeyState(
                {n: v for n, v in state.values.items() if n not in self.deleted},
                {n: v for n, v in state.lists.items() if n not in self.deleted},
                {n: v for n, v in state.maps.items() if n not in self.deleted},
                state.timers,
            )
        for name, (value, expiry) in state.values.items():
            out[name] = {"kind": "value", "value": jsonable(value), "expires_ms": expiry}
        for name, entries in state.lists.items():
            out[name] = {"kind": "list", "values": [jsonable(e[0]) for e in entries]}
        for name, entries in state.maps.items():
            pairs = [[jsonable(e[0]), jsonable(e[1])] for e in entries.values()]
            out[name] = {"kind": "map", "entries": pairs}
        return {"state": out, "timers": sorted(state.timers)}


def _arrow_or_none(field: Any) -> Any:
    try:
        return output_arrow_type(field)
    except UnsupportedProcessor:
        return None


def processors_of(operator: Any) -> list[ProcessorOperator]:
    """A fragment's processors in order: the operator itself, or a keyed region's chain (none
    for another operator)."""
    chain = getattr(operator, "operators", None)
    found = list(chain) if chain is not None else [operator]
    return [op for op in found if isinstance(op, ProcessorOperator)]


def sink_columns(outputs: pa.Table, fields: Iterable[tuple[str, Any]]) -> pa.Table:
    """A processor's outputs with only its own columns, by the user's names."""
    names = [wire for wire, _ in fields]
    return outputs.select(names).rename_columns([user_name(n) for n in names])
