"""Pulling one sequence range of a JetStream stream: a reader's consumer, read two ways.

A :class:`SeqRange` is one partition of a micro-batch: the messages with ``start < seq <= end``
on one subject filter (or every subject). The reader (:mod:`workers.sources.jetstream`) makes an
ephemeral pull consumer from ``start + 1`` and hands it to :func:`pull`, which takes the fast
path for a plain ``nats://host:port`` (its own socket, :mod:`workers.sources.jetstream_wire`)
and nats-py otherwise (TLS or credentials, which it does both). Either stops at sequence ``end``,
at the first message past it, or when the consumer has nothing pending, and never asks for more
than the range can still hold (sequences are unique). Messages announced but not delivered are
:class:`~workers.sources.jetstream_options.DataLoss`.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from nats.aio.msg import Msg
from nats.js.client import JetStreamContext
from pyspark.sql.datasource import InputPartition

from workers.natsio import NatsUnavailable, redact
from workers.sources.jetstream_frames import Pulled
from workers.sources.jetstream_options import DataLoss, JetStreamOptions
from workers.sources.jetstream_wire import (
    WireError,
    WireUnsupported,
    plain_address,
    pull_range,
)

FETCH_BATCH = 50_000  # messages asked for in one pull request (fewer round trips)


@dataclass
class SeqRange(InputPartition):
    """The messages with ``start < seq <= end`` on ``subject`` (None: every subject)."""

    start: int
    end: int
    subject: str | None


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


async def pull(
    js: JetStreamContext, options: JetStreamOptions, consumer: str, pending: int, part: SeqRange
) -> Pulled:
    """The range's messages from ``consumer`` (``pending`` messages announced): over the wire
    for a plain server, else with nats-py."""
    address = plain_address(options.url)
    if address is not None:
        try:
            return pull_wire(address, js, options, consumer, pending, part)
        except WireUnsupported:
            pass  # TLS or credentials: nats-py's path below does both
    return await pull_nats(js, options, consumer, pending, part)


def pull_wire(
    address: tuple[str, int],
    js: JetStreamContext,
    options: JetStreamOptions,
    consumer: str,
    pending: int,
    part: SeqRange,
) -> Pulled:
    """The fast path (workers/sources/jetstream_wire.py), for a plain server."""
    try:
        out, status = pull_range(
            address,
            options.stream,
            consumer,
            end=part.end,
            last=part.start,
            pending=pending,
            batch_max=FETCH_BATCH,
            timeout_s=options.timeout_s,
            api_prefix=js._prefix,
        )
    except WireError as exc:
        raise NatsUnavailable(
            f"NATS at {redact(options.url)} failed while reading {options.stream} "
            f"sequences {part.start + 1}..{part.end}: {exc}"
        ) from exc
    if status is not None:
        raise DataLoss(
            f"JetStream stream {options.stream!r}: message(s) of sequences "
            f"{part.start + 1}..{part.end} on {part.subject or 'every subject'} announced "
            f"but not delivered within {options.timeout_s}s ({status}); were they "
            f"removed meanwhile?"
        )
    return out


async def pull_nats(
    js: JetStreamContext, options: JetStreamOptions, consumer: str, pending: int, part: SeqRange
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
    request = f"{js._prefix}.CONSUMER.MSG.NEXT.{options.stream}.{consumer}"
    try:
        while pending > 0 and last < part.end:
            wanted, received, status = min(pending, part.end - last, FETCH_BATCH), 0, None
            answered.clear()
            body = {"batch": wanted, "expires": int(options.timeout_s * 1e9)}
            await nc.publish(request, json.dumps(body).encode(), reply=inbox)
            try:
                await asyncio.wait_for(answered.wait(), options.timeout_s + 2.0)
            except TimeoutError:
                status = "no answer"
            if received == 0:
                raise DataLoss(
                    f"JetStream stream {options.stream!r}: {pending} message(s) of "
                    f"sequences {part.start + 1}..{part.end} on "
                    f"{part.subject or 'every subject'} announced but not delivered within "
                    f"{options.timeout_s}s ({status}); were they removed meanwhile?"
                )
    finally:
        await sub.unsubscribe()
    return Pulled.of(out)
