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

The modules: ``jetstream_options`` (the options, the JSON fields, the errors),
``jetstream_pull`` (one range pulled from its consumer, over ``jetstream_wire``'s socket, whose
frames ``jetstream_frames`` parses, or nats-py), ``jetstream_batch`` (the pulled messages as
the source's Arrow batch) and this one, the reader (offsets, partitions, the consumer of a
read, progress) and the source. The names the rest of the code imports from here are
re-exported.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, TypeVar

import pyarrow as pa
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.client import JetStreamContext
from nats.js.errors import NotFoundError, ServiceUnavailableError
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from workers.natsio import JETSTREAM_HINT, NatsUnavailable, close, connect, redact
from workers.sources.jetstream_batch import to_batch
from workers.sources.jetstream_frames import Pulled
from workers.sources.jetstream_options import JETSTREAM, DataLoss, JetStreamOptions, StreamMissing
from workers.sources.jetstream_pull import SeqRange, pull

__all__ = [
    "JETSTREAM",
    "DataLoss",
    "JetStreamOptions",
    "JetStreamSource",
    "JetStreamStreamReader",
    "SeqRange",
    "StreamMissing",
    "register",
]

log = logging.getLogger("workers.sources.jetstream")
T = TypeVar("T")


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
            yield to_batch(self.options, messages)

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
            return await pull(js, self.options, info.name, int(info.num_pending or 0), part)
        finally:
            try:
                await js.delete_consumer(self.options.stream, info.name)
            except Exception as exc:  # it expires by itself (inactive_threshold)
                log.debug("deleting consumer %s: %s", info.name, exc)

    def backlog(self, end: Mapping[str, Any]) -> int:
        """Messages the stream holds past ``end`` (an epoch's end offset), now: what the
        epochs have yet to read. A source of some of the stream's subjects counts the others'
        messages too (the stream's last sequence is all of its subjects')."""
        state = self._call(self._state)
        return max(int(state.last_seq) - int(end.get("seq", 0)), 0)

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
