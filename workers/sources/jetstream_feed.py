"""Publish the generator's records to a JetStream stream, from the command line.

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

The modules below it: ``jetstream_publish`` (publishing any records, paced, every ack awaited:
:func:`feed`) and ``jetstream_generated`` (the generator's records, their ids, :func:`follow`).
Their public names are re-exported here, for the code that imports them from this module.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import signal
import sys
import threading
import time
from types import FrameType
from typing import Any

from nats.errors import Error as NatsError

from workers.natsio import DEFAULT_URL, NatsUnavailable, check_stream_name, check_subject, redact
from workers.sources.generator import GeneratorConfig
from workers.sources.jetstream_generated import (
    Followed,
    follow,
    generated,
    generated_from,
    generated_ids,
    generated_index,
    generator_digest,
    last_generated,
)
from workers.sources.jetstream_options import StreamMissing
from workers.sources.jetstream_publish import (
    MIN_SLEEP_S,
    MSG_ID,
    WINDOW,
    Pacer,
    feed,
    feed_async,
)

__all__ = [
    "MIN_SLEEP_S",
    "MSG_ID",
    "WINDOW",
    "Followed",
    "Pacer",
    "feed",
    "follow",
    "generated",
    "generated_from",
    "generated_ids",
    "generated_index",
    "generator_digest",
    "last_generated",
    "main",
]

FOLLOW_REPORT_S = 10.0  # seconds between progress lines of a following feeder


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
        feed_async(
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
