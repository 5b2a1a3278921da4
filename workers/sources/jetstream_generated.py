"""The generator's workload as JetStream messages: their ids, and a feeder that follows on.

The generator's records ``[start, end)`` (workers/sources/generator.py) are published as JSON
objects in the shape the directory source reads (``{"user", "page", "ts", "bytes"}`` for
events, ``{"line"}`` for lines); the stream's own sequence becomes each record's ``seq`` in the
``rescaler_jetstream`` source, so the generator's counter is not sent.

Each generated record carries ``Nats-Msg-Id: gen-<config hash>:<i>``: feeding the same records
again within the stream's duplicate window stores nothing new, so a feeder re-run after a
failure does not double the workload. A following feeder (:func:`follow`) first reads the last
message on its subject: when this generator config published it (its ``Nats-Msg-Id`` has the
same hash), it continues at the next index, so a feeder restarted after any pause neither
repeats records (the duplicate window is only minutes long) nor leaves a gap.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from nats.js.client import JetStreamContext
from nats.js.errors import NotFoundError

from workers.natsio import check_stream_name, check_subject, close, connect
from workers.sources.generator import CHUNK, GeneratorConfig, generate
from workers.sources.jetstream_publish import (
    MSG_ID,
    Pacer,
    Progress,
    ensure_stream,
    publish_paced,
)

_GENERATED_ID = re.compile(r"^gen-([0-9a-f]+):([0-9]+)$")


@dataclass(frozen=True)
class Followed:
    """What a following feeder did: its first index, the last index this generator config had
    published on the subject before it (None: none, it started at ``start``), the records it
    sent and how many the stream stored as new."""

    first: int
    previous: int | None
    sent: int
    stored: int

    @property
    def next(self) -> int:
        """The index a feeder following after this one starts at."""
        return self.first + self.sent


def generated(config: GeneratorConfig, start: int, end: int) -> Iterator[dict[str, Any]]:
    """The generator's records ``[start, end)`` as the JSON objects the feeder publishes."""
    for batch in generate(config, start, end):
        for row in batch.to_pylist():
            row.pop("seq")
            yield row


def generator_digest(config: GeneratorConfig) -> str:
    """The generator config's part of its records' ``Nats-Msg-Id``."""
    identity = json.dumps(config.to_options(), sort_keys=True).encode("utf-8")
    return hashlib.sha256(identity).hexdigest()[:12]


def generated_ids(config: GeneratorConfig, start: int, end: int) -> Iterator[str]:
    """``Nats-Msg-Id`` of each generated record: the generator's identity and the record's index."""
    digest = generator_digest(config)
    return (f"gen-{digest}:{i}" for i in range(start, end))


def generated_index(msg_id: str | None, config: GeneratorConfig) -> int | None:
    """The record index in ``msg_id`` when it is the id of a record of this generator config
    (see :func:`generated_ids`), else None (another config, another publisher, no id)."""
    match = _GENERATED_ID.match(msg_id or "")
    if match is None or match.group(1) != generator_digest(config):
        return None
    return int(match.group(2))


def generated_from(config: GeneratorConfig, first: int) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(msg_id, record)`` of the generator's records ``first, first + 1, ...`` without end,
    generated one chunk at a time."""
    lo = first
    while True:
        hi = (lo // CHUNK + 1) * CHUNK
        yield from zip(generated_ids(config, lo, hi), generated(config, lo, hi), strict=True)
        lo = hi


async def _last_generated(
    js: JetStreamContext, stream: str, subject: str, config: GeneratorConfig
) -> int | None:
    try:
        msg = await js.get_last_msg(stream, subject)
    except NotFoundError:  # nothing on the subject yet
        return None
    return generated_index((msg.headers or {}).get(MSG_ID), config)


def last_generated(url: str, stream: str, subject: str, config: GeneratorConfig) -> int | None:
    """The index of the last message on ``subject`` of ``stream`` when this generator config
    published it, else None (no such stream or message, or another publisher's)."""

    async def go() -> int | None:
        nc = await connect(url)
        try:
            return await _last_generated(nc.jetstream(timeout=30.0), stream, subject, config)
        except NotFoundError:  # no such stream
            return None
        finally:
            await close(nc)

    return asyncio.run(go())


async def _follow(
    url: str,
    stream: str,
    subject: str,
    config: GeneratorConfig,
    start: int,
    rate: float | None,
    create: bool,
    progress: Progress | None,
    stop: threading.Event | None,
    announce: Callable[[int, int | None], None] | None,
) -> Followed:
    nc = await connect(url)
    try:
        js = nc.jetstream(timeout=30.0)
        await ensure_stream(js, url, stream, subject, create)
        previous = await _last_generated(js, stream, subject, config)
        first = start if previous is None else max(start, previous + 1)
        if announce is not None:
            announce(first, previous)
        items = generated_from(config, first)
        sent, stored = await publish_paced(js, stream, subject, items, Pacer(rate), stop, progress)
        return Followed(first, previous, sent, stored)
    finally:
        await close(nc)


def follow(
    url: str,
    stream: str,
    subject: str,
    config: GeneratorConfig,
    *,
    stop: threading.Event,
    start: int = 0,
    rate: float | None = None,
    create: bool = True,
    progress: Progress | None = None,
    announce: Callable[[int, int | None], None] | None = None,
) -> Followed:
    """Publish the generator's records on ``subject`` until ``stop`` is set, ``rate`` per second
    (None: as fast as acked), waiting for the acks in flight before it returns.

    The first record is the one after the last this config published on the subject (its
    ``Nats-Msg-Id`` says which), or ``start`` when that is later or there is none; ``announce``
    is called with ``(first, previous last index or None)`` before the first record is sent."""
    check_stream_name(stream)
    check_subject(subject, wildcards=False)
    return asyncio.run(
        _follow(url, stream, subject, config, start, rate, create, progress, stop, announce)
    )
