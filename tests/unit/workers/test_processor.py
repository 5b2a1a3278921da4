"""Spark's StatefulProcessor under Rescaler's handle, on a real store, without a JVM: state
variables and their TTL, timers in both time modes, the timer index moving with its vnode,
and the refusals that name what Rescaler does not support."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import Row
from pyspark.sql.streaming import StatefulProcessor

from workers.hashing import KeyRange, key_range_of, vnode_of
from workers.pipeline.placement import EpochClock
from workers.processor import (
    ProcessorOperator,
    ProcessorRun,
    Segment,
    UnsupportedProcessor,
    max_event_ms,
    parse_timer_key,
)
from workers.state import open_store
from workers.state.base import columnar_checksum, decode_key

VNODES = 8


class Tally(StatefulProcessor):
    """Counts per key, remembers the pages in a list and per-page counts in a map; a timer
    ``wait_ms`` after each batch emits the count (processing or event time)."""

    def __init__(self, wait_ms: int | None = 1_000, ttl_ms: int | None = None) -> None:
        self.wait_ms = wait_ms
        self.ttl_ms = ttl_ms

    def init(self, handle: Any) -> None:
        self.handle = handle
        self.count = handle.getValueState("count", "n long", self.ttl_ms)
        self.pages = handle.getListState("pages", "page string", self.ttl_ms)
        self.per_page = handle.getMapState("per_page", "page string", "n long", self.ttl_ms)

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:
        (n,) = self.count.get() or (0,)
        for row in rows:
            n += 1
            self.pages.appendValue((row.page,))
            (p,) = self.per_page.getValue((row.page,)) or (0,)
            self.per_page.updateValue((row.page,), (p + 1,))
        self.count.update((n,))
        now = (
            timerValues.getCurrentWatermarkInMs()
            if timerValues.getCurrentWatermarkInMs() >= 0
            else timerValues.getCurrentProcessingTimeInMs()
        )
        if self.wait_ms is not None:
            for t in self.handle.listTimers():
                self.handle.deleteTimer(t)
            self.handle.registerTimer(max(now, 0) + self.wait_ms)
        return iter([Row(user=key[0], n=n, fired=False)])

    def handleExpiredTimer(
        self, key: Any, timerValues: Any, expiredTimerInfo: Any
    ) -> Iterator[Row]:
        (n,) = self.count.get() or (0,)
        return iter([Row(user=key[0], n=n, fired=True)])


def operator(mode: str, **kwargs: Any) -> ProcessorOperator:
    op = ProcessorOperator(
        Tally(**kwargs),
        columns=("user", "page", "ts"),
        output_schema="user string, n long, fired boolean",
        time_mode=mode,
        key_column="user",
    )
    op.inspect()
    return op


def records(rows: list[tuple[str, str, int]], first_seq: int = 0) -> pa.Table:
    users = [r[0] for r in rows]
    return pa.table(
        {
            "key": pa.array(users, pa.string()),
            "seq": pa.array(range(first_seq, first_seq + len(rows)), pa.int64()),
            "vnode": pa.array([vnode_of(u, VNODES) for u in users], pa.int64()),
            "page": pa.array([r[1] for r in rows], pa.string()),
            "ts": pa.array([r[2] for r in rows], pa.int64()),
        }
    )


def epoch(
    path: Path,
    op: ProcessorOperator,
    number: int,
    rows: list[tuple[str, str, int]],
    clock: EpochClock,
    event_time: str | None = None,
) -> list[dict[str, Any]]:
    with open_store("lmdb", path) as store:
        run = ProcessorRun(op, store, event_time)
        run.fold(Segment(clock, records(rows, number * 100), tuple(range(VNODES))))
        run.close()
        store.commit_epoch(number, run.updates())
        rows_out: list[dict[str, Any]] = run.output_table().to_pylist()
        return rows_out


def state_of(path: Path, op: ProcessorOperator, user: str) -> Any:
    from workers.state.base import encode_key

    with open_store("lmdb", path) as store:
        raw = store.get(encode_key(vnode_of(user, VNODES), user.encode()))
        return None if raw is None else op.to_json(op.decode(raw))


def test_value_list_and_map_state_persist_across_epochs(tmp_path: Path) -> None:
    op = operator("None", wait_ms=None)
    out = epoch(tmp_path, op, 0, [("a", "p1", 0), ("a", "p2", 0), ("b", "p1", 0)], EpochClock())
    assert sorted((r["user"], r["n"], r["key"]) for r in out) == [("a", 2, "a"), ("b", 1, "b")]
    out = epoch(tmp_path, op, 1, [("a", "p1", 0)], EpochClock())
    assert [(r["user"], r["n"]) for r in out] == [("a", 3)]
    state = state_of(tmp_path, op, "a")["state"]
    assert state["count"]["value"] == [3]
    assert state["pages"]["values"] == [["p1"], ["p2"], ["p1"]]
    assert sorted(state["per_page"]["entries"]) == [[["p1"], [2]], [["p2"], [1]]]
    assert state_of(tmp_path, op, "nobody") is None


def test_processing_time_timers_fire_once_at_their_time_and_move_with_the_vnode(
    tmp_path: Path,
) -> None:
    op = operator("ProcessingTime", wait_ms=1_000)
    epoch(tmp_path, op, 0, [("a", "p", 0)], EpochClock(batch_ms=10_000))
    assert state_of(tmp_path, op, "a")["timers"] == [11_000]
    with open_store("lmdb", tmp_path) as store:  # the index entry lies in a's vnode range
        export = store.export_vnode(vnode_of("a", VNODES))
    timers = [parse_timer_key(decode_key(k)[1]) for k, _ in export.items]
    assert (11_000, "a") in timers
    assert epoch(tmp_path, op, 1, [], EpochClock(batch_ms=10_999)) == []
    fired = epoch(tmp_path, op, 2, [], EpochClock(batch_ms=11_000))
    assert [(r["user"], r["n"], r["fired"]) for r in fired] == [("a", 1, True)]
    assert state_of(tmp_path, op, "a")["timers"] == []
    assert epoch(tmp_path, op, 3, [], EpochClock(batch_ms=50_000)) == []
    with open_store("lmdb", tmp_path) as store:  # the index entry is gone with the timer
        left = [k for k, _ in store.scan() if decode_key(k)[1].startswith(b"\xff")]
    assert left == []


def test_timers_of_a_key_range_in_transit_fire_where_it_goes_not_where_it_is_sealed(
    tmp_path: Path,
) -> None:
    """A hot vnode moving key range by key range: the source still owns the vnode's other
    ranges, but the keys of the range it has sealed (in flight, or moved away) are not its to
    write; their due timers fire on the target once the range is acquired."""
    op = operator("ProcessingTime", wait_ms=1_000)
    users = [f"u{i}" for i in range(400)]
    vnode = vnode_of(users[0], VNODES)
    mine = [u for u in users if vnode_of(u, VNODES) == vnode]
    kr = KeyRange(1, 2)
    sealed = {u for u in mine if key_range_of(u.encode(), 2) == 1}
    assert sealed and set(mine) - sealed
    source, target = tmp_path / "source", tmp_path / "target"
    epoch(source, op, 0, [(u, "p", 0) for u in mine], EpochClock(batch_ms=10_000))
    with open_store("lmdb", source) as store:
        store.seal_key_range(vnode, kr)
        keys, values = store.key_range_columns(vnode, kr)
    fired = epoch(source, op, 1, [], EpochClock(batch_ms=11_000))
    assert {r["user"] for r in fired} == set(mine) - sealed, "the sealed range's timers wait"
    with open_store("lmdb", target) as store:  # the target acquires the range
        store.ingest_key_range(vnode, kr, keys, values, columnar_checksum(keys, values))
    fired = epoch(target, op, 1, [], EpochClock(batch_ms=11_000))
    assert {r["user"] for r in fired} == sealed
    assert all(state_of(target, op, u)["timers"] == [] for u in sealed)


def test_event_time_drops_late_rows_then_fires_timers_after_the_rows(tmp_path: Path) -> None:
    op = operator("EventTime", wait_ms=5_000)
    epoch(tmp_path, op, 0, [("a", "p", 1)], EpochClock(0, 0, 0), event_time="ts")
    # a watermark of 4 s: a's timer (0 + 5 s) is not due; b's late row (1 s <= 2 s) is dropped
    out = epoch(tmp_path, op, 1, [("b", "p", 1), ("a", "p", 9)], EpochClock(0, 4_000, 2_000), "ts")
    assert [(r["user"], r["fired"]) for r in out] == [("a", False)]
    assert state_of(tmp_path, op, "b") is None
    # the rows come first: a's new row moves its timer to 4 s + 5 s before timers are looked at
    out = epoch(tmp_path, op, 2, [("a", "p", 9)], EpochClock(0, 6_000, 4_000), "ts")
    assert [(r["n"], r["fired"]) for r in out] == [(3, False)]
    out = epoch(tmp_path, op, 3, [], EpochClock(0, 11_000, 6_000), "ts")
    assert [(r["n"], r["fired"]) for r in out] == [(3, True)]


@pytest.mark.parametrize(
    "ts",
    [
        # Spark's timestamp_seconds(<double>) as Spark hands it to Python: microseconds
        pa.array([2_000_000, 2_000_500, 2_001_000, 9_999_999], pa.timestamp("us", tz="UTC")),
        pa.array([2.0, 2.0005, 2.001, 9.999999], pa.float64()),  # fractional seconds
    ],
    ids=["timestamp-us", "double-seconds"],
)
def test_sub_millisecond_event_times_are_compared_and_watermarked_as_spark_does(
    tmp_path: Path, ts: pa.Array
) -> None:
    """Spark drops a row as late when its event time in microseconds is at or below the previous
    watermark times 1,000, and takes the watermark from event times cut to milliseconds."""
    table = records([("a", "p", 0), ("b", "p", 0), ("c", "p", 0), ("d", "p", 0)], 100)
    table = table.set_column(table.column_names.index("ts"), "ts", ts)
    assert max_event_ms(table, "ts") == 9_999  # 9 999 999 us cut to 9 999 ms
    op = operator("EventTime", wait_ms=None)
    with open_store("lmdb", tmp_path) as store:
        run = ProcessorRun(op, store, "ts")
        # late at or below 2 000 ms: the row at exactly 2 s is late, 2 000.5 ms is not
        run.fold(Segment(EpochClock(0, 2_000, 2_000), table, tuple(range(VNODES))))
        kept = sorted(r["user"] for r in run.output_table().to_pylist())
    assert kept == ["b", "c", "d"]


def test_a_ttl_hides_and_then_drops_expired_values(tmp_path: Path) -> None:
    op = operator("ProcessingTime", wait_ms=10**9, ttl_ms=1_000)
    epoch(tmp_path, op, 0, [("a", "p", 0)], EpochClock(batch_ms=5_000))
    out = epoch(tmp_path, op, 1, [("a", "p", 0)], EpochClock(batch_ms=5_999))
    assert out[0]["n"] == 2  # still alive, and refreshed by the update
    out = epoch(tmp_path, op, 2, [("a", "q", 0)], EpochClock(batch_ms=7_500))
    assert out[0]["n"] == 1  # expired at 6 999: counting starts again
    state = state_of(tmp_path, op, "a")["state"]
    assert state["pages"]["values"] == [["q"]]
    assert state["per_page"]["entries"] == [[["q"], [1]]]


class NumpyCounts(StatefulProcessor):
    """What a pandas processor naturally stores: numpy scalars, from ``len`` of a frame's
    column, ``Series.sum()`` and the frame's values."""

    def init(self, handle: Any) -> None:
        self.total = handle.getValueState("total", "n long, mean double")
        self.seen = handle.getListState("seen", "n long")
        self.per_page = handle.getMapState("per_page", "page string", "n long")

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[Any]:
        import pandas as pd

        for frame in rows:
            n = frame["n"].sum()  # numpy.int64
            self.total.update((n, frame["n"].mean()))  # numpy.int64, numpy.float64
            self.seen.appendList([(v,) for v in frame["n"].to_numpy()])
            for page, count in frame.groupby("page")["n"].count().items():
                self.per_page.updateValue((page,), (count,))
            yield pd.DataFrame({"user": [key[0]], "n": [n]})


def test_numpy_and_pandas_scalars_are_stored_as_spark_stores_them(tmp_path: Path) -> None:
    op = ProcessorOperator(
        NumpyCounts(),
        columns=("user", "page", "n"),
        output_schema="user string, n long",
        interface="pandas",
        key_column="user",
    )
    op.inspect()
    table = records([("a", "p", 0), ("a", "q", 0), ("a", "q", 0)])
    table = table.append_column("n", pa.array([1, 2, 4], pa.int64()))
    with open_store("lmdb", tmp_path) as store:
        run = ProcessorRun(op, store, None)
        run.fold(Segment(EpochClock(), table, tuple(range(VNODES))))
        store.commit_epoch(0, run.updates())
        assert run.output_table().to_pylist()[0]["n"] == 7
    state = state_of(tmp_path, op, "a")["state"]
    assert state["total"]["value"] == [7, 7 / 3]
    assert state["seen"]["values"] == [[1], [2], [4]]
    assert sorted(state["per_page"]["entries"]) == [[["p"], [1]], [["q"], [2]]]
    assert all(type(v) in (int, float) for v in state["total"]["value"])


class Refused(StatefulProcessor):
    def __init__(self, what: str) -> None:
        self.what = what

    def init(self, handle: Any) -> None:
        if self.what == "ttl":
            handle.getValueState("v", "n long", 1_000)
        elif self.what == "delete":
            handle.deleteIfExists("v")
        elif self.what == "interval":
            from pyspark.sql import types as T

            interval = T.StructType([T.StructField("gap", T.DayTimeIntervalType())])
            handle.getValueState("v", interval)
        elif self.what == "nested interval":
            from pyspark.sql import types as T

            inner = T.ArrayType(T.YearMonthIntervalType())
            handle.getListState("v", T.StructType([T.StructField("a", inner)]))

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[Row]:
        return iter([])


@pytest.mark.parametrize(
    ("what", "mode", "message"),
    [
        ("ttl", "EventTime", "TTL, which Spark allows only in timeMode ProcessingTime"),
        ("interval", "None", "field 'gap' has type interval day to second"),
        ("nested interval", "None", "field 'a' has type interval year to month"),
        ("none", "Sometime", "timeMode 'sometime'"),
    ],
)
def test_unsupported_features_are_refused_by_name(what: str, mode: str, message: str) -> None:
    op = ProcessorOperator(Refused(what), columns=("k",), output_schema="k string", time_mode=mode)
    with pytest.raises(UnsupportedProcessor, match=message.replace("(", r"\(").replace(")", r"\)")):
        op.inspect()


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ("user string, gap interval day", "'interval' is not a Spark SQL type Rescaler reads"),
        ("user string, v variant", "'variant' is not a Spark SQL type"),
        ("user string, m map<string,int", "expected '>', found the end"),
        ("user string, d decimal(10,", "expected a number, found the end"),
    ],
)
def test_unsupported_outputs_are_refused(schema: str, message: str) -> None:
    with pytest.raises(UnsupportedProcessor, match=message):
        ProcessorOperator(Tally(), columns=("user",), output_schema=schema).inspect()


def test_timers_in_time_mode_none_are_refused(tmp_path: Path) -> None:
    op = operator("None", wait_ms=1_000)
    with pytest.raises(UnsupportedProcessor, match="timers need timeMode"):
        epoch(tmp_path, op, 0, [("a", "p", 0)], EpochClock())


class Echo(StatefulProcessor):
    def init(self, handle: Any) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:
        yield Row(key=key[0], n=sum(1 for _ in rows), fired=False)


class Named(StatefulProcessor):
    """Outputs and reads columns named like Rescaler's own (kind, key, seq, src, vnode...)."""

    def init(self, handle: Any) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:
        for row in rows:
            yield Row(
                key=row.kind + "!",
                seq=row.seq * 10,
                kind=key[0],
                vnode=None,
                slot=True,
                **{"~x": 1},
            )


def test_output_and_input_names_are_the_user_s_even_where_rescaler_has_its_own(
    tmp_path: Path,
) -> None:
    """Spark lets a processor's columns have any name; Rescaler's tables carry the user's under
    names of their own (``wire_name``), and the sink gets them back as the user named them."""
    from workers.processor import user_name, wire_name

    names = ("kind", "key", "seq", "info", "src", "vnode", "slot", "_own", "_records", "_init0")
    assert len({wire_name(n) for n in (*names, "~kind", "user")}) == len(names) + 2
    assert all(user_name(wire_name(n)) == n for n in (*names, "~kind", "~", "user"))
    op = ProcessorOperator(
        Named(),
        columns=("user", "kind", "seq"),
        output_schema="key string, seq long, kind string, vnode long, slot boolean, `~x` int",
        key_column="user",
        output_key="kind",
    )
    op.inspect()
    table = records([("a", "p", 0), ("b", "p", 0)])  # the user's kind and seq, besides Rescaler's
    table = table.append_column("~kind", pa.array(["k1", "k2"])).append_column(
        "~seq", pa.array([7, 8], pa.int64())
    )
    with open_store("lmdb", tmp_path) as store:
        run = ProcessorRun(op, store, None)
        run.fold(Segment(EpochClock(), table, tuple(range(VNODES))))
        out = run.output_table()
    assert out.column("key").to_pylist() == ["a", "b"]  # the output key: the user's kind
    assert sorted(op.sink_table(out).to_pylist(), key=str) == [
        {"key": "k1!", "seq": 70, "kind": "a", "vnode": None, "slot": True, "~x": 1},
        {"key": "k2!", "seq": 80, "kind": "b", "vnode": None, "slot": True, "~x": 1},
    ]


class Rekey(StatefulProcessor):
    """Emits its rows under another key: not allowed inside a keyed region."""

    def init(self, handle: Any) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:
        for row in rows:
            yield Row(user=row.page, page=row.page, n=1, fired=False)


def test_a_keyed_region_checks_its_chain_and_keeps_one_key(tmp_path: Path) -> None:
    from workers.region import Region

    first = ProcessorOperator(
        Tally(wait_ms=None),
        columns=("user", "page"),
        output_schema="user string, n long, fired boolean",
    )
    second = ProcessorOperator(
        Tally(wait_ms=None),
        columns=("user", "page"),
        output_schema="user string, n long, fired boolean",
    )
    with pytest.raises(UnsupportedProcessor, match=r"region operator 1:Tally reads \['page'\]"):
        Region(first, second).inspect()
    assert Region(first, first).labels == ["0:Tally", "1:Tally"]
    rekey = ProcessorOperator(
        Rekey(),
        columns=("user", "page"),
        output_schema="user string, page string, n long, fired boolean",
    )
    rekey.key_column = "user"
    with open_store("lmdb", tmp_path) as store:
        run = ProcessorRun(rekey, store, None, same_key=True)
        with pytest.raises(
            ValueError, match="inside a keyed region an operator's outputs keep its key"
        ):
            run.fold(Segment(EpochClock(), records([("a", "p", 0)]), tuple(range(VNODES))))


class KeyedTally(StatefulProcessor):
    """Counts per key and outputs it under an output column named ``key``."""

    def init(self, handle: Any) -> None:
        self.count = handle.getValueState("count", "n long")

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:
        (n,) = self.count.get() or (0,)
        n += sum(1 for _ in rows)
        self.count.update((n,))
        yield Row(key=key[0], n=n)


class Largest(StatefulProcessor):
    """Reads the upstream ``key`` and ``n`` columns: the largest count seen per key."""

    def init(self, handle: Any) -> None:
        self.best = handle.getValueState("best", "n long")

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:
        (best,) = self.best.get() or (0,)
        for row in rows:
            assert row.key == key[0], "the upstream key column is the key"
            best = max(best, row.n)
        self.best.update((best,))
        yield Row(user=key[0], best=best)


def test_a_region_s_next_operator_reads_an_upstream_output_key_named_key(tmp_path: Path) -> None:
    from workers.processor import section_of
    from workers.region import Region

    first = ProcessorOperator(KeyedTally(), columns=("user",), output_schema="key string, n long")
    second = ProcessorOperator(
        Largest(), columns=("key", "n"), output_schema="user string, best long"
    )
    region = Region(first, second)
    region.key_column = "user"
    region.inspect()  # the second reads `key`, the first's output key: not refused
    with open_store("lmdb", tmp_path) as store:
        runs = [
            ProcessorRun(op, store, None, section=section_of(i), same_key=i < 1)
            for i, op in enumerate(region.operators)
        ]
        table = records([("a", "p", 0), ("a", "p", 0), ("b", "p", 0)])
        runs[0].fold(Segment(EpochClock(), table, tuple(range(VNODES))))
        runs[1].fold(Segment(EpochClock(), runs[0].take_outputs(), tuple(range(VNODES))))
        out = sorted((r["user"], r["best"]) for r in runs[1].output_table().to_pylist())
    assert out == [("a", 2), ("b", 1)]


class Seeded(StatefulProcessor):
    """A count seeded by the initial state: each initial row adds its ``n``; Row and pandas."""

    def init(self, handle: Any) -> None:
        self.count = handle.getValueState("count", "n long")
        self.seeds = handle.getListState("seeds", "n long")

    def handleInitialState(self, key: Any, initialState: Any, timerValues: Any) -> None:
        if hasattr(initialState, "columns"):  # pandas: every row of the key in one frame
            seeds = [int(n) for n in initialState["n"]]
        else:
            seeds = [initialState.n]
        (n,) = self.count.get() or (0,)
        self.count.update((n + sum(seeds),))
        self.seeds.appendValue((len(seeds),))

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        import pandas as pd

        seen = sum(len(r) if isinstance(r, pd.DataFrame) else 1 for r in rows)
        (n,) = self.count.get() or (0,)
        self.count.update((n + seen,))
        if self.interface == "pandas":
            return iter([pd.DataFrame({"user": [key[0]], "n": [n + seen]})])
        return iter([Row(user=key[0], n=n + seen)])


@pytest.mark.parametrize("interface", ["row", "pandas"])
def test_the_initial_state_is_handled_before_the_first_rows_of_each_key(
    tmp_path: Path, interface: str
) -> None:
    processor = Seeded()
    processor.interface = interface  # type: ignore[attr-defined]
    op = ProcessorOperator(
        processor,
        columns=("user", "page", "ts"),
        output_schema="user string, n long",
        interface=interface,
        key_column="user",
        initial_state=lambda spark: None,
    )
    op.inspect()
    seeds = pa.table({"user": ["a", "a", "c"], "n": pa.array([10, 5, 7], pa.int64())})
    keys = seeds.column("user").to_pylist()
    with open_store("lmdb", tmp_path) as store:
        run = ProcessorRun(op, store, None)
        clock = EpochClock(1_000, -1, -1)
        run.initial(keys, [vnode_of(k, VNODES) for k in keys], seeds, clock)
        run.fold(Segment(clock, records([("a", "p", 1), ("b", "p", 1)]), tuple(range(VNODES))))
        run.close()
        store.commit_epoch(0, run.updates())
        out = sorted(run.output_table().select(["user", "n"]).to_pylist(), key=str)
    assert out == [{"user": "a", "n": 16}, {"user": "b", "n": 1}]
    # c has only its initial state: Spark keeps it, with no output
    calls = [[1], [1]] if interface == "row" else [[2]]
    assert state_of(tmp_path, op, "a")["state"]["seeds"]["values"] == calls
    assert state_of(tmp_path, op, "c")["state"]["count"]["value"] == [7]
    assert state_of(tmp_path, op, "b")["state"]["count"]["value"] == [1]


def test_the_earliest_timer_of_a_pu_is_read_from_its_timer_index(tmp_path: Path) -> None:
    from workers.processor.run import next_timer_ms

    op = operator("processingtime", wait_ms=500)
    epoch(tmp_path, op, 0, [("u1", "a", 1)], EpochClock(1_000, -1, -1))
    epoch(tmp_path, op, 1, [("u2", "a", 1)], EpochClock(1_200, -1, -1))
    with open_store("lmdb", tmp_path) as store:
        assert next_timer_ms(store, range(VNODES), [b""]) == 1_500
        assert next_timer_ms(store, [vnode_of("u2", VNODES)], [b""]) == 1_700
        others = [v for v in range(VNODES) if v not in {vnode_of(u, VNODES) for u in ("u1", "u2")}]
        assert next_timer_ms(store, others, [b""]) is None


class Evolved(StatefulProcessor):
    """A new version of a processor: its old list state ``pages`` is dropped with
    ``deleteIfExists`` in ``init``, as Spark's schema-evolution examples do; ``count`` stays."""

    def __init__(self, old: bool) -> None:
        self.old = old

    def init(self, handle: Any) -> None:
        self.count = handle.getValueState("count", "n long")
        if self.old:
            self.pages = handle.getListState("pages", "page string")
        else:
            handle.deleteIfExists("pages")
            handle.deleteIfExists("never-declared")  # a name with no state: nothing happens

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:
        (n,) = self.count.get() or (0,)
        for row in rows:
            n += 1
            if self.old:
                self.pages.appendValue((row.page,))
        self.count.update((n,))
        return iter([Row(user=key[0], n=n)])


def test_delete_if_exists_drops_a_state_variable_of_every_key(tmp_path: Path) -> None:
    def op(old: bool) -> ProcessorOperator:
        made = ProcessorOperator(
            Evolved(old),
            columns=("user", "page"),
            output_schema="user string, n long",
            key_column="user",
        )
        made.inspect()
        return made

    clock = EpochClock(1_000, -1, -1)
    epoch(tmp_path, op(True), 0, [("a", "p", 1), ("b", "p", 1), ("c", "q", 1)], clock)
    assert state_of(tmp_path, op(True), "b")["state"]["pages"]["values"] == [["p"]]
    new = op(False)
    # a key the new version has not touched yet already shows no such variable
    assert "pages" not in state_of(tmp_path, new, "b")["state"]
    epoch(tmp_path, new, 1, [("a", "p", 1)], EpochClock(2_000, -1, -1))
    with open_store("lmdb", tmp_path) as store:
        from workers.state.base import encode_key

        raw = store.get(encode_key(vnode_of("a", VNODES), b"a"))
        assert raw is not None and "pages" not in new.decode(raw).lists  # gone from the store
    assert state_of(tmp_path, new, "a")["state"] == {
        "count": {"kind": "value", "value": [2], "expires_ms": None}
    }


def test_delete_if_exists_outside_init_is_refused_as_spark_refuses_it(tmp_path: Path) -> None:
    class Late(Evolved):
        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[Row]:
            self.handle.deleteIfExists("count")
            return iter([])

        def init(self, handle: Any) -> None:
            self.handle = handle
            super().init(handle)

    made = ProcessorOperator(
        Late(True), columns=("user", "page"), output_schema="user string", key_column="user"
    )
    made.inspect()
    with pytest.raises(UnsupportedProcessor, match=r"deleteIfExists\('count'\) outside init"):
        epoch(tmp_path, made, 0, [("a", "p", 1)], EpochClock(1_000, -1, -1))


class Stamped(StatefulProcessor):
    """Emits each row with an event time of ``ts`` milliseconds."""

    def init(self, handle: Any) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[Row]:
        import datetime as dt

        for row in rows:
            at = dt.datetime.fromtimestamp(row.ts / 1000, dt.UTC)
            yield Row(user=key[0], at=at)


def test_an_event_time_column_row_at_or_below_the_watermark_fails_the_epoch(
    tmp_path: Path,
) -> None:
    """Spark's EMITTED_ROWS_OLDER_THAN_WATERMARK: the next operator would drop the row as
    late, so Spark fails the batch rather than lose it."""
    op = ProcessorOperator(
        Stamped(),
        columns=("user", "page", "ts"),
        output_schema="user string, at timestamp",
        time_mode="EventTime",
        key_column="user",
        event_time_column="at",
    )
    op.inspect()
    clock = EpochClock(batch_ms=10_000, watermark_ms=6_000, late_ms=5_000)
    out = epoch(tmp_path / "ok", op, 0, [("a", "p", 5_001)], clock)
    assert [r["at"].timestamp() for r in out] == [5.001]
    with pytest.raises(ValueError, match="EMITTED_ROWS_OLDER_THAN_WATERMARK"):
        epoch(tmp_path / "late", op, 0, [("a", "p", 5_000)], clock)


def test_an_event_time_column_must_be_a_timestamp_output() -> None:
    for schema, found in (("user string, at long", "bigint"), ("user string", "not an output")):
        op = ProcessorOperator(
            Stamped(), columns=("user",), output_schema=schema, event_time_column="at"
        )
        with pytest.raises(UnsupportedProcessor, match=found):
            op.inspect()
