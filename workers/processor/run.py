"""One task's run of a processor over its PU's store: input rows then due timers, per clock, in
Spark's order, and the store updates and outputs they leave."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from workers.pipeline.placement import EpochClock
from workers.processor.convert import frame_rows, inputs_of, spark_frame, spark_rows
from workers.processor.layout import (
    NO_TIMER_AFTER,
    in_ranges,
    parse_timer_key,
    section_of,
    timer_key,
    timer_range,
)
from workers.processor.operator import ProcessorOperator
from workers.processor.schema import user_name, wire_name
from workers.processor.state import KeyState, ProcessorHandle, purge_expired


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
        self.states: dict[bytes, KeyState | None] = {}  # store key -> state (None: absent)
        self.olds: dict[bytes, bytes | None] = {}
        self.timers_before: dict[bytes, set[int]] = {}
        self.vnode_of: dict[bytes, int] = {}
        self.key_of: dict[bytes, str] = {}
        self.outputs: list[tuple[Any, ...]] = []
        self.output_seq: list[int] = []
        self.output_vnode: list[int] = []
        self.output_late: list[int] = []  # each output's watermark for late rows
        self._late_ms = 0
        out = operator.output_struct
        self._out_names = [f.name for f in out.fields]

    # -- state cache
    def _load(self, vnode: int, key: str) -> tuple[bytes, KeyState]:
        from workers.state.base import encode_key

        skey = encode_key(vnode, self.section + key.encode("utf-8"))
        if skey not in self.states:
            raw = self.store.get(skey)
            self.olds[skey] = raw
            loaded = KeyState.decode(raw) if raw is not None else KeyState()
            self.handle.forget_deleted(loaded)
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
        names = self._out_names
        for item in results:
            if self.op.interface == "pandas":
                rows.extend(frame_rows(item, self.op))
            elif hasattr(item, "asDict"):  # as Spark: asDict(recursive), columns by name
                d = item.asDict(True)
                rows.append(tuple(d.get(n) for n in names))
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
        self.output_late.extend([self._late_ms] * len(rows))

    # -- the first epoch's initial state
    def initial(
        self, keys: list[Any], vnodes: list[int], rows: pa.Table, clock: EpochClock
    ) -> None:
        """Spark's first batch: ``handleInitialState`` for every key of the initial state, before
        any input row; once per row in the Row interface, once per key with all of its rows as
        one frame in pandas. ``rows`` holds the initial state's own columns, ``keys`` and
        ``vnodes`` each row's key and vnode."""
        self.handle.now_ms = clock.batch_ms
        self._late_ms = clock.late_ms
        timer_values = self._timer_values(clock)
        groups: dict[Any, list[int]] = {}
        for i, key in enumerate(keys):
            groups.setdefault(key, []).append(i)
        handler = self.op.processor.handleInitialState
        for key, at in groups.items():
            _, state = self._load(vnodes[at[0]], key)
            self.handle.current = state
            try:
                part = rows.take(at)
                if self.op.interface == "pandas":
                    handler((key,), spark_frame(part, self.op.timezone), timer_values)
                else:
                    for row in spark_rows(part):
                        handler((key,), row, timer_values)
            finally:
                self.handle.current = None

    def initial_from(self, initial: pa.Table, column: str, clock: EpochClock) -> None:
        """:meth:`initial` with this operator's rows of the epoch's ``init`` rows: those whose
        ``column`` (a struct of the initial state's own columns) is set."""
        if column not in initial.column_names:
            return
        import pyarrow.compute as pc

        mine = initial.filter(pc.is_valid(initial.column(column)))
        if mine.num_rows:
            rows = pa.Table.from_struct_array(mine.column(column).combine_chunks())
            self.initial(
                mine.column("key").to_pylist(), mine.column("vnode").to_pylist(), rows, clock
            )

    # -- one segment
    def fold(self, segment: Segment) -> None:
        """Spark's order within a batch: the input rows (late ones dropped), then the timers."""
        clock = segment.clock
        self.handle.now_ms = clock.batch_ms
        self._late_ms = clock.late_ms
        records = segment.records
        if self.op.time_mode == "eventtime" and self.event_time and records.num_rows:
            records = records.filter(not_late(records.column(self.event_time), clock.late_ms))
        if records.num_rows:
            self._fold_rows(records, clock)
        if self.op.time_mode == "processingtime":
            self.fire_timers(segment.vnodes, clock, clock.batch_ms)
        elif self.op.time_mode == "eventtime":
            self.fire_timers(segment.vnodes, clock, clock.watermark_ms)

    def _fold_rows(self, records: pa.Table, clock: EpochClock) -> None:
        from workers.operators.base import sort_by_seq

        ordered = sort_by_seq(records)
        keys = ordered.column("key").to_pylist()
        vnodes = ordered.column("vnode").to_pylist()
        seqs = ordered.column("seq").to_pylist()
        timer_values = self._timer_values(clock)
        groups: dict[str, list[int]] = {}
        for i, key in enumerate(keys):
            groups.setdefault(key, []).append(i)
        inputs = inputs_of(self.op, ordered)
        for key, rows in groups.items():
            _, state = self._load(vnodes[rows[0]], key)
            purge_expired(state, clock.batch_ms)
            self.handle.current = state
            try:
                results = self.op.processor.handleInputRows((key,), inputs(key, rows), timer_values)
                self._emit(results, key, vnodes[rows[0]], seqs[rows[-1]])
            finally:
                self.handle.current = None

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
                if parsed is not None and not in_ranges(parsed[1], away):
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
        self._late_ms = clock.late_ms
        for expiry, key, vnode in sorted(due):
            _, state = self._load(vnode, key)
            if expiry not in state.timers:  # deleted by an earlier timer of this key
                continue
            purge_expired(state, clock.batch_ms)
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
        self.outputs, self.output_seq, self.output_vnode, self.output_late = [], [], [], []
        return table

    def output_table(self) -> pa.Table:
        columns = list(zip(*self.outputs)) if self.outputs else [() for _ in self._out_names]
        by_name = dict(zip(self._out_names, columns, strict=True))
        keys = [None if v is None else str(v) for v in by_name[self.op.output_key]]
        arrays = [pa.array(keys, pa.string()), pa.array(self.output_seq, pa.int64())]
        names = ["key", "seq"]
        for wire, typ in self.op.output_fields:
            arrays.append(pa.array(list(by_name[user_name(wire)]), typ))
            names.append(wire)
        table = pa.Table.from_arrays(arrays, names=names)
        if self.op.event_time_column is not None:
            self._check_event_times(table.column(wire_name(self.op.event_time_column)))
        return table

    def _check_event_times(self, column: pa.ChunkedArray) -> None:
        """Spark's rule for ``eventTimeColumnName``: no output at or below its batch's watermark
        for late rows (the next operator would drop it as late)."""
        import pyarrow.compute as pc

        late = pc.invert(not_late(column, pa.array(self.output_late, pa.int64())))
        if pc.any(late).as_py():
            at = pc.index(late, True).as_py()
            raise ValueError(
                f"{type(self.op.processor).__name__} emitted {self.op.event_time_column}="
                f"{column[at].as_py()} at or below the watermark "
                f"({self.output_late[at]} ms): an event_time_column (Spark's "
                f"eventTimeColumnName) row must be newer, as Spark requires "
                f"(EMITTED_ROWS_OLDER_THAN_WATERMARK)"
            )


def next_timer_ms(store: Any, vnodes: Iterable[int], sections: Iterable[bytes]) -> int | None:
    """The earliest timer of these vnodes in ``store`` (each operator's section), or None: the
    first entry of each vnode's timer index, which is sorted by expiry."""
    from workers.state.base import decode_key

    earliest: int | None = None
    for section in sections:
        for vnode in vnodes:
            start, end = timer_range(vnode, NO_TIMER_AFTER, section)
            for store_key, _ in store.scan(start, end):
                parsed = parse_timer_key(decode_key(store_key)[1])
                if parsed is not None and (earliest is None or parsed[0] < earliest):
                    earliest = parsed[0]
                break
    return earliest


def next_timer_of(operator: Any, store: Any, vnodes: Iterable[int]) -> int | None:
    """The earliest processing-time timer of a processor (or a keyed region's processing-time
    operators) among these vnodes, which the runner runs a no-data epoch for once it is due;
    None for any other operator."""
    chain = getattr(operator, "operators", None)
    members = list(chain) if chain is not None else [operator]
    sections = [
        section_of(i) if chain is not None else b""
        for i, op in enumerate(members)
        if isinstance(op, ProcessorOperator) and op.time_mode == "processingtime"
    ]
    return next_timer_ms(store, vnodes, sections) if sections else None


def _micros(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """An event-time column as epoch microseconds, Spark's own unit: a timestamp of any unit, or
    a number of seconds (converted as Spark's ``timestamp_seconds``: cut toward zero)."""
    import pyarrow.compute as pc

    if pa.types.is_timestamp(column.type):
        # nanoseconds are cut to microseconds, as Spark reads them
        micros = pc.cast(column, pa.timestamp("us", tz=column.type.tz), safe=False)
        return pc.cast(micros, pa.int64())
    if pa.types.is_floating(column.type):
        return pc.cast(pc.trunc(pc.multiply(column, 1_000_000.0)), pa.int64())
    return pc.multiply(pc.cast(column, pa.int64()), 1_000_000)


def not_late(column: pa.ChunkedArray, late_ms: int | pa.Array) -> pa.ChunkedArray:
    """Which rows are not late: Spark drops a row whose event time, in microseconds, is at or
    below the previous watermark (milliseconds) times 1,000 (``late_ms``: one for all rows, or
    each row's)."""
    import pyarrow.compute as pc

    return pc.greater(_micros(column), pc.multiply(late_ms, 1_000))


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

    # Spark's watermark takes each event time in milliseconds, cut toward zero: the cut keeps
    # the order, so the largest is cut alone rather than the whole column
    largest = pc.max(_micros(records.column(column)))
    value = pc.divide(largest, 1_000).as_py() if largest.is_valid else None
    return int(value) if value is not None else None
