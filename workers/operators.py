"""Keyed stateful operators: previous state + the key's records → new state + outputs.

An operator sees, per epoch and per key, the key's records of that epoch in source order (or, if
it defines :meth:`KeyedOperator.combine`, one pre-aggregated row per key computed in Arrow), and
returns the key's new state and the rows it emits downstream. State is serialized as one version
byte followed by msgpack, so it is compact and a future encoding can read an old one.

Writing your own operator::

    class LastPage(KeyedOperator):
        name = "last_page"
        columns = ("page",)
        output_fields = (("page", "string"),)

        def update(self, key, state, records):
            last = records[-1][0]           # records: tuples of `columns`, in source order
            return last, [(key, last)]      # new state, outputs (key, *output_fields)

        def to_json(self, state):
            return {"page": state}

State must be msgpack-serializable (None, bool, int, float, str, bytes, list, dict).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

import msgpack
import pyarrow as pa
import pyarrow.compute as pc

Record = tuple[Any, ...]
Output = tuple[Any, ...]  # (output key, *output_fields)


class OperatorError(Exception):
    """Base class of operator failures."""


class StateVersionError(OperatorError):
    """Stored state was written by an encoding this operator cannot read."""


class KeyedOperator(ABC):
    """A keyed stateful operator. Subclasses set the class attributes and implement update."""

    name: ClassVar[str] = ""
    state_version: ClassVar[int] = 1
    #: record columns the operator reads, besides the key and the sequence number
    columns: ClassVar[tuple[str, ...]] = ()
    #: (name, Arrow type name) of each emitted field after the output key
    output_fields: ClassVar[tuple[tuple[str, str], ...]] = ()
    #: whether a record's position matters (records then arrive in source order, uncombined)
    order_sensitive: ClassVar[bool] = True

    def combine(self, table: pa.Table) -> pa.Table | None:
        """Pre-aggregate one epoch's records per key in Arrow (columns: key + partials).

        Return None (the default) when the operator needs every record in order.
        """
        return None

    @abstractmethod
    def update(self, key: str, state: Any, records: Sequence[Record]) -> tuple[Any, list[Output]]:
        """Fold the key's records (or its one combined row) into its state."""

    def to_json(self, state: Any) -> Any:
        """The state as operators and the API show it."""
        return state

    def encode(self, state: Any) -> bytes:
        packed: bytes = msgpack.packb(state, use_bin_type=True)
        return bytes([self.state_version]) + packed

    def decode(self, data: bytes) -> Any:
        if data[0] != self.state_version:
            raise StateVersionError(
                f"{self.name}: state version {data[0]} stored, this operator reads "
                f"{self.state_version}"
            )
        return msgpack.unpackb(data[1:], raw=False, strict_map_key=False)

    def describe(self) -> str:
        return self.name


class Count(KeyedOperator):
    """Records per key."""

    name = "count"
    order_sensitive = False
    output_fields = (("count", "int64"),)

    def combine(self, table: pa.Table) -> pa.Table:
        out = table.group_by("key").aggregate([("seq", "count")])
        return _named(out, key="key", n="seq_count")

    def update(self, key: str, state: Any, records: Sequence[Record]) -> tuple[Any, list[Output]]:
        new = (state or 0) + records[0][0]
        return new, [(key, new)]


class _ColumnAggregate(KeyedOperator):
    """Sum/min/max of one numeric column per key, combined in Arrow first."""

    agg: ClassVar[str] = ""
    order_sensitive = False

    def __init__(self, column: str) -> None:
        self.column = column
        self.columns = (column,)  # type: ignore[misc]
        self.output_fields = ((self.agg, "double"),)  # type: ignore[misc]

    def combine(self, table: pa.Table) -> pa.Table:
        out = table.group_by("key").aggregate([(self.column, self.agg)])
        return _named(out, key="key", part=f"{self.column}_{self.agg}")

    def _fold(self, state: float, part: float) -> float:
        raise NotImplementedError

    def update(self, key: str, state: Any, records: Sequence[Record]) -> tuple[Any, list[Output]]:
        part = float(records[0][0])
        new = part if state is None else self._fold(state, part)
        return new, [(key, new)]

    def describe(self) -> str:
        return f"{self.name}({self.column})"


class Sum(_ColumnAggregate):
    name = "sum"
    agg = "sum"

    def _fold(self, state: float, part: float) -> float:
        return state + part


class Min(_ColumnAggregate):
    name = "min"
    agg = "min"

    def _fold(self, state: float, part: float) -> float:
        return min(state, part)


class Max(_ColumnAggregate):
    name = "max"
    agg = "max"

    def _fold(self, state: float, part: float) -> float:
        return max(state, part)


class Mean(KeyedOperator):
    """Running mean of a column: state is [sum, count]."""

    name = "mean"
    order_sensitive = False

    def __init__(self, column: str) -> None:
        self.column = column
        self.columns = (column,)  # type: ignore[misc]
        self.output_fields = (("mean", "double"),)  # type: ignore[misc]

    def combine(self, table: pa.Table) -> pa.Table:
        out = table.group_by("key").aggregate([(self.column, "sum"), (self.column, "count")])
        return _named(out, key="key", s=f"{self.column}_sum", n=f"{self.column}_count")

    def update(self, key: str, state: Any, records: Sequence[Record]) -> tuple[Any, list[Output]]:
        total, count = state or (0.0, 0)
        total, count = total + float(records[0][0]), count + int(records[0][1])
        return [total, count], [(key, total / count)]

    def to_json(self, state: Any) -> Any:
        total, count = state
        return {"sum": total, "count": count, "mean": total / count}

    def describe(self) -> str:
        return f"mean({self.column})"


class TumblingWindowCount(KeyedOperator):
    """Records per key per tumbling event-time window, keeping the newest ``retain`` windows.

    A record whose window is older than the key's newest window minus the retention is late: it
    is counted in ``late`` and changes no window. That rule depends on record order, which is why
    this operator sees every record in source order.
    """

    name = "window_count"
    output_fields = (("window_start", "int64"), ("count", "int64"))

    def __init__(self, ts_column: str = "ts", window_s: int = 60, retain: int = 10) -> None:
        self.ts_column = ts_column
        self.window_s = window_s
        self.retain = retain
        self.columns = (ts_column,)  # type: ignore[misc]

    def update(self, key: str, state: Any, records: Sequence[Record]) -> tuple[Any, list[Output]]:
        windows: dict[int, int] = dict(state["w"]) if state else {}
        late = state["late"] if state else 0
        touched: set[int] = set()
        for (ts,) in records:
            start = int(ts) // self.window_s * self.window_s
            newest = max(windows, default=start)
            if start < newest - (self.retain - 1) * self.window_s:
                late += 1
                continue
            windows[start] = windows.get(start, 0) + 1
            touched.add(start)
            floor = max(windows) - (self.retain - 1) * self.window_s
            for old in [w for w in windows if w < floor]:
                del windows[old]
        outputs = [(key, w, windows[w]) for w in sorted(touched) if w in windows]
        return {"w": sorted(windows.items()), "late": late}, outputs

    def to_json(self, state: Any) -> Any:
        return {"windows": {str(w): n for w, n in state["w"]}, "late": state["late"]}

    def describe(self) -> str:
        return f"window_count({self.ts_column}, {self.window_s}s, retain {self.retain})"


class UserActivity(KeyedOperator):
    """Clickstream, keyed by user: events, bytes, sessions, and the pages the user has seen.

    A session starts at a user's first event and whenever the gap since the user's previous
    event exceeds ``session_gap_s``. For each event it emits ``(page, first_visit)`` keyed by
    page, where ``first_visit`` is 1 the first time this user views the page: summed downstream,
    that is an exact unique-user count per page.
    """

    name = "user_activity"
    columns = ("page", "ts", "bytes")
    output_fields = (("first_visit", "int64"),)

    def __init__(self, session_gap_s: int = 1800) -> None:
        self.session_gap_s = session_gap_s

    def update(self, key: str, state: Any, records: Sequence[Record]) -> tuple[Any, list[Output]]:
        events, nbytes, sessions, last_ts, pages = state or (0, 0, 0, None, [])
        seen = set(pages)
        outputs: list[Output] = []
        for page, ts, size in records:
            events += 1
            nbytes += int(size)
            if last_ts is None or int(ts) - last_ts > self.session_gap_s:
                sessions += 1
            last_ts = int(ts) if last_ts is None else max(last_ts, int(ts))
            first = page not in seen
            if first:
                seen.add(page)
            outputs.append((page, int(first)))
        return [events, nbytes, sessions, last_ts, sorted(seen)], outputs

    def to_json(self, state: Any) -> Any:
        events, nbytes, sessions, last_ts, pages = state
        return {
            "events": events,
            "bytes": nbytes,
            "sessions": sessions,
            "last_ts": last_ts,
            "pages": len(pages),
        }


class PageStats(KeyedOperator):
    """Clickstream, keyed by page: views and unique users (from UserActivity's first visits)."""

    name = "page_stats"
    order_sensitive = False
    columns = ("first_visit",)
    output_fields = (("views", "int64"), ("unique_users", "int64"))

    def combine(self, table: pa.Table) -> pa.Table:
        out = table.group_by("key").aggregate([("seq", "count"), ("first_visit", "sum")])
        return _named(out, key="key", views="seq_count", uniques="first_visit_sum")

    def update(self, key: str, state: Any, records: Sequence[Record]) -> tuple[Any, list[Output]]:
        views, uniques = state or (0, 0)
        views, uniques = views + int(records[0][0]), uniques + int(records[0][1])
        return [views, uniques], [(key, views, uniques)]

    def to_json(self, state: Any) -> Any:
        return {"views": state[0], "unique_users": state[1]}


def _named(table: pa.Table, **columns: str) -> pa.Table:
    """Columns picked by name, in the keyword order (Arrow's aggregate column order varies)."""
    return pa.table({new: table.column(old) for new, old in columns.items()})


def sort_by_seq(table: pa.Table) -> pa.Table:
    """Records in source order (the sequence number is global and increasing)."""
    return table.take(pc.sort_indices(table, sort_keys=[("seq", "ascending")]))
