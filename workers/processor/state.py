"""A processor's state under Rescaler: the handle it is given in ``init`` (Spark's
``StatefulProcessorHandle`` methods), its value, list and map state variables, and one key's
state as its store entry holds it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from workers.processor.schema import UnsupportedProcessor, check_state
from workers.processor.values import packed, reader, store_value, unpacked

STATE_VERSION = 1


@dataclass
class StateVariable:
    """One state variable the processor declared in ``init``."""

    name: str
    kind: str  # "value", "list" or "map"
    schema: Any  # StructType of the value
    key_schema: Any = None  # StructType of a map's user key
    ttl_ms: int | None = None

    def __post_init__(self) -> None:
        self._codec: tuple[Any, ...] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_codec"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._codec = None

    def _codecs(self) -> tuple[Any, ...]:
        if self._codec is None:
            key = self.key_schema
            self._codec = (
                store_value(self.schema),
                reader(self.schema),
                store_value(key) if key is not None else None,
                reader(key) if key is not None else None,
            )
        return self._codec

    def store(self, value: Any) -> list[Any]:
        """A value the processor stores, as Spark keeps it (workers.processor.values)."""
        kept: list[Any] = self._codecs()[0](value)
        return kept

    def read(self, stored: Any) -> tuple[Any, ...]:
        """A stored value as Spark's ``get`` gives it."""
        value: tuple[Any, ...] = self._codecs()[1](stored)
        return value

    def store_key(self, key: Any) -> list[Any]:
        kept: list[Any] = self._codecs()[2](key)
        return kept

    def read_key(self, stored: Any) -> tuple[Any, ...]:
        value: tuple[Any, ...] = self._codecs()[3](stored)
        return value

    def describe(self) -> str:
        ttl = f", ttl {self.ttl_ms} ms" if self.ttl_ms else ""
        if self.kind == "map":
            return f"map {self.name}<{self.key_schema.simpleString()}, {self.schema.simpleString()}>{ttl}"
        return f"{self.kind} {self.name}<{self.schema.simpleString()}>{ttl}"


# -- one key's state ---------------------------------------------------------------------------
@dataclass
class KeyState:
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
        return bytes([STATE_VERSION]) + packed(body)

    @classmethod
    def decode(cls, data: bytes) -> KeyState:
        if data[0] != STATE_VERSION:
            raise ValueError(f"processor state version {data[0]}, this code reads {STATE_VERSION}")
        values, lists, maps, timers = unpacked(data[1:])
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


def _live(expiry: int | None, now_ms: int) -> bool:
    return expiry is None or expiry > now_ms


# -- the handle and its state variables ----------------------------------------------------------
class ProcessorHandle:
    """The ``StatefulProcessorHandle`` Rescaler gives a processor: state of the current key."""

    def __init__(self, time_mode: str) -> None:
        self.time_mode = time_mode
        self.variables: dict[str, StateVariable] = {}
        self.current: KeyState | None = None
        self.now_ms = 0  # the batch timestamp, for TTLs
        self.declaring = True  # True inside init: declaring state, no key yet
        self.deleted: set[str] = set()  # deleteIfExists in init: gone from every key

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
        var = StateVariable(stateName, "value", check_state(stateName, schema), None, ttlDurationMs)
        self._declare(var)
        return ValueStateImpl(self, var)

    def getListState(
        self, stateName: str, schema: Any, ttlDurationMs: int | None = None
    ) -> ListStateImpl:
        var = StateVariable(stateName, "list", check_state(stateName, schema), None, ttlDurationMs)
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
            check_state(stateName, valueSchema),
            check_state(f"{stateName} (key)", userKeySchema),
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
        """Spark's: the variable of every key is gone. In ``init`` only, as Spark allows it;
        each key's entry drops it when the key is next read (:meth:`forget_deleted`), and the
        key finder shows none meanwhile."""
        if not self.declaring:
            raise UnsupportedProcessor(
                f"deleteIfExists({stateName!r}) outside init(): Spark allows it only in init()"
            )
        self.deleted.add(stateName)
        self.variables.pop(stateName, None)

    def forget_deleted(self, state: KeyState) -> None:
        """Drop what ``deleteIfExists`` deleted from a key's state as it was stored (a variable
        declared again after its deletion starts empty, as in Spark)."""
        for name in self.deleted:
            state.values.pop(name, None)
            state.lists.pop(name, None)
            state.maps.pop(name, None)

    def _timers(self) -> set[int]:
        if self.time_mode == "none":
            raise UnsupportedProcessor(
                "timers need timeMode 'ProcessingTime' or 'EventTime' (this fragment's is 'None')"
            )
        return self.state().timers

    def state(self) -> KeyState:
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
        return self._var.read(entry[0])

    def update(self, newValue: Any) -> None:
        self._handle.state().values[self._var.name] = [
            self._var.store(newValue),
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
        read = self._var.read
        return iter([read(e[0]) for e in self._entries()])

    def put(self, newState: list[Any]) -> None:
        expiry = self._handle.expiry(self._var)
        entries = [[self._var.store(v), expiry] for v in newState]
        self._set(entries)

    def appendValue(self, newState: Any) -> None:
        self.appendList([newState])

    def appendList(self, newState: list[Any]) -> None:
        expiry = self._handle.expiry(self._var)
        added = [[self._var.store(v), expiry] for v in newState]
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
        entry = self._map().get(_hashable(self._var.store_key(key)))
        if entry is None or not _live(entry[2], self._handle.now_ms):
            return None
        return self._var.read(entry[1])

    def containsKey(self, key: Any) -> bool:
        return self.getValue(key) is not None

    def updateValue(self, key: Any, value: Any) -> None:
        k = self._var.store_key(key)
        maps = self._handle.state().maps
        maps.setdefault(self._var.name, {})[_hashable(k)] = [
            k,
            self._var.store(value),
            self._handle.expiry(self._var),
        ]

    def iterator(self) -> Iterator[tuple[tuple[Any, ...], tuple[Any, ...]]]:
        var = self._var
        return iter([(var.read_key(e[0]), var.read(e[1])) for e in self._live_items()])

    def keys(self) -> Iterator[tuple[Any, ...]]:
        return iter([self._var.read_key(e[0]) for e in self._live_items()])

    def values(self) -> Iterator[tuple[Any, ...]]:
        return iter([self._var.read(e[1]) for e in self._live_items()])

    def removeKey(self, key: Any) -> None:
        m = self._map()
        m.pop(_hashable(self._var.store_key(key)), None)
        if not m:
            self.clear()

    def clear(self) -> None:
        self._handle.state().maps.pop(self._var.name, None)


def purge_expired(state: KeyState, now_ms: int) -> None:
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
