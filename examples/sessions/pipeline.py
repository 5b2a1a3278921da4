"""Click sessions per user, written against Spark's StatefulProcessor only.

A session is a user's clicks with no gap longer than ``GAP_S`` seconds of event time. The
processor keeps the open session in a value state, the last pages in a list state and the views
per page in a map state, and closes the session with an event-time timer once the watermark
passes its last click plus the gap (or earlier, when a click arrives after a longer gap). Each
closed session is one output row.

``spark_job`` is the job as plain Spark runs it; ``build`` is the same processor as a Rescaler
pipeline: ``RESCALER_PIPELINE=examples.sessions.pipeline:build scripts/dev``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql import Row
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

GAP_S = 2  # the generator's event time advances one second per 1,000 clicks
DELAY_MS = 1_000  # how late a click may be: the watermark's delay
PATH = 5  # pages kept in the session's path
COLUMNS = ("user", "page", "ts", "bytes", "event_time")
OUTPUT = (
    "user string, start long, end long, clicks long, bytes long, pages long, top_page string, "
    "path string"
)


class SessionTracker(StatefulProcessor):
    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.session = handle.getValueState(
            "session", "start long, last long, clicks long, bytes long"
        )
        self.path = handle.getListState("path", "page string")
        self.views = handle.getMapState("views", "page string", "n long")

    def _closed(self, user: str) -> Row:
        """The open session as an output row; its state is cleared."""
        start, last, clicks, nbytes = self.session.get()
        views = sorted(((-n, page) for (page,), (n,) in self.views.iterator()))
        row = Row(
            user=user,
            start=start,
            end=last,
            clicks=clicks,
            bytes=nbytes,
            pages=len(views),
            top_page=views[0][1],
            path=">".join(p for (p,) in self.path.get()),
        )
        self.session.clear()
        self.path.clear()
        self.views.clear()
        for timer in self.handle.listTimers():
            self.handle.deleteTimer(timer)
        return row

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:
        (user,) = key
        for row in rows:
            ts = int(row.ts)
            if self.session.exists() and ts - self.session.get()[1] > GAP_S:
                yield self._closed(user)  # a click after a longer gap starts a new session
            start, last, clicks, nbytes = self.session.get() or (ts, ts, 0, 0)
            self.session.update((start, max(last, ts), clicks + 1, nbytes + int(row.bytes)))
            path = [p for (p,) in self.path.get()][-(PATH - 1) :]
            self.path.put([(p,) for p in (*path, row.page)])
            (n,) = self.views.getValue((row.page,)) or (0,)
            self.views.updateValue((row.page,), (n + 1,))
        if self.session.exists():
            for timer in self.handle.listTimers():
                self.handle.deleteTimer(timer)
            self.handle.registerTimer((self.session.get()[1] + GAP_S) * 1000)

    def handleExpiredTimer(
        self, key: Any, timerValues: Any, expiredTimerInfo: Any
    ) -> Iterator[Row]:
        if self.session.exists():
            yield self._closed(key[0])

    def close(self) -> None:
        pass


def prepare(df: Any) -> Any:
    """The generator's clicks (or JSON-lines files of them), with a timestamp for the watermark."""
    return df.selectExpr(
        "seq", "user", "page", "ts", "bytes", "timestamp_seconds(ts) AS event_time",
        "_malformed", "1 AS src",
    )  # fmt: skip


def spark_job(spark: Any, clicks: Any) -> Any:
    """Before: the job in plain Spark (``clicks``: a streaming DataFrame of the clicks)."""
    return (
        clicks.selectExpr("user", "page", "ts", "bytes", "timestamp_seconds(ts) AS event_time")
        .withWatermark("event_time", f"{DELAY_MS} milliseconds")
        .groupBy("user")
        .transformWithState(SessionTracker(), OUTPUT, "Append", "EventTime")
    )


def build() -> Any:
    """After: the same processor as a Rescaler pipeline."""
    import os

    from workers.pipeline import Fragment, Pipeline
    from workers.processor import ProcessorOperator
    from workers.sinks import sink_from_uri

    tracker = ProcessorOperator(
        SessionTracker(), columns=COLUMNS, output_schema=OUTPUT, time_mode="EventTime"
    )
    return Pipeline(
        name="click_sessions",
        source_kind="events",
        fragments=(Fragment("sessions", tracker, key="user", region=1, vnodes=64),),
        prepare=prepare,
        description="clicks → closed sessions per user (value, list and map state, event-time timer)",
        event_time="event_time",
        watermark_delay_ms=DELAY_MS,
        # closed sessions go where SESSIONS_SINK says, e.g.
        # postgres://postgres@127.0.0.1:5432/rescaler?table=click_sessions&key=user,start
        # (exactly once, docs/sources-and-sinks.md); by default Arrow files to look at
        sink=sink_from_uri(os.environ.get("SESSIONS_SINK", "files")),
    )
