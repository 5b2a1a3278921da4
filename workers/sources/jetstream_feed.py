"""Publish records to a JetStream stream: the project's generator workload, or any dicts.

``python -m workers.sources.jetstream_feed --stream CLICKS --rows 100000 --kind events`` publishes
the generator's records ``[start, start + rows)`` (workers/sources/generator.py) as JSON messages,
one per record, in the shape the directory source reads (``{"user", "page", "ts", "bytes"}`` for
events, ``{"line"}`` for lines), creating the stream when it is missing. The stream's own
sequence becomes each record's ``seq`` in the ``rescaler_jetstream`` source, so the generator's
counter is not sent.

Each generated record carries ``Nats-Msg-Id: gen-<config hash>:<i>``: feeding the same records
again within the stream's duplicate window stores nothing new (the feeder reports them as
duplicates), so a feeder re-run after a failure does not double the workload.

A live source: ``--rate R`` paces the records to R per second (default: as fast as the server
acks), and ``--follow`` keeps publishing the generator's next records after ``--rows`` until
SIGINT or SIGTERM, reporting every 10 s on stderr. A following feeder first reads the last
message on its subject: when this generator config published it (its ``Nats-Msg-Id`` has the same
hash), it continues at the next index, so a feeder restarted after any pause neither repeats
records (the duplicate window is only minutes long) nor leaves a gap. SIGINT or SIGTERM ends
either mode cleanly: the acks in flight are awaited and the summary printed.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any

from nats.errors import Error as NatsError
from nats.js.client import JetStreamContext
from nats.js.errors import NotFoundError, ServiceUnavailableError

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
from workers.sources.generator import CHUNK, GeneratorConfig, generate
from workers.sources.jetstream import StreamMissing

WINDOW = 2000  # publishes in flight before the feeder waits for their acks
MSG_ID = "Nats-Msg-Id"
MIN_SLEEP_S = 0.02  # a paced feeder sleeps when this far ahead: bursts of rate * 20 ms records
STOP_POLL_S = 0.25  # longest sleep before a paced feeder looks at its stop flag again
MAX_LAG_S = 1.0  # a paced feeder this far behind starts over from now instead of bursting
FOLLOW_REPORT_S = 10.0  # seconds between progress lines of a following feeder

Progress = Callable[[int, int], None]  # (records sent, of which stored as new)

_GENERATED_ID = re.compile(r"^gen-([0-9a-f]+):([0-9]+)$")


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


async def _ensure_stream(
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


async def _publish(
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


async def _feed(
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
        await _ensure_stream(js, url, stream, subject, create)
        if msg_ids is None:
            items: Iterable[tuple[str | None, dict[str, Any]]] = ((None, r) for r in records)
        else:
            items = zip(msg_ids, records, strict=False)
        return await _publish(js, stream, subject, items, Pacer(rate), stop, progress)
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
    ``subject``; without, a missing stream is :class:`~workers.sources.jetstream.StreamMissing`.
    An existing stream that does not take ``subject`` is a ValueError (it is not changed).

    ``rate`` paces the records to that many per second; setting ``stop`` ends the feed early,
    after the acks in flight (the records not sent are not published)."""
    check_stream_name(stream)
    check_subject(subject, wildcards=False)
    _, stored = asyncio.run(
        _feed(url, stream, subject, records, create, msg_ids, progress, rate, stop)
    )
    return stored


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
        await _ensure_stream(js, url, stream, subject, create)
        previous = await _last_generated(js, stream, subject, config)
        first = start if previous is None else max(start, previous + 1)
        if announce is not None:
            announce(first, previous)
        items = generated_from(config, first)
        sent, stored = await _publish(js, stream, subject, items, Pacer(rate), stop, progress)
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


class _Signals:
    """SIGINT and SIGTERM set ``stop`` while installed (in the main thread only); after the
    first, both are back to what they were, so a second signal stops the feeder at once."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _Signals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received = signum
        self.stop.set()
        self._restore()

    def _restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def __exit__(self, *exc: object) -> None:
        self._restore()

    @property
    def name(self) -> str:
        return signal.Signals(self.received).name if self.received is not None else ""


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number, not {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workers.sources.jetstream_feed",
        description="Publish the generator's records to a NATS JetStream stream as JSON messages.",
    )
    parser.add_argument(
        "--url",
        default=os.environ.get("RESCALER_NATS_URL") or DEFAULT_URL,
        help=f"NATS server (default: $RESCALER_NATS_URL, else {DEFAULT_URL})",
    )
    parser.add_argument("--stream", required=True, help="JetStream stream (created if missing)")
    parser.add_argument("--subject", help="subject to publish on (default: <stream>.<kind>)")
    parser.add_argument(
        "--rows",
        type=int,
        help="records to publish (0: create the stream); required unless --follow (default 0)",
    )
    parser.add_argument("--start", type=int, default=0, help="the generator's first record")
    parser.add_argument("--kind", choices=("events", "lines"), default="events")
    parser.add_argument("--key-space", type=int, default=GeneratorConfig.key_space)
    parser.add_argument("--zipf-s", type=float, default=GeneratorConfig.zipf_s)
    parser.add_argument("--seed", type=int, default=GeneratorConfig.seed)
    parser.add_argument("--no-create", action="store_true", help="fail if the stream is missing")
    parser.add_argument(
        "--rate",
        type=_positive,
        help="records per second, paced (default: as fast as the server acks)",
    )
    parser.add_argument(
        "--follow",
        action="store_true",
        help="after --rows, keep publishing the generator's next records at --rate until "
        "SIGINT/SIGTERM; continues after the last record this generator config published on "
        "the subject (or at --start, if later)",
    )
    parser.add_argument(
        "--report-every",
        type=_positive,
        default=FOLLOW_REPORT_S,
        metavar="SECONDS",
        help=f"seconds between progress lines with --follow (default {FOLLOW_REPORT_S:g})",
    )
    args = parser.parse_args(argv)
    if args.rows is None and not args.follow:
        parser.error("--rows is required (unless --follow)")
    rows = args.rows or 0
    if rows < 0 or args.start < 0:
        parser.error("--rows and --start must be >= 0")
    config = GeneratorConfig(
        kind=args.kind, key_space=args.key_space, zipf_s=args.zipf_s, seed=args.seed
    )
    subject = args.subject or f"{args.stream.lower()}.{args.kind}"
    stop = threading.Event()
    with _Signals(stop) as signals:
        try:
            if args.follow:
                return _main_follow(args, config, subject, rows, stop, signals)
            return _main_feed(args, config, subject, rows, stop, signals)
        except (NatsUnavailable, StreamMissing, ValueError) as exc:
            print(f"ERROR: {exc}", file=sys.stderr)
            return 1
        except NatsError as exc:  # the server went away (or failed) while publishing
            print(
                f"ERROR: publishing to NATS at {redact(args.url)} failed "
                f"({type(exc).__name__}: {exc}); run the feeder again: "
                + (
                    "it continues after the last record stored"
                    if args.follow
                    else "records stored within the stream's duplicate window are not stored twice"
                ),
                file=sys.stderr,
            )
            return 1
        except KeyboardInterrupt:  # a second SIGINT: stopped without waiting for the acks
            print("interrupted: the acks in flight were not awaited", file=sys.stderr)
            return 130


def _main_feed(
    args: argparse.Namespace,
    config: GeneratorConfig,
    subject: str,
    rows: int,
    stop: threading.Event,
    signals: _Signals,
) -> int:
    end = args.start + rows
    began = time.monotonic()
    every = max(rows // 10, WINDOW)
    shown = 0
    shown_at = began

    def progress(sent: int, stored: int) -> None:
        nonlocal shown, shown_at
        now = time.monotonic()
        if sent - shown >= every or sent == rows or now - shown_at >= FOLLOW_REPORT_S:
            if sent == shown:
                return
            shown, shown_at = sent, now
            rate = sent / max(now - began, 1e-9)
            print(
                f"  {sent:,}/{rows:,} published ({stored:,} new), {rate:,.0f} records/s",
                file=sys.stderr,
            )

    check_stream_name(args.stream)
    check_subject(subject, wildcards=False)
    sent, stored = asyncio.run(
        _feed(
            args.url,
            args.stream,
            subject,
            generated(config, args.start, end),
            not args.no_create,
            generated_ids(config, args.start, end),
            progress,
            args.rate,
            stop,
        )
    )
    seconds = time.monotonic() - began
    duplicates = sent - stored
    print(
        f"{stored:,} records stored on {args.stream}/{subject} in {seconds:.1f} s"
        + (f" ({duplicates:,} were already there: duplicates dropped)" if duplicates else "")
    )
    if sent < rows:
        print(
            f"stopped by {signals.name or 'a signal'} after {sent:,} of {rows:,} records: "
            f"--start {args.start + sent} --rows {rows - sent} publishes the rest",
            file=sys.stderr,
        )
        return 128 + (signals.received or signal.SIGINT)
    return 0


def _main_follow(
    args: argparse.Namespace,
    config: GeneratorConfig,
    subject: str,
    rows: int,
    stop: threading.Event,
    signals: _Signals,
) -> int:
    began = time.monotonic()
    first = args.start
    shown_at = began
    shown_sent = 0
    past_rows = rows == 0
    pace = f"{args.rate:,g} records/s" if args.rate else "as fast as acked"

    def announce(start: int, previous: int | None) -> None:
        nonlocal first
        first = start
        where = f"{args.stream}/{subject}"
        if previous is not None:
            origin = f"after record {previous:,} (the last this generator published there)"
        else:
            origin = f"from record {start:,}"
        print(
            f"following: publishing {args.kind} records on {where} {origin}, {pace}; "
            "SIGINT or SIGTERM stops",
            file=sys.stderr,
        )

    def progress(sent: int, stored: int) -> None:
        nonlocal shown_at, shown_sent, past_rows
        now = time.monotonic()
        if not past_rows and sent >= rows:
            past_rows = True
            print(f"  {rows:,} published (--rows): following on", file=sys.stderr)
        if now - shown_at < args.report_every:
            return
        recent = (sent - shown_sent) / max(now - shown_at, 1e-9)
        shown_at, shown_sent = now, sent
        print(
            f"  {sent:,} published ({stored:,} new) in {now - began:,.0f} s, "
            f"{recent:,.0f} records/s, next record {first + sent:,}",
            file=sys.stderr,
        )

    done = follow(
        args.url,
        args.stream,
        subject,
        config,
        stop=stop,
        start=args.start,
        rate=args.rate,
        create=not args.no_create,
        progress=progress,
        announce=announce,
    )
    seconds = time.monotonic() - began
    duplicates = done.sent - done.stored
    span = f"records {done.first:,} to {done.next - 1:,}" if done.sent else "no record sent"
    print(
        f"{done.stored:,} records stored on {args.stream}/{subject} in {seconds:.1f} s "
        f"({span}; a following feeder continues at {done.next:,})"
        + (f", {duplicates:,} were already there: duplicates dropped" if duplicates else "")
        + (f"; stopped by {signals.name}" if signals.name else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
