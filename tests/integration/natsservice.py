"""The NATS server (with JetStream) the source and sink tests use, and helpers to read it back.

Like Postgres and Redis in the root conftest.py, a NATS server that does not answer FAILS the
tests that need it, with the command that starts it; nothing is skipped silently. Each test uses
streams of its own, named ``RESCALER_TEST_<random>``, and deletes them after.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from workers.natsio import JETSTREAM_HINT, NatsUnavailable, close, connect

NATS_URL = os.environ.get("TEST_NATS_URL", "nats://127.0.0.1:4222")


def nats_problem(url: str) -> str | None:
    """None when ``url`` answers with JetStream enabled, else what is wrong and what to do."""

    async def check() -> str | None:
        try:
            nc = await connect(url, 3.0)
        except NatsUnavailable as exc:
            return str(exc)
        try:
            await nc.jetstream().account_info()
        except Exception as exc:
            return f"NATS at {url} answers, but {JETSTREAM_HINT} ({exc!r})"
        finally:
            await close(nc)
        return None

    return asyncio.run(check())


@pytest.fixture(scope="session")
def nats_service() -> str:
    """The NATS server's URL; fails the test (with the start command) when it does not answer."""
    problem = nats_problem(NATS_URL)
    if problem:
        pytest.fail(problem, pytrace=False)
    return NATS_URL


def unique_name(prefix: str = "RESCALER_TEST") -> str:
    return f"{prefix}_{secrets.token_hex(4).upper()}"


def delete_stream(url: str, name: str) -> None:
    async def go() -> None:
        nc = await connect(url)
        try:
            await nc.jetstream().delete_stream(name)
        except NotFoundError:
            pass
        finally:
            await close(nc)

    asyncio.run(go())


@pytest.fixture
def stream_names(nats_service: str) -> Iterator[list[str]]:
    """Append the names of the streams a test creates: they are deleted after it."""
    names: list[str] = []
    yield names
    for name in names:
        delete_stream(nats_service, name)


def read_subject(url: str, stream: str, subject: str) -> list[dict[str, Any]]:
    """Every message on ``subject`` in stream order, read back with a real JetStream consumer:
    ``{"seq", "subject", "data", "headers"}`` each."""

    async def go() -> list[dict[str, Any]]:
        nc = await connect(url)
        js = nc.jetstream()
        try:
            config = ConsumerConfig(
                deliver_policy=DeliverPolicy.ALL,
                ack_policy=AckPolicy.NONE,
                filter_subject=subject,
                inactive_threshold=30,
            )
            info = await js.add_consumer(stream, config)
            pending = info.num_pending
            sub = await js.pull_subscribe_bind(consumer=info.name, stream=stream)
            out: list[dict[str, Any]] = []
            while pending:
                for msg in await sub.fetch(min(pending, 500), timeout=5):
                    out.append(
                        {
                            "seq": msg.metadata.sequence.stream,
                            "subject": msg.subject,
                            "data": msg.data,
                            "headers": dict(msg.headers or {}),
                        }
                    )
                    pending = msg.metadata.num_pending
            await sub.unsubscribe()
            await js.delete_consumer(stream, info.name)
            return out
        finally:
            await close(nc)

    return asyncio.run(go())


def stream_state(url: str, stream: str) -> Any:
    async def go() -> Any:
        nc = await connect(url)
        try:
            return (await nc.jetstream().stream_info(stream)).state
        finally:
            await close(nc)

    return asyncio.run(go())


def publish(
    url: str,
    subject: str,
    payloads: list[bytes],
    headers: list[dict[str, str] | None] | None = None,
) -> list[int]:
    """Publish raw payloads (the stream must exist), each with its headers if given; their
    stream sequences."""
    each = headers if headers is not None else [None] * len(payloads)

    async def go() -> list[int]:
        nc = await connect(url)
        js = nc.jetstream()
        try:
            return [
                (await js.publish(subject, payload, headers=h)).seq
                for payload, h in zip(payloads, each, strict=True)
            ]
        finally:
            await close(nc)

    return asyncio.run(go())


def create_stream(url: str, name: str, subjects: list[str]) -> None:
    async def go() -> None:
        nc = await connect(url)
        try:
            await nc.jetstream().add_stream(name=name, subjects=subjects)
        finally:
            await close(nc)

    asyncio.run(go())
