"""A NATS JetStream stream as a replayable Spark streaming source (``rescaler_jetstream``).

Offsets are **stream sequence numbers**: ``{"seq": N}`` means every message of the stream up to
sequence N was taken. A micro-batch reads the messages with ``start < seq <= end``. A stream
never changes a stored message or reuses a sequence, so a range names the same messages for as
long as the stream keeps them: when Spark re-runs an epoch after a crash it gets the range from
its offset log and reads exactly the same records, in the same order. The record's ``seq`` column
is that sequence, the per-key source order the data plane sorts by.

Reading: each partition is a sequence range over one subject filter (one partition per subject
of ``subjects``; with one subject or none, ``partitions`` shards of the range). It is read by an
ephemeral pull consumer with ``deliver_policy=by_start_sequence`` from ``start + 1``, the filter
subject, no acks (nothing on the server changes), which stops at sequence ``end``, at the first
message past it, or when the consumer has nothing pending (it never fetches more than the range
can hold); the consumer is deleted after (and expires by itself if the reader dies). nats-py is asyncio and Spark calls these methods synchronously, in the
driver (offsets, partitions, commit) and in its Python workers (read), so each method runs its
own ``asyncio.run`` with its own connection.

**The Spark checkpoint, not any NATS consumer, is the source of truth** for what was read.
:meth:`JetStreamStreamReader.commit` may move a durable consumer (option ``consumer``) so that
``nats consumer info STREAM NAME`` shows the query's progress: its ack floor is the last committed
sequence and its pending count the backlog. Nothing reads that consumer back; deleting it loses
nothing, and it is recreated at each commit (it belongs to this source: do not consume from it).

Messages the stream no longer has (removed by its limits or a purge) before the query read them
are data loss; with ``fail_on_data_loss`` (default true) reading such a range fails and says so.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.client import JetStreamContext
from nats.js.errors import NotFoundError, ServiceUnavailableError
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from workers.natsio import (
    DEFAULT_URL,
    JETSTREAM_HINT,
    NatsUnavailable,
    check_stream_name,
    check_subject,
    close,
    connect,
    redact,
)
from workers.sources.jetstream_wire import (
    Pulled,
    WireError,
    WireUnsupported,
    plain_address,
    pull_range,
)

JETSTREAM = "rescaler_jetstream"
FETCH_BATCH = 50_000  # messages asked for in one pull request (fewer round trips)
RESERVED = ("seq", "subject", "data", "_malformed")
MALFORMED_SAMPLE = 200  # characters of a bad payload kept in its _malformed reason

log = logging.getLogger("workers.sources.jetstream")
T = TypeVar("T")

# Spark DDL type -> (canonical DDL name, Arrow type)
FIELD_TYPES: dict[str, tuple[str, pa.DataType]] = {
    "string": ("string", pa.string()),
    "bigint": ("bigint", pa.int64()),
    "long": ("bigint", pa.int64()),
    "int": ("int", pa.int32()),
    "integer": ("int", pa.int32()),
    "double": ("double", pa.float64()),
    "float": ("float", pa.float32()),
    "boolean": ("boolean", pa.bool_()),
}
_INT_RANGE = {"bigint": 2**63, "int": 2**31}


def _ack_position(reply: str) -> tuple[int, int]:
    """(stream sequence, messages still pending) from a JetStream message's reply subject:
    ``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>``, or with the
    domain and account hash after ``ACK`` (and a token at the end) on newer servers."""
    tokens = reply.split(".")
    if len(tokens) == 9:
        return int(tokens[5]), int(tokens[8])
    if len(tokens) >= 11:
        return int(tokens[7]), int(tokens[10])
    raise ValueError(f"not a JetStream reply subject: {reply!r}")


class StreamMissing(LookupError):
    """The JetStream stream does not exist; the message says how to create it."""


class DataLoss(RuntimeError):
    """Messages of the range to read are no longer in the stream (limits, purge)."""


@dataclass(frozen=True)
class JsonField:
    name: str
    ddl_type: str  # canonical: string, bigint, int, double, float, boolean

    @property
    def arrow_type(self) -> pa.DataType:
        return FIELD_TYPES[self.ddl_type][1]


def parse_schema(ddl: str) -> tuple[JsonField, ...]:
    """The JSON fields of a ``schema`` option: ``"user string, ts bigint"`` (flat Spark DDL of
    string, bigint/long, int/integer, double, float, boolean; names may be in backticks)."""
    fields: list[JsonField] = []
    for item in (part.strip() for part in ddl.split(",")):
        found = re.fullmatch(r"(`[^`]+`|[A-Za-z_][A-Za-z0-9_]*)\s+([A-Za-z]+)", item)
        if not found:
            raise ValueError(
                f"schema option: cannot read {item!r}; write `name type` pairs separated by "
                f"commas, types {', '.join(sorted(FIELD_TYPES))}"
            )
        name, typ = found.group(1).strip("`"), found.group(2).lower()
        if typ not in FIELD_TYPES:
            raise ValueError(
                f"schema option: field {name!r} has type {typ!r}; the JetStream source parses "
                f"{', '.join(sorted(FIELD_TYPES))}"
            )
        if name in RESERVED:
            raise ValueError(
                f"schema option: {name!r} is a column the source sets itself "
                f"({', '.join(RESERVED)}); rename the JSON field's column"
            )
        if any(f.name == name for f in fields):
            raise ValueError(f"schema option: field {name!r} appears twice")
        fields.append(JsonField(name, FIELD_TYPES[typ][0]))
    return tuple(fields)


def _tokens_overlap(a: list[str], b: list[str]) -> bool:
    for x, y in zip(a, b):
        if x == ">" or y == ">":
            return True
        if x != "*" and y != "*" and x != y:
            return False
    return len(a) == len(b)


def subjects_overlap(a: str, b: str) -> bool:
    """Whether one message subject can match both filters (then it would be read twice)."""
    return _tokens_overlap(a.split("."), b.split("."))


def _flag(value: str, name: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"option {name} must be true or false, not {value!r}")


@dataclass(frozen=True)
class JetStreamOptions:
    """The source's options (``spark.readStream.format("rescaler_jetstream").option(...)``)."""

    stream: str
    url: str = DEFAULT_URL
    subjects: tuple[str, ...] = ()  # subject filters; none: every subject of the stream
    max_records_per_epoch: int = 10_000  # sequences per micro-batch (fewer records with filters)
    partitions: int = 2  # shards of the range when there is at most one subject
    schema: tuple[JsonField, ...] = ()  # JSON fields parsed into columns
    start: str = "earliest"  # earliest | latest | the first sequence to read
    consumer: str | None = None  # a durable consumer commit() moves, for operators to watch
    fail_on_data_loss: bool = True
    timeout_s: float = 10.0

    def __post_init__(self) -> None:
        check_stream_name(self.stream)
        for subject in self.subjects:
            check_subject(subject, wildcards=True)
        for i, a in enumerate(self.subjects):
            for b in self.subjects[i + 1 :]:
                if subjects_overlap(a, b):
                    raise ValueError(
                        f"subjects {a!r} and {b!r} overlap: a message matching both would be "
                        f"read twice; list disjoint subject filters"
                    )
        if self.max_records_per_epoch < 1 or self.partitions < 1:
            raise ValueError("max_records_per_epoch and partitions must be at least 1")
        if self.start not in ("earliest", "latest") and not (
            self.start.isdigit() and int(self.start) >= 1
        ):
            raise ValueError(
                f"option start must be earliest, latest or a stream sequence >= 1, "
                f"not {self.start!r}"
            )
        if self.consumer is not None:
            check_stream_name(self.consumer)  # consumer names follow the same rules

    @classmethod
    def from_options(cls, options: dict[str, str]) -> JetStreamOptions:
        known = {k.lower(): v for k, v in options.items()}
        if not known.get("stream"):
            raise ValueError(f"the {JETSTREAM} source needs option stream (the JetStream stream)")
        subjects = tuple(s.strip() for s in known.get("subjects", "").split(",") if s.strip())
        return cls(
            stream=known["stream"],
            url=known.get("url") or DEFAULT_URL,
            subjects=subjects,
            max_records_per_epoch=int(known.get("max_records_per_epoch", 10_000)),
            partitions=int(known.get("partitions", 2)),
            schema=parse_schema(known["schema"]) if known.get("schema") else (),
            start=known.get("start", "earliest").strip().lower(),
            consumer=known.get("consumer") or None,
            fail_on_data_loss=_flag(known.get("fail_on_data_loss", "true"), "fail_on_data_loss"),
            timeout_s=float(known.get("timeout_s", 10.0)),
        )

    def ddl(self) -> str:
        """The Spark schema of the records: seq, subject, data, the JSON fields, _malformed."""
        parsed = "".join(f", `{f.name}` {f.ddl_type}" for f in self.schema)
        return f"`seq` bigint, `subject` string, `data` string{parsed}, `_malformed` string"

    def arrow_schema(self) -> pa.Schema:
        fields = [("seq", pa.int64()), ("subject", pa.string()), ("data", pa.string())]
        fields += [(f.name, f.arrow_type) for f in self.schema]
        return pa.schema([*fields, ("_malformed", pa.string())])

    def create_hint(self) -> str:
        subjects = ",".join(self.subjects) or f"{self.stream.lower()}.>"
        return (
            f"create it with `python -m workers.sources.jetstream_feed --url {redact(self.url)} "
            f"--stream {self.stream} --subject SUBJECT --rows 0` or `nats stream add "
            f"{self.stream} --subjects '{subjects}'`"
        )


@dataclass
class SeqRange(InputPartition):
    """The messages with ``start < seq <= end`` on ``subject`` (None: every subject)."""

    start: int
    end: int
    subject: str | None


def _check_value(f: JsonField, value: Any) -> str | None:
    if value is None:
        return None
    if f.ddl_type == "string":
        return None if isinstance(value, str) else f"field {f.name!r} must be a string"
    if f.ddl_type == "boolean":
        return None if isinstance(value, bool) else f"field {f.name!r} must be true or false"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"field {f.name!r} must be a number"
    if f.ddl_type in _INT_RANGE:
        if not isinstance(value, int):
            return f"field {f.name!r} must be an integer"
        bound = _INT_RANGE[f.ddl_type]
        if not -bound <= value < bound:
            return f"field {f.name!r} is out of range for {f.ddl_type}"
    return None


def parse_payload(fields: tuple[JsonField, ...], text: str) -> tuple[list[Any] | None, str | None]:
    """(values of ``fields``, None) for a good JSON object, (None, reason) for a bad one. Every
    field must be present (JSON null is a null value) with its type: like the directory source,
    a record missing a field is malformed, never silently half-filled."""
    try:
        record = json.loads(text)
    except ValueError as exc:
        return None, f"invalid JSON: {getattr(exc, 'msg', exc)}"
    if not isinstance(record, dict):
        return None, "not a JSON object"
    values = []
    for f in fields:
        if f.name not in record:
            return None, f"missing field {f.name!r}"
        problem = _check_value(f, record[f.name])
        if problem:
            return None, problem
        value = record[f.name]
        values.append(
            float(value) if f.ddl_type in ("double", "float") and value is not None else value
        )
    return values, None


class JetStreamStreamReader(DataSourceStreamReader):
    """Reads a JetStream stream by sequence ranges (see the module docstring)."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = JetStreamOptions.from_options(options)

    # --- server calls ----------------------------------------------------------------------

    def _call(self, work: Callable[[JetStreamContext], Awaitable[T]]) -> T:
        """Run ``work`` on a fresh connection in a fresh event loop: the caller is synchronous
        and may be the driver or a Python worker, each call on its own."""

        async def run() -> T:
            nc = await connect(self.options.url, min(self.options.timeout_s, 5.0))
            try:
                return await work(nc.jetstream(timeout=self.options.timeout_s))
            except ServiceUnavailableError as exc:
                raise NatsUnavailable(
                    f"NATS at {redact(self.options.url)} answers, but {JETSTREAM_HINT}"
                ) from exc
            finally:
                await close(nc)

        return asyncio.run(run())

    async def _state(self, js: JetStreamContext) -> Any:
        try:
            return (await js.stream_info(self.options.stream)).state
        except NotFoundError:
            raise StreamMissing(
                f"JetStream stream {self.options.stream!r} does not exist on NATS at "
                f"{redact(self.options.url)}: {self.options.create_hint()}"
            ) from None

    # --- offsets ---------------------------------------------------------------------------

    def _offset(self, seq: int) -> dict[str, Any]:
        return {"seq": seq}

    def initialOffset(self) -> dict[str, Any]:
        """Where a query without a checkpoint starts: before the stream's first message
        (``earliest``), after its last (``latest``), or before sequence ``start``."""
        state = self._call(self._state)
        if self.options.start == "earliest":
            return self._offset(max(int(state.first_seq) - 1, 0))
        if self.options.start == "latest":
            return self._offset(int(state.last_seq))
        return self._offset(int(self.options.start) - 1)

    def getDefaultReadLimit(self) -> Any:
        from pyspark.sql.streaming.datasource import ReadMaxRows

        return ReadMaxRows(self.options.max_records_per_epoch)

    def latestOffset(self, start: dict[str, Any], limit: Any = None) -> dict[str, Any]:
        """The stream's last sequence, at most ``max_records_per_epoch`` sequences past
        ``start`` (or the engine's own limit: all available for ``Trigger.AvailableNow``)."""
        from pyspark.sql.streaming.datasource import ReadAllAvailable

        state = self._call(self._state)
        lo = int(start["seq"])
        end = int(state.last_seq)
        if not isinstance(limit, ReadAllAvailable):
            cap = getattr(limit, "max_rows", None) or self.options.max_records_per_epoch
            end = min(end, lo + int(cap))
        return self._offset(max(end, lo))

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        lo, hi = int(start["seq"]), int(end["seq"])
        if hi <= lo:
            return []
        if len(self.options.subjects) > 1:
            return [SeqRange(lo, hi, subject) for subject in self.options.subjects]
        subject = self.options.subjects[0] if self.options.subjects else None
        step = max(1, -(-(hi - lo) // self.options.partitions))
        return [SeqRange(s, min(s + step, hi), subject) for s in range(lo, hi, step)]

    # --- reading ---------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Exactly the messages of the partition's range and subject, in sequence order."""
        assert isinstance(partition, SeqRange)
        messages = self._call(lambda js: self._fetch(js, partition))
        if len(messages):
            yield self._batch(messages)

    async def _fetch(self, js: JetStreamContext, part: SeqRange) -> Pulled:
        state = await self._state(js)
        first = int(state.first_seq)
        if self.options.fail_on_data_loss and first > part.start + 1 and part.start < part.end:
            lost_to = min(part.end, first - 1)
            raise DataLoss(
                f"JetStream stream {self.options.stream!r} no longer has sequences "
                f"{part.start + 1}..{lost_to} (its first is now {first}: limits or a purge "
                f"removed them before this query read them). Set option fail_on_data_loss=false "
                f"to read on from what remains"
            )
        config = ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=part.start + 1,
            ack_policy=AckPolicy.NONE,
            filter_subject=part.subject,
            inactive_threshold=60.0,  # the server deletes it if this reader dies
            mem_storage=True,
            num_replicas=1,
        )
        info = await js.add_consumer(self.options.stream, config)
        try:
            pending = int(info.num_pending or 0)
            address = plain_address(self.options.url)
            if address is not None:
                try:
                    return self._pull_wire(address, js, info.name, pending, part)
                except WireUnsupported:
                    pass  # TLS or credentials: nats-py's path below does both
            return await self._pull(js, info.name, pending, part)
        finally:
            try:
                await js.delete_consumer(self.options.stream, info.name)
            except Exception as exc:  # it expires by itself (inactive_threshold)
                log.debug("deleting consumer %s: %s", info.name, exc)

    def _pull_wire(
        self,
        address: tuple[str, int],
        js: JetStreamContext,
        consumer: str,
        pending: int,
        part: SeqRange,
    ) -> Pulled:
        """The fast path (workers/sources/jetstream_wire.py), for a plain server."""
        try:
            out, status = pull_range(
                address,
                self.options.stream,
                consumer,
                end=part.end,
                last=part.start,
                pending=pending,
                batch_max=FETCH_BATCH,
                timeout_s=self.options.timeout_s,
                api_prefix=js._prefix,
            )
        except WireError as exc:
            raise NatsUnavailable(
                f"NATS at {redact(self.options.url)} failed while reading {self.options.stream} "
                f"sequences {part.start + 1}..{part.end}: {exc}"
            ) from exc
        if status is not None:
            raise DataLoss(
                f"JetStream stream {self.options.stream!r}: message(s) of sequences "
                f"{part.start + 1}..{part.end} on {part.subject or 'every subject'} announced "
                f"but not delivered within {self.options.timeout_s}s ({status}); were they "
                f"removed meanwhile?"
            )
        return out

    async def _pull(
        self, js: JetStreamContext, consumer: str, pending: int, part: SeqRange
    ) -> Pulled:
        """Pull the range in batches on a subscription of our own: nats-py's ``fetch`` awaits
        every message separately (about 65 µs each), a callback that only appends is about four
        times faster. Each request asks for no more than the range can still hold (sequences
        are unique), so nothing past it is delivered but the one message that ends it."""
        nc = js._nc  # the connection of this context (nats-py has no public accessor)
        inbox = nc.new_inbox()
        out: list[tuple[int, str, bytes]] = []
        last = part.start
        wanted = received = 0
        status: str | None = None
        answered = asyncio.Event()

        async def on_message(msg: Msg) -> None:
            nonlocal received, pending, last, status
            headers = msg.headers or {}
            if not msg.data and "Status" in headers:  # 404 / 408: no (more) messages now
                status = headers["Status"]
                answered.set()
                return
            seq, pending = _ack_position(msg.reply)
            received += 1
            last = seq
            if seq <= part.end:
                out.append((seq, msg.subject, msg.data))
            if received >= wanted or seq >= part.end or pending == 0:
                answered.set()

        sub = await nc.subscribe(inbox, cb=on_message, pending_msgs_limit=0, pending_bytes_limit=0)
        request = f"{js._prefix}.CONSUMER.MSG.NEXT.{self.options.stream}.{consumer}"
        try:
            while pending > 0 and last < part.end:
                wanted, received, status = min(pending, part.end - last, FETCH_BATCH), 0, None
                answered.clear()
                body = {"batch": wanted, "expires": int(self.options.timeout_s * 1e9)}
                await nc.publish(request, json.dumps(body).encode(), reply=inbox)
                try:
                    await asyncio.wait_for(answered.wait(), self.options.timeout_s + 2.0)
                except TimeoutError:
                    status = "no answer"
                if received == 0:
                    raise DataLoss(
                        f"JetStream stream {self.options.stream!r}: {pending} message(s) of "
                        f"sequences {part.start + 1}..{part.end} on "
                        f"{part.subject or 'every subject'} announced but not delivered within "
                        f"{self.options.timeout_s}s ({status}); were they removed meanwhile?"
                    )
        finally:
            await sub.unsubscribe()
        return Pulled.of(out)

    def _batch(self, messages: Pulled) -> pa.RecordBatch:
        return self._fast_batch(messages) or self._checked_batch(messages)

    def _fast_batch(self, messages: Pulled) -> pa.RecordBatch | None:
        """The batch parsed by Arrow's JSON reader in one call, when every payload is a one-line
        UTF-8 JSON object with every field present, non-null and of its type; None otherwise
        (then :meth:`_checked_batch` says, row by row, what is wrong with which)."""
        fields = self.options.schema
        payloads = messages.payloads
        if not fields or not len(payloads):
            return None
        doubtful = pc.or_(
            pc.match_substring(payloads, "\n"),
            pc.match_substring(
                payloads, "null"
            ),  # a missing field's null? only the checked path can tell
        )
        if pc.any(doubtful).as_py():
            return None
        import pyarrow.json as pajson

        try:
            datas = payloads.cast(pa.string())  # validates UTF-8
            lines = pc.binary_join_element_wise(payloads, b"", b"\n")  # each payload + "\n"
            ends = lines.buffers()[1]
            assert ends is not None
            size = int(
                np.frombuffer(ends, np.int32, count=len(lines) + 1, offset=lines.offset * 4)[-1]
            )
            table = pajson.read_json(
                pa.BufferReader(lines.buffers()[2][:size]),
                parse_options=pajson.ParseOptions(
                    explicit_schema=pa.schema([(f.name, f.arrow_type) for f in fields]),
                    unexpected_field_behavior="ignore",
                ),
            )
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            return None
        if table.num_rows != len(messages) or any(table.column(f.name).null_count for f in fields):
            return None  # a missing field reads as null: let the checked path name it
        arrays = [
            messages.seqs,
            messages.subjects,
            datas,
            *(table.column(f.name).combine_chunks() for f in fields),
            pa.nulls(len(messages), pa.string()),
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=self.options.arrow_schema())

    def _checked_batch(self, messages: Pulled) -> pa.RecordBatch:
        fields = self.options.schema
        seqs, subjects, datas, malformed = [], [], [], []
        parsed: list[list[Any]] = [[] for _ in fields]
        rows = zip(
            messages.seqs.to_pylist(),
            messages.subjects.to_pylist(),
            messages.payloads.to_pylist(),
            strict=True,
        )
        for seq, subject, payload in rows:
            seqs.append(seq)
            subjects.append(subject)
            problem: str | None = None
            try:
                text = payload.decode("utf-8")
            except UnicodeDecodeError:
                text = payload.decode("utf-8", errors="replace")
                problem = "payload is not UTF-8"
            datas.append(text)
            values: list[Any] | None = None
            if problem is None and fields:
                values, problem = parse_payload(fields, text)
            for column, value in zip(parsed, values or [None] * len(fields)):
                column.append(value)
            malformed.append(
                f"{self.options.stream}:{seq}: {problem}: {text.strip()[:MALFORMED_SAMPLE]}"
                if problem
                else None
            )
        arrays = [
            pa.array(seqs, pa.int64()),
            pa.array(subjects, pa.string()),
            pa.array(datas, pa.string()),
        ]
        arrays += [pa.array(col, f.arrow_type) for col, f in zip(parsed, fields)]
        arrays.append(pa.array(malformed, pa.string()))
        return pa.RecordBatch.from_arrays(arrays, schema=self.options.arrow_schema())

    # --- progress --------------------------------------------------------------------------

    def commit(self, end: dict[str, Any]) -> None:
        """Show operators the committed position on the durable consumer ``consumer`` (if set):
        informational only, so a failure is logged, never raised (the checkpoint has it)."""
        if self.options.consumer is None or int(end["seq"]) < 1:
            return
        try:
            self._call(lambda js: self._advance(js, int(end["seq"])))
        except Exception as exc:
            log.warning(
                "could not move consumer %s of stream %s to %s (progress display only): %s",
                self.options.consumer,
                self.options.stream,
                end["seq"],
                exc,
            )

    async def _advance(self, js: JetStreamContext, seq: int) -> None:
        """Recreate the durable consumer from ``seq`` and ack that message: its ack floor is then
        ``seq`` (nats-server 2.9 cannot move a consumer; 2.14 has a reset, not required here)."""
        name, stream = self.options.consumer, self.options.stream
        assert name is not None
        try:
            await js.delete_consumer(stream, name)
        except NotFoundError:
            pass
        await js.add_consumer(
            stream,
            ConsumerConfig(
                name=name,
                durable_name=name,
                description=f"{JETSTREAM} progress: ack floor = last committed sequence",
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                opt_start_seq=seq,
                ack_policy=AckPolicy.ALL,
                headers_only=True,
            ),
        )
        sub = await js.pull_subscribe_bind(durable=name, stream=stream)
        try:
            msgs = await sub.fetch(1, timeout=2.0)
            if msgs and int(msgs[0].metadata.sequence.stream) <= seq:
                await msgs[0].ack_sync()
        except TimeoutError:
            pass  # the message at seq was removed: the floor stays just below it
        finally:
            await sub.unsubscribe()


class JetStreamSource(DataSource):
    """``spark.readStream.format("rescaler_jetstream")``: see :class:`JetStreamOptions`."""

    @classmethod
    def name(cls) -> str:
        return JETSTREAM

    def schema(self) -> str:
        return JetStreamOptions.from_options(dict(self.options)).ddl()

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return JetStreamStreamReader(dict(self.options))


def register(spark: Any) -> None:
    """Make the source available to ``spark.readStream.format("rescaler_jetstream")``."""
    spark.dataSource.register(JetStreamSource)
