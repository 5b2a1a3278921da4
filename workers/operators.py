"""Keyed stateful operators: previous state + the key's records → new state + outputs.

An operator sees, per epoch and per key, the key's records of that epoch in source order (or, if
it defines :meth:`KeyedOperator.combine` or declares ``aggregates``, one pre-aggregated row per
key; declared aggregates can also be folded in Spark, ``workers.partials``), and
returns the key's new state and the rows it emits downstream. State is serialized as one version
byte followed by msgpack, so it is compact and a future encoding can read an old one.

The built-in operators also run vectorised (``workers/vectorised.py``: a whole epoch slice on
arrays), so their encodings are laid out for arrays: the numeric ones write msgpack's fixed-width
forms (:class:`FixedForm`, still version 1: any msgpack reader reads them), ``UserActivity``
writes a columnar layout (version 2; version 1 values are read and rewritten on their next update).

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

import struct
from abc import ABC, abstractmethod
from collections.abc import Sequence
from itertools import accumulate
from typing import Any, ClassVar

import msgpack
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from workers.columnar import binary_from_parts, binary_parts, gather_segments
from workers.partials import aggregates_of, column_name, fold

Record = tuple[Any, ...]
Output = tuple[Any, ...]  # (output key, *output_fields)
#: the Arrow type of each name a built-in operator's output field may have
ARROW_TYPES = {
    "int64": pa.int64(),
    "double": pa.float64(),
    "string": pa.string(),
    "int32": pa.int32(),
    "boolean": pa.bool_(),
}


def arrow_type(typ: str | pa.DataType) -> pa.DataType:
    """An output field's Arrow type: a built-in operator's names one of ``ARROW_TYPES``, a
    processor's is an Arrow type already (any of Spark's, nested included)."""
    return typ if isinstance(typ, pa.DataType) else ARROW_TYPES[typ]


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
    #: (name, type) of each emitted field after the output key: a name of ``ARROW_TYPES``, or
    #: an Arrow type (:func:`arrow_type`)
    output_fields: ClassVar[tuple[tuple[str, str | pa.DataType], ...]] = ()
    #: whether a record's position matters (records then arrive in source order, uncombined)
    order_sensitive: ClassVar[bool] = True
    #: decomposable aggregates of a key's records, (column, function) with function one of
    #: count, sum, min, max. Declared by an operator that is not order-sensitive, they let the
    #: engine fold records per key in Spark as well as in the task (``workers.partials``);
    #: ``update`` then receives one row of them, in this order.
    aggregates: tuple[tuple[str, str], ...] = ()

    def combine(self, table: pa.Table) -> pa.Table | None:
        """Pre-aggregate one epoch's records per key in Arrow (columns: key + partials).

        The default folds the declared ``aggregates``; None (no aggregates, or order-sensitive)
        when the operator needs every record in order. Override it only in an operator without
        ``aggregates`` (the engine folds declared aggregates itself, and cannot merge what an
        override returns); it runs in the task.
        """
        aggregates = aggregates_of(self)
        if not aggregates:
            return None
        folded = fold(table, aggregates)
        return folded.select(["key", *(column_name(c, f) for c, f in aggregates)])

    @abstractmethod
    def update(self, key: str, state: Any, records: Sequence[Record]) -> tuple[Any, list[Output]]:
        """Fold the key's records (or its one combined row) into its state."""

    def to_json(self, state: Any) -> Any:
        """The state as operators and the API show it."""
        return state

    def sink_table(self, outputs: pa.Table) -> pa.Table:
        """The epoch's outputs as the sink gets them: ``key``, ``seq`` and the output fields."""
        return outputs

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


class FixedForm:
    """A state of a few int64/float64 numbers in msgpack's fixed-width forms.

    msgpack writes small integers in one byte and larger ones in 3, 5 or 9, so a column of
    compact values has no fixed stride. Always writing the 9-byte forms (``0xd3`` int 64,
    ``0xcb`` float 64, inside a ``fixarray`` when there are several) keeps the value valid
    msgpack that any reader (``KeyedOperator.decode``, older code) reads as before, and gives every
    value of an operator one width, so numpy reads a whole column of them as one record array.
    """

    _TAGS = {"i": 0xD3, "f": 0xCB}
    _TYPES = {"i": ">i8", "f": ">f8"}

    def __init__(self, version: int, kinds: str) -> None:
        """``kinds``: one letter per number, ``i`` (int64) or ``f`` (float64)."""
        self.version = version
        self.kinds = kinds
        fields: list[tuple[str, str]] = [("version", "u1")]
        codes = ">B"
        self.prefix: tuple[int, ...] = (version,)
        if len(kinds) > 1:
            fields.append(("array", "u1"))
            codes += "B"
            self.prefix += (0x90 | len(kinds),)
        for i, kind in enumerate(kinds):
            fields += [(f"tag{i}", "u1"), (f"v{i}", self._TYPES[kind])]
            codes += "Bq" if kind == "i" else "Bd"
        self.dtype = np.dtype(fields)
        self.struct = struct.Struct(codes)

    def pack(self, *values: float) -> bytes:
        """One state's bytes (the per-key path's encoding)."""
        args: list[Any] = list(self.prefix)
        for kind, value in zip(self.kinds, values, strict=True):
            args += [self._TAGS[kind], value]
        return self.struct.pack(*args)

    def pack_columns(self, columns: Sequence[np.ndarray]) -> pa.LargeBinaryArray:
        """The states of a batch of keys, one per row of ``columns``, as the bytes of :meth:`pack`."""
        n = len(columns[0])
        rows = np.empty(n, self.dtype)
        rows["version"] = self.version
        if len(self.kinds) > 1:
            rows["array"] = self.prefix[1]
        for i, (kind, column) in enumerate(zip(self.kinds, columns, strict=True)):
            rows[f"tag{i}"] = self._TAGS[kind]
            rows[f"v{i}"] = column
        return binary_from_parts(np.full(n, self.dtype.itemsize, np.int64), rows.view(np.uint8))

    def unpack_columns(self, values: pa.Array) -> tuple[np.ndarray, list[np.ndarray]]:
        """(in_form, columns): which values are in this fixed form, and their numbers.

        Null values and values in another form (msgpack's compact forms, written before the
        fixed form existed) are not in the form; their rows of ``columns`` are zero.
        """
        n = len(values)
        offsets, data = binary_parts(values)
        size = self.dtype.itemsize
        in_form = np.asarray(values.is_valid(), bool) & (np.diff(offsets) == size)
        rows = np.zeros(n, self.dtype)
        candidates = np.flatnonzero(in_form)
        if len(candidates):
            raw = gather_segments(data, offsets[candidates], np.full(len(candidates), size))
            found = raw.view(self.dtype)
            ok = found["version"] == self.version
            if len(self.kinds) > 1:
                ok &= found["array"] == self.prefix[1]
            for i, kind in enumerate(self.kinds):
                ok &= found[f"tag{i}"] == self._TAGS[kind]
            in_form[candidates[~ok]] = False
            rows[candidates[ok]] = found[ok]
        native = {"i": np.int64, "f": np.float64}
        return in_form, [rows[f"v{i}"].astype(native[k]) for i, k in enumerate(self.kinds)]


class Count(KeyedOperator):
    """Records per key."""

    name = "count"
    order_sensitive = False
    output_fields = (("count", "int64"),)
    form = FixedForm(1, "i")
    aggregates = (("seq", "count"),)

    def update(self, key: str, state: Any, records: Sequence[Record]) -> tuple[Any, list[Output]]:
        new = (state or 0) + records[0][0]
        return new, [(key, new)]

    def encode(self, state: Any) -> bytes:
        return self.form.pack(state)


def canonical_nan(value: float) -> float:
    """Every NaN as the one quiet NaN Python makes. IEEE 754 leaves the sign and payload of a
    NaN produced by arithmetic (inf - inf) unspecified, and Arrow's SIMD sums produce either
    sign from run to run: without this, a replayed or vectorised epoch could store other bytes
    for the same value (the vectorised path does the same, ``workers.vectorised``)."""
    return float("nan") if value != value else value


class _ColumnAggregate(KeyedOperator):
    """Sum/min/max of one numeric column per key, combined in Arrow first."""

    agg: ClassVar[str] = ""
    order_sensitive = False
    form = FixedForm(1, "f")

    def __init__(self, column: str) -> None:
        self.column = column
        self.columns = (column,)  # type: ignore[misc]
        self.output_fields = ((self.agg, "double"),)  # type: ignore[misc]
        self.aggregates = ((column, self.agg),)

    def encode(self, state: Any) -> bytes:
        return self.form.pack(state)

    def _fold(self, state: float, part: float) -> float:
        raise NotImplementedError

    def update(self, key: str, state: Any, records: Sequence[Record]) -> tuple[Any, list[Output]]:
        part = float(records[0][0])
        new = canonical_nan(part if state is None else self._fold(state, part))
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
    form = FixedForm(1, "fi")

    def __init__(self, column: str) -> None:
        self.column = column
        self.columns = (column,)  # type: ignore[misc]
        self.output_fields = (("mean", "double"),)  # type: ignore[misc]
        self.aggregates = ((column, "sum"), (column, "count"))

    def encode(self, state: Any) -> bytes:
        return self.form.pack(*state)

    def update(self, key: str, state: Any, records: Sequence[Record]) -> tuple[Any, list[Output]]:
        total, count = state or (0.0, 0)
        total = canonical_nan(total + float(records[0][0]))
        count = count + int(records[0][1])
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
    #: 2: the columnar layout below; 1 (msgpack) is still read and rewritten at the next update
    state_version = 2
    #: version, events, bytes, sessions, last_ts, number of pages; then one little-endian u32
    #: end offset per page; then the pages' UTF-8 bytes, in sorted order, back to back
    header = struct.Struct("<BqqqqI")
    header_dtype = np.dtype(
        [
            ("version", "u1"),
            ("events", "<i8"),
            ("nbytes", "<i8"),
            ("sessions", "<i8"),
            ("last_ts", "<i8"),
            ("pages", "<u4"),
        ]
    )

    def __init__(self, session_gap_s: int = 1800) -> None:
        self.session_gap_s = session_gap_s

    def encode(self, state: Any) -> bytes:
        events, nbytes, sessions, last_ts, pages = state
        data = [page.encode("utf-8") for page in pages]
        ends = struct.pack(f"<{len(data)}I", *accumulate(map(len, data)))
        head = self.header.pack(self.state_version, events, nbytes, sessions, last_ts, len(data))
        return head + ends + b"".join(data)

    def decode(self, data: bytes) -> Any:
        if data[0] == 1:  # msgpack, from before the columnar layout
            return msgpack.unpackb(data[1:], raw=False, strict_map_key=False)
        if data[0] != self.state_version:
            raise StateVersionError(
                f"{self.name}: state version {data[0]} stored, this operator reads 1 and "
                f"{self.state_version}"
            )
        _, events, nbytes, sessions, last_ts, n = self.header.unpack_from(data)
        ends = struct.unpack_from(f"<{n}I", data, self.header.size)
        body = data[self.header.size + 4 * n :]
        pages = [body[a:b].decode("utf-8") for a, b in zip((0, *ends), ends)]
        return [events, nbytes, sessions, last_ts, pages]

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
    form = FixedForm(1, "ii")
    aggregates = (("seq", "count"), ("first_visit", "sum"))

    def encode(self, state: Any) -> bytes:
        return self.form.pack(*state)

    def update(self, key: str, state: Any, records: Sequence[Record]) -> tuple[Any, list[Output]]:
        views, uniques = state or (0, 0)
        views, uniques = views + int(records[0][0]), uniques + int(records[0][1])
        return [views, uniques], [(key, views, uniques)]

    def to_json(self, state: Any) -> Any:
        return {"views": state[0], "unique_users": state[1]}


def sort_by_seq(table: pa.Table) -> pa.Table:
    """Records in source order (the sequence number is global and increasing)."""
    return table.take(pc.sort_indices(table, sort_keys=[("seq", "ascending")]))
