"""A NATS JetStream sink: one JSON message per output row, de-duplicated by the server.

Every row of (fragment, epoch, PU) is published to ``subject`` with the header
``Nats-Msg-Id: {fragment}:{epoch}:{pu}:{row_index}``, and the sink waits for every publish ack
before :meth:`NatsSink.write` returns (so Spark commits the epoch only once the stream holds every
row). A replay publishes the same ids, and JetStream drops a message whose id it has already
stored **within the stream's duplicate window** (``duplicate_window``; when this sink creates the
stream it sets it to ``duplicate_window_s``, default 2 minutes). The acks say which were
duplicates; a write whose every ack is a duplicate returns False.

Beyond the window the server has forgotten the ids. A replay later than that (the runner was down
longer than the window between a sink write and the epoch's commit) publishes the rows again:
consumers see them twice, with the same ``Nats-Msg-Id``, so a consumer that must be exactly-once
across long outages de-duplicates on that header (or the stream is given a longer window, which
costs the server memory for the ids it keeps). One case is caught even then: before publishing,
the sink reads the last message on the subject, and if it is the last row of this very
(fragment, epoch, PU), the whole write is skipped (the common case of a single PU, or of the PU
that finished last).

Message ids are per stream: give each pipeline's fragment its own subject, or at least distinct
fragment names, within one stream.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import weakref
from collections.abc import Coroutine
from typing import Any, NamedTuple, TypeVar

from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.js.client import JetStreamContext
from nats.js.errors import APIError, NotFoundError, ServiceUnavailableError

from workers.natsio import (
    JETSTREAM_HINT,
    NatsUnavailable,
    check_stream_name,
    check_subject,
    close,
    connect,
    redact,
)
from workers.sinks.base import EpochOutputs, Sink, SinkError, json_default

DEFAULT_DUPLICATE_WINDOW_S = 120.0
MSG_ID = "Nats-Msg-Id"

T = TypeVar("T")


class MsgId(NamedTuple):
    fragment: str
    epoch: int
    pu: int
    row: int  # the row's index in the (epoch, pu)'s table


def msg_id(fragment: str, epoch: int, pu: int, index: int) -> str:
    """The ``Nats-Msg-Id`` of row ``index`` of (fragment, epoch, pu)."""
    return f"{fragment}:{epoch}:{pu}:{index}"


def parse_msg_id(value: str | None) -> MsgId | None:
    """The parts of a message id this sink wrote, None for any other (fragments may hold ':')."""
    if not value:
        return None
    parts = value.rsplit(":", 3)
    if len(parts) != 4 or not all(p.isdigit() for p in parts[1:]):
        return None
    return MsgId(parts[0], int(parts[1]), int(parts[2]), int(parts[3]))


def default_stream_name(subject: str) -> str:
    """The stream this sink creates for ``subject`` when given no name: RESCALER_<SUBJECT>."""
    return "RESCALER_" + re.sub(r"[^A-Za-z0-9_-]", "_", subject).upper()


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def encode_row(row: dict[str, Any]) -> bytes:
    """A row as a JSON object: bytes as base64, times as ISO 8601, NaN and infinities as null."""
    try:
        text = json.dumps(row, separators=(",", ":"), default=json_default, allow_nan=False)
    except ValueError:  # a NaN or an infinity: JSON has none
        text = json.dumps(_finite(row), separators=(",", ":"), default=json_default)
    return text.encode("utf-8")


class _Connection:
    """A sink's event loop, NATS connection and resolved stream: what a pickled copy reopens."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.nc: Client | None = None
        self.js: JetStreamContext | None = None
        self.stream: str | None = None

    def close(self) -> None:
        if self.loop.is_closed():
            return
        try:
            if self.nc is not None:
                self.loop.run_until_complete(close(self.nc))
        finally:
            self.nc = self.js = None
            self.loop.close()


class NatsSink(Sink):
    """Publishes each (epoch, PU)'s rows as JSON messages on a JetStream ``subject``.

    ``stream``: the stream that takes ``subject``. None: the stream that already takes it, or,
    with ``create_stream``, a new one named :func:`default_stream_name`. A stream this sink
    creates takes just ``subject`` and gets ``duplicate_window_s`` as its duplicate window; an
    existing stream keeps its own (see the module docstring for what the window means). Without
    ``create_stream`` a missing stream is a :class:`SinkError` naming it.
    """

    def __init__(
        self,
        url: str,
        subject: str,
        stream: str | None = None,
        *,
        duplicate_window_s: float = DEFAULT_DUPLICATE_WINDOW_S,
        create_stream: bool = True,
        timeout_s: float = 10.0,
    ) -> None:
        check_subject(subject, wildcards=False)
        if stream is not None:
            check_stream_name(stream)
        if duplicate_window_s <= 0:
            raise ValueError(f"duplicate_window_s must be > 0, not {duplicate_window_s}")
        self.url = url
        self.subject = subject
        self.stream = stream
        self.duplicate_window_s = float(duplicate_window_s)
        self.create_stream = create_stream
        self.timeout_s = timeout_s
        self._io: _Connection | None = None  # opened by the first write, never pickled

    def describe(self) -> str:
        stream = (self._io and self._io.stream) or self.stream or "the stream taking it"
        return f"nats {redact(self.url)} subject {self.subject} (stream {stream})"

    # --- event loop and connection ---------------------------------------------------------

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on this sink's own event loop (kept with the connection)."""
        if self._io is None:
            self._io = _Connection()
            # a sink dropped without close() (a forgotten close in a task) still disconnects
            weakref.finalize(self, self._io.close)
        return self._io.loop.run_until_complete(coroutine)

    def close(self) -> None:
        io, self._io = self._io, None
        if io is not None:
            io.close()

    async def _jetstream(self) -> tuple[JetStreamContext, str]:
        io = self._io
        assert io is not None
        if io.nc is None or io.nc.is_closed or io.js is None:
            io.stream = None
            io.nc = await connect(self.url, min(self.timeout_s, 5.0))
            io.js = io.nc.jetstream(timeout=self.timeout_s)
        if io.stream is None:
            io.stream = await self._resolve_stream(io.js)
        return io.js, io.stream

    def _missing(self, what: str) -> SinkError:
        name = self.stream or default_stream_name(self.subject)
        return SinkError(
            f"NATS at {redact(self.url)}: {what}: create it with `nats stream add {name} "
            f"--subjects '{self.subject}' --dupe-window {int(self.duplicate_window_s)}s` (or "
            f"let the sink create it: create_stream=True)"
        )

    async def _resolve_stream(self, js: JetStreamContext) -> str:
        try:
            owner: str | None = await js.find_stream_name_by_subject(self.subject)
        except NotFoundError:
            owner = None
        except (TimeoutError, ServiceUnavailableError, NatsError) as exc:
            raise SinkError(f"NATS at {redact(self.url)}: {JETSTREAM_HINT} ({exc!r})") from exc
        if self.stream is None:
            if owner is not None:
                return owner
            if not self.create_stream:
                raise self._missing(f"no JetStream stream takes subject {self.subject!r}")
            return await self._create(js, default_stream_name(self.subject))
        if owner == self.stream:
            return owner
        try:
            info = await js.stream_info(self.stream)
        except NotFoundError:
            if owner is not None:
                raise SinkError(
                    f"NATS at {redact(self.url)}: subject {self.subject!r} belongs to stream "
                    f"{owner!r}, not to {self.stream!r} (which does not exist): name {owner!r} "
                    f"or publish to another subject"
                ) from None
            if not self.create_stream:
                raise self._missing(f"JetStream stream {self.stream!r} does not exist") from None
            return await self._create(js, self.stream)
        raise SinkError(
            f"NATS at {redact(self.url)}: stream {self.stream!r} does not take subject "
            f"{self.subject!r} (its subjects: {', '.join(info.config.subjects or [])}"
            f"{'; it belongs to ' + repr(owner) if owner else ''}): add the subject with "
            f"`nats stream edit {self.stream} --subjects ...` or choose another"
        )

    async def _create(self, js: JetStreamContext, name: str) -> str:
        try:
            await js.add_stream(
                name=name, subjects=[self.subject], duplicate_window=self.duplicate_window_s
            )
        except APIError as exc:
            # another PU created it a moment ago (with this config NATS answers success; with
            # another it refuses): use it if it takes the subject
            try:
                if await js.find_stream_name_by_subject(self.subject) == name:
                    return name
            except NotFoundError:
                pass
            raise SinkError(
                f"NATS at {redact(self.url)}: could not create stream {name!r} for subject "
                f"{self.subject!r}: {exc}"
            ) from exc
        return name

    # --- writing ---------------------------------------------------------------------------

    def write(self, outputs: EpochOutputs) -> bool:
        try:
            return self._run(self._write(outputs))
        except NatsUnavailable as exc:
            self.close()
            raise SinkError(str(exc)) from exc
        except SinkError:
            raise
        except (TimeoutError, NatsError, OSError) as exc:
            self.close()  # a broken connection: the next write reconnects
            raise SinkError(
                f"{self.describe()}: publishing {outputs.fragment} epoch {outputs.epoch} PU "
                f"{outputs.pu} failed ({exc!r}); the replay publishes it again and the server "
                f"drops the rows it already stored"
            ) from exc

    def last_epoch(self, fragment: str) -> int | None:
        """From the id of the subject's last message (the sink writes epochs in order)."""

        async def last() -> int | None:
            js, stream = await self._jetstream()
            try:
                msg = await js.get_last_msg(stream, self.subject)
            except NotFoundError:
                return None
            found = parse_msg_id((msg.headers or {}).get(MSG_ID))
            return found.epoch if found is not None and found.fragment == fragment else None

        try:
            return self._run(last())
        except NatsUnavailable as exc:
            self.close()
            raise SinkError(str(exc)) from exc
        except SinkError:
            return None  # no stream yet (and not to be created): nothing written

    async def _already_written(
        self, js: JetStreamContext, stream: str, outputs: EpochOutputs
    ) -> bool:
        """Whether the last message on the subject is the last row of this (fragment, epoch, pu):
        then every row was acked before (rows are published in order on one connection)."""
        try:
            last = await js.get_last_msg(stream, self.subject)
        except NotFoundError:
            return False
        found = parse_msg_id((last.headers or {}).get(MSG_ID))
        return found == MsgId(
            outputs.fragment, outputs.epoch, outputs.pu, outputs.table.num_rows - 1
        )

    async def _write(self, outputs: EpochOutputs) -> bool:
        js, stream = await self._jetstream()
        n = outputs.table.num_rows
        if n == 0:
            return True  # nothing to publish, nothing a replay could duplicate
        if await self._already_written(js, stream, outputs):
            return False
        futures = []
        for index, row in enumerate(outputs.table.to_pylist()):
            headers = {MSG_ID: msg_id(outputs.fragment, outputs.epoch, outputs.pu, index)}
            futures.append(
                await js.publish_async(
                    self.subject, encode_row(row), stream=stream, headers=headers
                )
            )
        try:
            acks = await asyncio.wait_for(asyncio.gather(*futures), self.timeout_s + 0.01 * n)
        except TimeoutError:
            missing = sum(1 for f in futures if not f.done())
            raise SinkError(
                f"{self.describe()}: {missing} of {n} publish acks of {outputs.fragment} epoch "
                f"{outputs.epoch} PU {outputs.pu} did not come; the replay publishes them again "
                f"(de-duplicated within the stream's duplicate window)"
            ) from None
        return any(not ack.duplicate for ack in acks)
