"""Spark's own ``StatefulProcessor`` as a Rescaler operator: the same class runs under Spark's
``transformWithState`` and under Rescaler, unchanged.

Rescaler gives the processor a handle of its own (:class:`ProcessorHandle`) whose state lives in
the PU's store under the key's vnode, so every state variable and timer of a key moves with its
vnode in a live rescale, is exported by a stop-start and is committed atomically with the epoch:

* **one entry per key**: every value, list and map state variable of the key, with each value's
  TTL expiry, and the key's timers, in one msgpack value (``_KeyState``);
* **one timer-index entry per timer** (``vnode | 0xff | expiry | key``): a key's user part never
  starts with 0xff (UTF-8 has no such byte), and the index sorts by expiry inside the vnode's
  range, so the due timers of a vnode are one short range scan and move with the vnode.

Time follows Spark's rules, from the epoch's :class:`EpochClock` (recorded in the epoch plan, so a
re-run sees the same times):

* processing time is the epoch's batch timestamp; a processing-time timer fires once the batch
  timestamp reaches it, after the epoch's input rows;
* event time: the watermark of an epoch is the largest event time of all earlier epochs minus
  the pipeline's delay (never going back); rows at or below the previous epoch's watermark are
  late and dropped (Spark's watermark for late events); event-time timers up to the watermark
  fire after the epoch's rows, as in a Spark batch (an empty epoch is Spark's no-data batch);
* a TTL counts in processing time: a value updated at batch time *t* is gone at ``t + ttl``.

What Spark offers and Rescaler does not is refused when the pipeline starts (:func:`inspect`),
never ignored: ``deleteIfExists``, an initial state, and state types whose values are not plain
(decimal, nested struct).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import msgpack
import pyarrow as pa

from workers.hashing import (
    SECTION_MARK,
    TIMER_MARK,
    KeyRange,
    key_range_index,
    stable_hash64,
)
from workers.operators import KeyedOperator, Output, Record
from workers.pipeline.placement import EpochClock

TIME_MODES = ("none", "processingtime", "eventtime")
INTERFACES = ("row", "pandas")
STATE_VERSION = 1
_EXPIRY = struct.Struct(">Q")
_BIAS = 1 << 63
#: Spark types a state variable may hold, and the Arrow type name of an output column
_PLAIN_STATE_TYPES = (
    "string",
    "long",
    "bigint",
    "int",
    "integer",
    "short",
    "smallint",
    "byte",
    "tinyint",
    "double",
    "float",
    "boolean",
    "binary",
    "timestamp",
    "timestamp_ntz",
    "date",
)
OUTPUT_TYPES = {
    "string": "string",
    "long": "int64",
    "bigint": "int64",
    "int": "int32",
    "integer": "int32",
    "double": "double",
    "boolean": "boolean",
}
#: columns every task's output carries besides the processor's, and the two a pre-aggregated
#: fragment adds (workers.partials): a processor may not use them
RESERVED_OUTPUT_NAMES = ("kind", "key", "seq", "info", "src", "vnode", "slot", "_own", "_records")


class UnsupportedProcessor(ValueError):
    """The processor uses something Rescaler does not support; the message names it."""


def _type_name(schema: Any) -> str:
    """A Spark type's simple name (``bigint``, ``string``, ...)."""
    return str(schema.simpleString() if hasattr(schema, "simpleString") else schema).lower()


_DDL_TYPES = {
    "string": "StringType",
    "long": "LongType",
    "bigint": "LongType",
    "int": "IntegerType",
    "integer": "IntegerType",
    "short": "ShortType",
    "smallint": "ShortType",
    "byte": "ByteType",
    "tinyint": "ByteType",
    "double": "DoubleType",
    "float": "FloatType",
    "real": "FloatType",
    "boolean": "BooleanType",
    "binary": "BinaryType",
    "timestamp": "TimestampType",
    "timestamp_ntz": "TimestampNTZType",
    "date": "DateType",
}


def _top_level_fields(ddl: str) -> list[str]:
    """``a long, b decimal(10,2), c map<string,int>`` -> its three fields."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(ddl):
        depth += ch in "(<"
        depth -= ch in ")>"
        if ch == "," and depth == 0:
            parts.append(ddl[start:i])
            start = i + 1
    parts.append(ddl[start:])
    return parts


def _struct(schema: Any) -> Any:
    """A state or output schema (StructType or flat DDL string) as a StructType.

    Spark parses DDL in its JVM, which Spark's Python workers and a driver that has not started
    Spark yet do not have; the flat schemas a processor's state and output use are parsed here.
    """
    from pyspark.sql import types as T

    if isinstance(schema, T.StructType):
        return schema
    if not isinstance(schema, str):
        raise UnsupportedProcessor(f"a schema must be a StructType or a DDL string, not {schema!r}")
    fields = []
    for part in _top_level_fields(schema):
        words = part.replace(":", " ").split()
        if len(words) < 2:
            raise UnsupportedProcessor(f"cannot read schema {schema!r}: {part.strip()!r}")
        name, typ = words[0].strip("`"), " ".join(words[1:]).lower()
        nullable = not typ.endswith("not null")
        typ = typ.removesuffix("not null").strip()
        if typ not in _DDL_TYPES:
            raise UnsupportedProcessor(
                f"schema {schema!r}: field {name!r} has type {typ}; Rescaler takes flat schemas "
                f"of {', '.join(sorted(_DDL_TYPES))}"
            )
        fields.append(T.StructField(name, getattr(T, _DDL_TYPES[typ])(), nullable))
    return T.StructType(fields)


def _check_plain(what: str, schema: Any) -> Any:
    struct_type = _struct(schema)
    for f in struct_type.fields:
        name = _type_name(f.dataType)
        if name not in _PLAIN_STATE_TYPES:
            raise UnsupportedProcessor(
                f"{what}: field {f.name!r} has type {name}; Rescaler stores state fields of "
                f"types {', '.join(_PLAIN_STATE_TYPES)}"
            )
    return struct_type


@dataclass
class StateVariable:
    """One state variable the processor declared in ``init``."""

    name: str
    kind: str  # "value", "list" or "map"
    schema: Any  # StructType of the value
    key_schema: Any = None  # StructType of a map's user key
    ttl_ms: int | None = None

    def describe(self) -> str:
        ttl = f", ttl {self.ttl_ms} ms" if self.ttl_ms else ""
        if self.kind == "map":
            return f"map {self.name}<{self.key_schema.simpleString()}, {self.schema.simpleString()}>{ttl}"
        return f"{self.kind} {self.name}<{self.schema.simpleString()}>{ttl}"


# -- one key's state ---------------------------------------------------------------------------
@dataclass
class _KeyState:
    """Every state variable and timer of one key: what its one store entry holds."""

    values: dict[str, list[Any]] = field(default_factory=dict)  # name -> [value, expiry]
    lists: dict[str, list[list[Any]]] = field(default_factory=dict)  # name -> [[value, expiry]]
    maps: dict[str, dict[Any, list[Any]]] = field(default_factory=dict)  # name -> {k: [k, v, exp]}
    timers: set[int] = field(default_factory=set)

    @property
    def empty(self) -> bool:
        return not (self.values or self.lists or self.maps or self.timers)

    def encode(self) -> bytes:
        body = [
            self.values,
            self.lists,
            {name: list(m.values()) for name, m in self.maps.items()},
            sorted(self.timers),
        ]
        packed: bytes = msgpack.packb(body, use_bin_type=True)
        return bytes([STATE_VERSION]) + packed

    @classmethod
    def decode(cls, data: bytes) -> _KeyState:
        if data[0] != STATE_VERSION:
            raise ValueError(f"processor state version {data[0]}, this code reads {STATE_VERSION}")
        values, lists, maps, timers = msgpack.unpackb(data[1:], raw=False, strict_map_key=False)
        return cls(
            values,
            lists,
            {
                name: {_hashable(k): [k, v, e] for k, v, e in entries}
                for name, entries in maps.items()
            },
            set(timers),
        )


def _hashable(value: Any) -> Any:
    return tuple(_hashable(v) for v in value) if isinstance(value, list) else value


def _internal(schema: Any, value: Any) -> list[Any]:
    """A value as Spark stores it (``StructType.toInternal``): a list for msgpack."""
    if not isinstance(value, tuple | list):
        raise TypeError(f"state values are tuples (one item per schema field), not {value!r}")
    return list(schema.toInternal(tuple(value)))


def _live(expiry: int | None, now_ms: int) -> bool:
    return expiry is None or expiry > now_ms


def section_of(index: int) -> bytes:
    """The key prefix of operator ``index`` of a keyed region: 0xfe, then its index. Like 0xff,
    0xfe never starts a UTF-8 key, so each operator's keys are a range of their own."""
    return SECTION_MARK + bytes([index])


def timer_key(vnode: int, expiry_ms: int, key: bytes, section: bytes = b"") -> bytes:
    """The timer-index entry of a key's timer: sorted by expiry inside the vnode's range (and
    inside the operator's section, in a keyed region)."""
    from workers.state.base import encode_key

    return encode_key(vnode, TIMER_MARK + section + _EXPIRY.pack(expiry_ms + _BIAS) + key)


def timer_range(vnode: int, up_to_ms: int, section: bytes = b"") -> tuple[bytes, bytes]:
    """[start, end) of a vnode's timers expiring at or before ``up_to_ms``."""
    from workers.state.base import encode_key

    return (
        encode_key(vnode, TIMER_MARK + section),
        encode_key(vnode, TIMER_MARK + section + _EXPIRY.pack(up_to_ms + 1 + _BIAS)),
    )


def _in_ranges(key: str, ranges: Iterable[KeyRange]) -> bool:
    """Whether ``key`` is in one of a vnode's key ranges."""
    return any(key_range_index(stable_hash64(key), r.count) == r.index for r in ranges)


def parse_timer_key(user_key: bytes) -> tuple[int, str] | None:
    """(expiry, key) of a timer-index entry's user key, or None for an ordinary key."""
    if not user_key.startswith(TIMER_MARK):
        return None
    at = 3 if user_key[1:2] == SECTION_MARK else 1
    expiry = _EXPIRY.unpack_from(user_key, at)[0] - _BIAS
    return expiry, user_key[at + _EXPIRY.size :].decode("utf-8")


# -- the handle and its state variables ----------------------------------------------------------
class ProcessorHandle:
    """The ``StatefulProcessorHandle`` Rescaler gives a processor: state of the current key."""

    def __init__(self, time_mode: str) -> None:
        self.time_mode = time_mode
        self.variables: dict[str, StateVariable] = {}
        self.current: _KeyState | None = None
        self.now_ms = 0  # the batch timestamp, for TTLs
        self.declaring = True  # True inside init: declaring state, no key yet

    # state variables are declared in init; a state object reads the current key's state
    def _declare(self, variable: StateVariable) -> None:
        if not self.declaring:
            raise UnsupportedProcessor(
                f"state variable {variable.name!r} declared outside init(); declare every state "
                f"variable in init(), as Spark requires"
            )
        known = self.variables.get(variable.name)
        if known is not None and known.kind != variable.kind:
            raise UnsupportedProcessor(f"state variable {variable.name!r} declared twice")
        if variable.ttl_ms is not None and self.time_mode != "processingtime":
            raise UnsupportedProcessor(
                f"state variable {variable.name!r} has a TTL, which Spark allows only in "
                f"timeMode ProcessingTime (this fragment's is {self.time_mode!r})"
            )
        if variable.ttl_ms is not None and variable.ttl_ms <= 0:
            raise UnsupportedProcessor(
                f"state variable {variable.name!r}: ttlDurationMs must be positive"
            )
        self.variables[variable.name] = variable

    def getValueState(
        self, stateName: str, schema: Any, ttlDurationMs: int | None = None
    ) -> ValueStateImpl:
        var = StateVariable(
            stateName, "value", _check_plain(stateName, schema), None, ttlDurationMs
        )
        self._declare(var)
        return ValueStateImpl(self, var)

    def getListState(
        self, stateName: str, schema: Any, ttlDurationMs: int | None = None
    ) -> ListStateImpl:
        var = StateVariable(stateName, "list", _check_plain(stateName, schema), None, ttlDurationMs)
        self._declare(var)
        return ListStateImpl(self, var)

    def getMapState(
        self,
        stateName: str,
        userKeySchema: Any,
        valueSchema: Any,
        ttlDurationMs: int | None = None,
    ) -> MapStateImpl:
        var = StateVariable(
            stateName,
            "map",
            _check_plain(stateName, valueSchema),
            _check_plain(f"{stateName} (key)", userKeySchema),
            ttlDurationMs,
        )
        self._declare(var)
        return MapStateImpl(self, var)

    def registerTimer(self, expiryTimestampMs: int) -> None:
        self._timers().add(int(expiryTimestampMs))

    def deleteTimer(self, expiryTimestampMs: int) -> None:
        self._timers().discard(int(expiryTimestampMs))

    def listTimers(self) -> Iterator[int]:
        return iter(sorted(self._timers()))

    def deleteIfExists(self, stateName: str) -> None:
        raise UnsupportedProcessor(
            f"deleteIfExists({stateName!r}) is not supported by Rescaler: it would drop a state "
            f"variable of every key at once; stop declaring the variable instead"
        )

    def _timers(self) -> set[int]:
        if self.time_mode == "none":
            raise UnsupportedProcessor(
                "timers need timeMode 'ProcessingTime' or 'EventTime' (this fragment's is 'None')"
            )
        return self.state().timers

    def state(self) -> _KeyState:
        if self.current is None:
            raise UnsupportedProcessor(
                "state read or written outside handleInputRows/handleExpiredTimer (no current key)"
            )
        return self.current

    def expiry(self, var: StateVariable) -> int | None:
        return self.now_ms + var.ttl_ms if var.ttl_ms else None


class _StateBase:
    def __init__(self, handle: ProcessorHandle, var: StateVariable) -> None:
        self._handle = handle
        self._var = var


class ValueStateImpl(_StateBase):
    def exists(self) -> bool:
        return self.get() is not None

    def get(self) -> tuple[Any, ...] | None:
        entry = self._handle.state().values.get(self._var.name)
        if entry is None or not _live(entry[1], self._handle.now_ms):
            return None
        return tuple(entry[0])

    def update(self, newValue: Any) -> None:
        self._handle.state().values[self._var.name] = [
            _internal(self._var.schema, newValue),
            self._handle.expiry(self._var),
        ]

    def clear(self) -> None:
        self._handle.state().values.pop(self._var.name, None)


class ListStateImpl(_StateBase):
    def _entries(self) -> list[list[Any]]:
        now = self._handle.now_ms
        return [e for e in self._handle.state().lists.get(self._var.name, []) if _live(e[1], now)]

    def exists(self) -> bool:
        return bool(self._entries())

    def get(self) -> Iterator[tuple[Any, ...]]:
        return iter([tuple(e[0]) for e in self._entries()])

    def put(self, newState: list[Any]) -> None:
        expiry = self._handle.expiry(self._var)
        entries = [[_internal(self._var.schema, v), expiry] for v in newState]
        self._set(entries)

    def appendValue(self, newState: Any) -> None:
        self.appendList([newState])

    def appendList(self, newState: list[Any]) -> None:
        expiry = self._handle.expiry(self._var)
        added = [[_internal(self._var.schema, v), expiry] for v in newState]
        self._set(self._entries() + added)

    def clear(self) -> None:
        self._handle.state().lists.pop(self._var.name, None)

    def _set(self, entries: list[list[Any]]) -> None:
        if entries:
            self._handle.state().lists[self._var.name] = entries
        else:
            self.clear()


class MapStateImpl(_StateBase):
    def _map(self) -> dict[Any, list[Any]]:
        return self._handle.state().maps.get(self._var.name, {})

    def _live_items(self) -> list[list[Any]]:
        now = self._handle.now_ms
        return [e for e in self._map().values() if _live(e[2], now)]

    def exists(self) -> bool:
        return bool(self._live_items())

    def getValue(self, key: Any) -> tuple[Any, ...] | None:
        entry = self._map().get(_hashable(_internal(self._var.key_schema, key)))
        if entry is None or not _live(entry[2], self._handle.now_ms):
            return None
        return tuple(entry[1])

    def containsKey(self, key: Any) -> bool:
        return self.getValue(key) is not None

    def updateValue(self, key: Any, value: Any) -> None:
        k = _internal(self._var.key_schema, key)
        maps = self._handle.state().maps
        maps.setdefault(self._var.name, {})[_hashable(k)] = [
            k,
            _internal(self._var.schema, value),
            self._handle.expiry(self._var),
        ]

    def iterator(self) -> Iterator[tuple[tuple[Any, ...], tuple[Any, ...]]]:
        return iter([(tuple(e[0]), tuple(e[1])) for e in self._live_items()])

    def keys(self) -> Iterator[tuple[Any, ...]]:
        return iter([tuple(e[0]) for e in self._live_items()])

    def values(self) -> Iterator[tuple[Any, ...]]:
        return iter([tuple(e[1]) for e in self._live_items()])

    def removeKey(self, key: Any) -> None:
        m = self._map()
        m.pop(_hashable(_internal(self._var.key_schema, key)), None)
        if not m:
            self.clear()

    def clear(self) -> None:
        self._handle.state().maps.pop(self._var.name, None)


def _purge_expired(state: _KeyState, now_ms: int) -> None:
    """Drop the values whose TTL ran out (Spark removes them in the background)."""
    state.values = {n: e for n, e in state.values.items() if _live(e[1], now_ms)}
    state.lists = {
        n: kept for n, es in state.lists.items() if (kept := [e for e in es if _live(e[1], now_ms)])
    }
    state.maps = {
        n: live
        for n, m in state.maps.items()
        if (live := {k: e for k, e in m.items() if _live(e[2], now_ms)})
    }


# -- the operator ----------------------------------------------------------------------------
class ProcessorOperator(KeyedOperator):
    """A fragment's operator made of a ``pyspark.sql.streaming.StatefulProcessor``.

    ``columns``: the input columns the processor's rows carry, in order (the fragment's key
    column may be one of them); ``output_schema``: the processor's output (StructType or DDL);
    ``time_mode``: Spark's ``timeMode`` ("None", "ProcessingTime", "EventTime");
    ``interface``: "row" (``transformWithState``) or "pandas" (``transformWithStateInPandas``);
    ``output_key``: the output column a downstream fragment is keyed by (default: the first).
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
        out = _struct(output_schema)
        self.output_key = output_key or (out.fields[0].name if out.fields else "")
        # an output column named "key" that is the output key is the tasks' own key column
        self.output_fields = tuple(  # type: ignore[misc]
            (f.name, OUTPUT_TYPES.get(_type_name(f.dataType), "?"))
            for f in out.fields
            if not (f.name == "key" and self.output_key == "key")
        )
        self.variables: dict[str, StateVariable] = {}

    @property
    def output_struct(self) -> Any:
        return _struct(self._output_schema)

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
            if f.name == "key" and self.output_key == "key" and _type_name(f.dataType) != "string":
                raise UnsupportedProcessor(
                    f"output column 'key' is the output key and must be a string, not "
                    f"{_type_name(f.dataType)}"
                )
        for name, typ in self.output_fields:
            if name in RESERVED_OUTPUT_NAMES:
                raise UnsupportedProcessor(
                    f"output column {name!r} is a name Rescaler's tasks use "
                    f"({', '.join(RESERVED_OUTPUT_NAMES)}): rename it in the output schema"
                    + (" (a column named 'key' may be the output key)" if name == "key" else "")
                )
            if typ == "?":
                spark_type = next(
                    _type_name(f.dataType) for f in self.output_struct.fields if f.name == name
                )
                raise UnsupportedProcessor(
                    f"output column {name!r} has type {spark_type}; outputs may be "
                    f"{', '.join(sorted(OUTPUT_TYPES))}"
                )
        if not self.output_struct.fields:
            raise UnsupportedProcessor("the output schema has no columns")
        if self.output_key not in self._names_out():
            raise UnsupportedProcessor(
                f"output_key {self.output_key!r} is not an output column "
                f"({', '.join(n for n, _ in self.output_fields)})"
            )
        handle = ProcessorHandle(self.time_mode)
        self.processor.init(handle)  # type: ignore[arg-type]  # the same methods, our storage
        self.variables = dict(handle.variables)
        try:
            self.processor.close()
        except Exception as exc:
            raise UnsupportedProcessor(f"close() failed after init(): {exc!r}") from exc

    # KeyedOperator's per-key form is not used: the task calls ProcessorRun instead
    def update(self, key: str, state: Any, records: Any) -> tuple[Any, list[Output]]:
        raise NotImplementedError("a processor folds through workers.processor.ProcessorRun")

    def decode(self, data: bytes) -> Any:
        return _KeyState.decode(data)

    def encode(self, state: Any) -> bytes:
        encoded: bytes = state.encode()
        return encoded

    def to_json(self, state: Any) -> Any:
        """Per state variable, as the key finder shows it, plus the pending timers."""
        out: dict[str, Any] = {}
        for name, (value, expiry) in state.values.items():
            out[name] = {"kind": "value", "value": value, "expires_ms": expiry}
        for name, entries in state.lists.items():
            out[name] = {"kind": "list", "values": [e[0] for e in entries]}
        for name, entries in state.maps.items():
            out[name] = {"kind": "map", "entries": [[e[0], e[1]] for e in entries.values()]}
        return {"state": out, "timers": sorted(state.timers)}


@dataclass
class Segment:
    """Rows folded with one clock: a past epoch's held rows, or this epoch's records."""

    clock: EpochClock
    records: pa.Table  # key, seq, vnode, the operator's columns (and the event-time column)
    vnodes: tuple[int, ...]  # whose timers fire with this clock


class ProcessorRun:
    """One task's run of a processor over its PU's store: input rows and timers, per clock."""

    def __init__(
        self,
        operator: ProcessorOperator,
        store: Any,
        event_time: str | None,
        *,
        section: bytes = b"",
        same_key: bool = False,
    ) -> None:
        self.op = operator
        self.store = store
        self.event_time = event_time
        self.section = section  # the operator's key prefix inside a keyed region
        self.same_key = same_key  # outputs must keep the input's key (a region's inner operator)
        self.handle = ProcessorHandle(operator.time_mode)
        operator.processor.init(self.handle)
        self.handle.declaring = False
        self.states: dict[bytes, _KeyState | None] = {}  # store key -> state (None: absent)
        self.olds: dict[bytes, bytes | None] = {}
        self.timers_before: dict[bytes, set[int]] = {}
        self.vnode_of: dict[bytes, int] = {}
        self.key_of: dict[bytes, str] = {}
        self.outputs: list[tuple[Any, ...]] = []
        self.output_seq: list[int] = []
        self.output_vnode: list[int] = []
        out = operator.output_struct
        self._out_names = [f.name for f in out.fields]

    # -- state cache
    def _load(self, vnode: int, key: str) -> tuple[bytes, _KeyState]:
        from workers.state.base import encode_key

        skey = encode_key(vnode, self.section + key.encode("utf-8"))
        if skey not in self.states:
            raw = self.store.get(skey)
            self.olds[skey] = raw
            loaded = _KeyState.decode(raw) if raw is not None else _KeyState()
            self.states[skey] = loaded
            self.timers_before[skey] = set(loaded.timers)
            self.vnode_of[skey] = vnode
            self.key_of[skey] = key
        state = self.states[skey]
        assert state is not None
        return skey, state

    def _timer_values(self, clock: EpochClock) -> Any:
        from pyspark.sql.streaming.stateful_processor import TimerValues

        watermark = clock.watermark_ms if self.op.time_mode == "eventtime" else -1
        batch = clock.batch_ms if self.op.time_mode != "none" else -1
        return TimerValues(batch, watermark)

    def _emit(self, results: Any, key: str, vnode: int, seq: int) -> None:
        if results is None:
            return
        rows: list[tuple[Any, ...]] = []
        for item in results:
            if self.op.interface == "pandas":
                frame = item
                cols = [
                    frame[n].tolist() if n in frame.columns else [None] * len(frame)
                    for n in self._out_names
                ]
                rows.extend(tuple(row) for row in zip(*cols, strict=True))
            elif hasattr(item, "asDict"):
                d = item.asDict()
                rows.append(tuple(d.get(n) for n in self._out_names))
            else:
                rows.append(tuple(item))
        if self.same_key:
            at = self._out_names.index(self.op.output_key)
            moved = [r[at] for r in rows if str(r[at]) != key]
            if moved:
                raise ValueError(
                    f"{type(self.op.processor).__name__} emitted {self.op.output_key}="
                    f"{moved[0]!r} for key {key!r}: inside a keyed region an operator's outputs "
                    f"keep its key (end the region there and key the next fragment instead)"
                )
        self.outputs.extend(rows)
        self.output_seq.extend([seq] * len(rows))
        self.output_vnode.extend([vnode] * len(rows))

    # -- one segment
    def fold(self, segment: Segment) -> None:
        """Spark's order within a batch: the input rows (late ones dropped), then the timers."""
        clock = segment.clock
        self.handle.now_ms = clock.batch_ms
        records = segment.records
        if self.op.time_mode == "eventtime" and self.event_time and records.num_rows:
            import pyarrow.compute as pc

            ts = _millis(records.column(self.event_time))
            records = records.filter(pc.greater(ts, clock.late_ms))
        if records.num_rows:
            self._fold_rows(records, clock)
        if self.op.time_mode == "processingtime":
            self.fire_timers(segment.vnodes, clock, clock.batch_ms)
        elif self.op.time_mode == "eventtime":
            self.fire_timers(segment.vnodes, clock, clock.watermark_ms)

    def _fold_rows(self, records: pa.Table, clock: EpochClock) -> None:
        from workers.operators import sort_by_seq

        ordered = sort_by_seq(records)
        keys = ordered.column("key").to_pylist()
        vnodes = ordered.column("vnode").to_pylist()
        seqs = ordered.column("seq").to_pylist()
        cols = [c for c in self.op.columns if c != self.op.key_column]
        values = {c: ordered.column(c).to_pylist() for c in cols}
        groups: dict[str, list[int]] = {}
        for i, key in enumerate(keys):
            groups.setdefault(key, []).append(i)
        timer_values = self._timer_values(clock)
        for key, rows in groups.items():
            _, state = self._load(vnodes[rows[0]], key)
            _purge_expired(state, clock.batch_ms)
            self.handle.current = state
            try:
                data = self._rows(key, rows, values)
                results = self.op.processor.handleInputRows((key,), data, timer_values)
                self._emit(results, key, vnodes[rows[0]], seqs[rows[-1]])
            finally:
                self.handle.current = None

    def _rows(self, key: str, rows: list[int], values: dict[str, list[Any]]) -> Iterator[Any]:
        names = list(self.op.columns)

        def value(col: str, i: int) -> Any:
            return key if col == self.op.key_column else values[col][i]

        if self.op.interface == "pandas":
            import pandas as pd  # type: ignore[import-untyped]

            return iter([pd.DataFrame({c: [value(c, i) for i in rows] for c in names})])
        from pyspark.sql import Row

        return iter([Row(**{c: value(c, i) for c in names}) for i in rows])

    def fire_timers(self, vnodes: Iterable[int], clock: EpochClock, up_to_ms: int) -> None:
        """Fire every timer of these vnodes' keys due at ``up_to_ms``, in expiry order."""
        from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo

        from workers.state.base import decode_key

        vnode_set = set(vnodes)
        # a hot vnode's key ranges sealed here are in transit, or moved away: their keys' timers
        # fire where the range goes, after its acquire (a write here would be refused)
        sealed = self.store.sealed_key_ranges()
        due: set[tuple[int, str, int]] = set()
        for vnode in vnode_set:
            start, end = timer_range(vnode, up_to_ms, self.section)
            away = sealed.get(vnode, ())
            for store_key, _ in self.store.scan(start, end):
                parsed = parse_timer_key(decode_key(store_key)[1])
                if parsed is not None and not _in_ranges(parsed[1], away):
                    due.add((parsed[0], parsed[1], vnode))
        # the cache is newer than the store for keys this task touched
        touched = {
            self.key_of[skey]: (self.vnode_of[skey], state)
            for skey, state in self.states.items()
            if state is not None and self.vnode_of[skey] in vnode_set
        }
        due = {d for d in due if d[1] not in touched}
        for key, (vnode, state) in touched.items():
            due |= {(t, key, vnode) for t in state.timers if t <= up_to_ms}
        timer_values = self._timer_values(clock)
        for expiry, key, vnode in sorted(due):
            _, state = self._load(vnode, key)
            if expiry not in state.timers:  # deleted by an earlier timer of this key
                continue
            _purge_expired(state, clock.batch_ms)
            self.handle.current = state
            try:
                results = self.op.processor.handleExpiredTimer(
                    (key,), timer_values, ExpiredTimerInfo(expiry)
                )
                self._emit(results, key, vnode, 0)
            finally:
                self.handle.current = None
            state.timers.discard(expiry)  # as Spark: deleted once its handler has run

    def close(self) -> None:
        try:
            self.op.processor.close()
        except Exception:  # close is the user's cleanup; the epoch's state is already decided
            pass

    def updates(self) -> list[Any]:
        """The epoch's store updates: each touched key's entry and its timer-index entries."""
        from workers.state.base import Update

        updates: list[Update] = []
        for skey, state in self.states.items():
            assert state is not None
            old = self.olds[skey]
            new = None if state.empty else state.encode()
            if new != old:
                updates.append(Update(skey, old, new))
            vnode = self.vnode_of[skey]
            key = self.key_of[skey].encode("utf-8")
            before, after = self.timers_before[skey], state.timers
            for t in sorted(before - after):
                updates.append(Update(timer_key(vnode, t, key, self.section), b"t", None))
            for t in sorted(after - before):
                updates.append(Update(timer_key(vnode, t, key, self.section), None, b"t"))
        return sorted(updates, key=lambda u: u.key)

    def take_outputs(self) -> pa.Table:
        """The outputs since the last call, with each row's vnode (a region's next operator's
        input), and forget them."""
        table = self.output_table().append_column("vnode", pa.array(self.output_vnode, pa.int64()))
        self.outputs, self.output_seq, self.output_vnode = [], [], []
        return table

    def output_table(self) -> pa.Table:
        from workers.epoch import ARROW_TYPES

        columns = list(zip(*self.outputs)) if self.outputs else [() for _ in self._out_names]
        by_name = dict(zip(self._out_names, columns, strict=True))
        keys = [None if v is None else str(v) for v in by_name[self.op.output_key]]
        arrays = [pa.array(keys, pa.string()), pa.array(self.output_seq, pa.int64())]
        names = ["key", "seq"]
        for name, typ in self.op.output_fields:
            arrays.append(pa.array(list(by_name[name]), ARROW_TYPES[typ]))
            names.append(name)
        return pa.Table.from_arrays(arrays, names=names)


def _millis(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """An event-time column as epoch milliseconds (a timestamp, or a number of seconds)."""
    import pyarrow.compute as pc

    if pa.types.is_timestamp(column.type):
        return pc.cast(pc.cast(column, pa.timestamp("ms", tz=column.type.tz)), pa.int64())
    return pc.multiply(pc.cast(column, pa.int64()), 1000)


def max_event_ms(records: pa.Table | None, column: str | None) -> int | None:
    """The largest event time (ms) among ``records``, for the runner's watermark."""
    if (
        records is None
        or column is None
        or records.num_rows == 0
        or column not in records.column_names
    ):
        return None
    import pyarrow.compute as pc

    value = pc.max(_millis(records.column(column))).as_py()
    return int(value) if value is not None else None


__all__ = [
    "EpochClock",
    "ProcessorOperator",
    "ProcessorRun",
    "Record",
    "Segment",
    "UnsupportedProcessor",
]
