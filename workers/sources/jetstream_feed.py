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
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

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
from workers.sources.generator import GeneratorConfig, generate
from workers.sources.jetstream import StreamMissing

WINDOW = 2000  # publishes in flight before the feeder waits for their acks
MSG_ID = "Nats-Msg-Id"

Progress = Callable[[int, int], None]  # (records sent, of which stored as new)


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


async def _feed(
    url: str,
    stream: str,
    subject: str,
    records: Iterable[dict[str, Any]],
    create: bool,
    msg_ids: Iterable[str] | None,
    progress: Progress | None,
) -> int:
    nc = await connect(url)
    try:
        js = nc.jetstream(timeout=30.0)
        await _ensure_stream(js, url, stream, subject, create)
        ids: Iterator[str] | None = iter(msg_ids) if msg_ids is not None else None
        sent = stored = 0
        pending: list[asyncio.Future[Any]] = []

        async def settle() -> None:
            nonlocal stored
            acks = await asyncio.gather(*pending)
            stored += sum(1 for ack in acks if not ack.duplicate)
            pending.clear()
            if progress is not None:
                progress(sent, stored)

        for record in records:
            headers = {MSG_ID: next(ids)} if ids is not None else None
            payload = json.dumps(record, separators=(",", ":")).encode("utf-8")
            pending.append(await js.publish_async(subject, payload, stream=stream, headers=headers))
            sent += 1
            if len(pending) >= WINDOW:
                await settle()
        await settle()
        return stored
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
) -> int:
    """Publish each record as a JSON message on ``subject`` and wait for every ack; returns how
    many the stream stored (a message whose ``msg_ids`` entry it already had within its duplicate
    window is not stored again). With ``create``, a missing ``stream`` is created taking
    ``subject``; without, a missing stream is :class:`~workers.sources.jetstream.StreamMissing`.
    An existing stream that does not take ``subject`` is a ValueError (it is not changed)."""
    check_stream_name(stream)
    check_subject(subject, wildcards=False)
    return asyncio.run(_feed(url, stream, subject, records, create, msg_ids, progress))


def generated(config: GeneratorConfig, start: int, end: int) -> Iterator[dict[str, Any]]:
    """The generator's records ``[start, end)`` as the JSON objects the feeder publishes."""
    for batch in generate(config, start, end):
        for row in batch.to_pylist():
            row.pop("seq")
            yield row


def generated_ids(config: GeneratorConfig, start: int, end: int) -> Iterator[str]:
    """``Nats-Msg-Id`` of each generated record: the generator's identity and the record's index."""
    identity = json.dumps(config.to_options(), sort_keys=True).encode("utf-8")
    digest = hashlib.sha256(identity).hexdigest()[:12]
    return (f"gen-{digest}:{i}" for i in range(start, end))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workers.sources.jetstream_feed",
        description="Publish the generator's records to a NATS JetStream stream as JSON messages.",
    )
    parser.add_argument("--url", default=DEFAULT_URL, help=f"NATS server (default {DEFAULT_URL})")
    parser.add_argument("--stream", required=True, help="JetStream stream (created if missing)")
    parser.add_argument("--subject", help="subject to publish on (default: <stream>.<kind>)")
    parser.add_argument("--rows", type=int, required=True, help="records to publish (0: create)")
    parser.add_argument("--start", type=int, default=0, help="the generator's first record")
    parser.add_argument("--kind", choices=("events", "lines"), default="events")
    parser.add_argument("--key-space", type=int, default=GeneratorConfig.key_space)
    parser.add_argument("--zipf-s", type=float, default=GeneratorConfig.zipf_s)
    parser.add_argument("--seed", type=int, default=GeneratorConfig.seed)
    parser.add_argument("--no-create", action="store_true", help="fail if the stream is missing")
    args = parser.parse_args(argv)
    if args.rows < 0 or args.start < 0:
        parser.error("--rows and --start must be >= 0")
    config = GeneratorConfig(
        kind=args.kind, key_space=args.key_space, zipf_s=args.zipf_s, seed=args.seed
    )
    subject = args.subject or f"{args.stream.lower()}.{args.kind}"
    end = args.start + args.rows
    began = time.monotonic()
    every = max(args.rows // 10, WINDOW)
    shown = 0

    def progress(sent: int, stored: int) -> None:
        nonlocal shown
        if sent - shown >= every or sent == args.rows:
            shown = sent
            rate = sent / max(time.monotonic() - began, 1e-9)
            print(
                f"  {sent:,}/{args.rows:,} published ({stored:,} new), {rate:,.0f} records/s",
                file=sys.stderr,
            )

    try:
        stored = feed(
            args.url,
            args.stream,
            subject,
            generated(config, args.start, end),
            create=not args.no_create,
            msg_ids=generated_ids(config, args.start, end),
            progress=progress,
        )
    except (NatsUnavailable, StreamMissing, ValueError) as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return 1
    seconds = time.monotonic() - began
    duplicates = args.rows - stored
    print(
        f"{stored:,} records stored on {args.stream}/{subject} in {seconds:.1f} s"
        + (f" ({duplicates:,} were already there: duplicates dropped)" if duplicates else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
