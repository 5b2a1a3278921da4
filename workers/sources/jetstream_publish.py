"""Publishing records to a JetStream stream: JSON messages, paced, every ack awaited.

:func:`feed` publishes any dicts as JSON messages on one subject, creating the stream when it is
missing (an existing stream that does not take the subject is refused, never changed). At most
``WINDOW`` publishes are in flight before the publisher waits for their acks; a message whose
``Nats-Msg-Id`` the stream already has within its duplicate window is not stored again, and is
counted as sent but not stored. A :class:`Pacer` spaces the records to a rate, and a stop flag
ends a feed after the acks in flight. The generator's workload on top of it is
:mod:`workers.sources.jetstream_generated`, the command line :mod:`workers.sources.jetstream_feed`.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from nats.js.client import JetStreamContext
from nats.js.errors import NotFoundError, ServiceUnavailableError

from workers.natsio import (
    JETSTREAM_HINT,
    NatsUnavailable,
    check_stream_name,
    check_subject,
    close,
    connect,
    redact,
)
from workers.sources.jetstream_options import StreamMissing

WINDOW = 2000  # publishes in flight before the feeder waits for their acks
MSG_ID = "Nats-Msg-Id"
MIN_SLEEP_S = 0.02  # a paced feeder sleeps when this far ahead: bursts of rate * 20 ms records
STOP_POLL_S = 0.25  # longest sleep before a paced feeder looks at its stop flag again
MAX_LAG_S = 1.0  # a paced feeder this far behind starts over from now instead of bursting

Progress = Callable[[int, int], None]  # (records sent, of which stored as new)


class Pacer:
    """When to send each record so that ``rate`` records go out per second (None: no pacing).

    ``delay(n)`` is how long to wait before sending record ``n`` (counted from 0): records are
    due at ``rate`` per second from the first call. A sender that falls more than ``max_lag_s``
    behind (a slow server, a suspended process) starts over from that moment instead of bursting
    to catch up."""

    def __init__(
        self,
        rate: float | None,
        clock: Callable[[], float] = time.monotonic,
        max_lag_s: float = MAX_LAG_S,
    ) -> None:
        if rate is not None and not (math.isfinite(rate) and rate > 0):
            raise ValueError(f"rate must be a positive number of records per second, not {rate}")
        self.rate = rate
        self.clock = clock
        self.max_lag_s = max_lag_s
        self._origin: float | None = None
        self._base = 0

    def delay(self, n: int) -> float:
        if self.rate is None:
            return 0.0
        now = self.clock()
        if self._origin is None:
            self._origin, self._base = now, n
        due = self._origin + (n - self._base) / self.rate
        if now - due > self.max_lag_s:
            self._origin, self._base = now, n
            return 0.0
        return max(due - now, 0.0)


async def ensure_stream(
    js: JetStreamContext, url: str, stream: str, subject: str, create: bool
) -> None:
    try:
        owner: str | None = await js.find_stream_name_by_subject(subject)
    except NotFoundError:
        owner = None
    except ServiceUnavailableError as exc:
        raise NatsUnavailable(f"NATS at {redact(url)} answers, but {JETSTREAM_HINT}") from exc
    if owner == stream:
        return
    if owner is not None:
        raise ValueError(
            f"subject {subject!r} belongs to stream {owner!r}, not {stream!r}: feed --stream "
            f"{owner}, or choose another subject"
        )
    try:
        info = await js.stream_info(stream)
    except NotFoundError:
        if not create:
            raise StreamMissing(
                f"JetStream stream {stream!r} does not exist on NATS at {redact(url)}: create it "
                f"(feed with create=True, or `nats stream add {stream} --subjects '{subject}'`)"
            ) from None
        await js.add_stream(name=stream, subjects=[subject])
        return
    raise ValueError(
        f"stream {stream!r} does not take subject {subject!r} (its subjects: "
        f"{', '.join(info.config.subjects or [])}): choose one of them with --subject, or add it "
        f"with `nats stream edit {stream} --subjects ...`"
    )


async def publish_paced(
    js: JetStreamContext,
    stream: str,
    subject: str,
    items: Iterable[tuple[str | None, dict[str, Any]]],
    pacer: Pacer,
    stop: threading.Event | None,
    progress: Progress | None,
) -> tuple[int, int]:
    """Publish each ``(msg_id, record)`` at the pacer's times until ``items`` ends or ``stop`` is
    set; every ack is awaited before it returns ``(sent, stored)``."""
    sent = stored = 0
    pending: list[asyncio.Future[Any]] = []

    def stopped() -> bool:
        return stop is not None and stop.is_set()

    async def settle() -> None:
        nonlocal stored
        if pending:
            acks = await asyncio.gather(*pending)
            stored += sum(1 for ack in acks if not ack.duplicate)
            pending.clear()
        if progress is not None:
            progress(sent, stored)

    for msg_id, record in items:
        if stopped():
            break
        if pacer.delay(sent) >= MIN_SLEEP_S:
            await settle()  # ahead of time: take the acks in while waiting
            while (wait := pacer.delay(sent)) > 0 and not stopped():
                await asyncio.sleep(min(wait, STOP_POLL_S))
            if stopped():
                break
        headers = {MSG_ID: msg_id} if msg_id is not None else None
        payload = json.dumps(record, separators=(",", ":")).encode("utf-8")
        pending.append(await js.publish_async(subject, payload, stream=stream, headers=headers))
        sent += 1
        if len(pending) >= WINDOW:
            await settle()
    await settle()
    return sent, stored


async def feed_async(
    url: str,
    stream: str,
    subject: str,
    records: Iterable[dict[str, Any]],
    create: bool,
    msg_ids: Iterable[str] | None,
    progress: Progress | None,
    rate: float | None = None,
    stop: threading.Event | None = None,
) -> tuple[int, int]:
    nc = await connect(url)
    try:
        js = nc.jetstream(timeout=30.0)
        await ensure_stream(js, url, stream, subject, create)
        if msg_ids is None:
            items: Iterable[tuple[str | None, dict[str, Any]]] = ((None, r) for r in records)
        else:
            items = zip(msg_ids, records, strict=False)
        return await publish_paced(js, stream, subject, items, Pacer(rate), stop, progress)
    finally:
        await close(nc)


def feed(
    url: str,
    stream: str,
    subject: str,
    records: Iterable[dict[str, Any]],
    create: bool = True,
    *,
    msg_ids: Iterable[str] | None = None,
    progress: Progress | None = None,
    rate: float | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Publish each record as a JSON message on ``subject`` and wait for every ack; returns how
    many the stream stored (a message whose ``msg_ids`` entry it already had within its duplicate
    window is not stored again). With ``create``, a missing ``stream`` is created taking
    ``subject``; without, a missing stream is
    :class:`~workers.sources.jetstream_options.StreamMissing`.
    An existing stream that does not take ``subject`` is a ValueError (it is not changed).

    ``rate`` paces the records to that many per second; setting ``stop`` ends the feed early,
    after the acks in flight (the records not sent are not published)."""
    check_stream_name(stream)
    check_subject(subject, wildcards=False)
    _, stored = asyncio.run(
        feed_async(url, stream, subject, records, create, msg_ids, progress, rate, stop)
    )
    return stored
