"""The built-in order-sensitive operators: each sees every record of a key, in source order.

``TumblingWindowCount`` counts records per event-time window and calls a record late by the
windows before it; ``UserActivity`` (the clickstream, keyed by user) opens a session after a gap
and emits each page's first visit. ``UserActivity`` writes a columnar layout of its own (state
version 2; version 1, msgpack, is read and rewritten at the next update), which the vectorised
epoch decodes on arrays (``workers.vectorised.activity``).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from itertools import accumulate
from typing import Any

import msgpack
import numpy as np

from workers.operators.base import KeyedOperator, Output, Record, StateVersionError


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
