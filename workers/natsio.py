"""Connecting to NATS the way the JetStream source and sink both need: fail fast, say what to do.

nats-py retries an unreachable server forever by default (``max_reconnect_attempts=0`` does not
mean "never"), and prints a traceback through its default error callback at every attempt. A
Spark task or a streaming source must instead get one clear error at once, naming the server and
the command that starts it, so every connection goes through :func:`connect`.

The client is asyncio; the callers are not (Spark calls sources and sinks synchronously, in the
driver and in its Python workers), so each caller runs its coroutines on an event loop of its own.
"""

from __future__ import annotations

import logging
import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import nats
from nats.aio.client import Client

log = logging.getLogger("workers.natsio")

NATS_START_HINT = (
    "start it with `start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server "
    "-- -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server`"
)
JETSTREAM_HINT = (
    "JetStream is not enabled on it: run nats-server with `-js -sd DIR` (" + NATS_START_HINT + ")"
)
DEFAULT_URL = "nats://127.0.0.1:4222"

# stream names may not contain whitespace, '.', '*', '>', path separators or control characters
_STREAM_NAME = re.compile(r"^[^\s.*>/\\\x00-\x1f]+$")


class NatsUnavailable(ConnectionError):
    """The NATS server did not answer, or answers without JetStream. The message says what to do."""


def redact(url: str) -> str:
    """``url`` without its password or token, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None and parts.username is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    user = f"{parts.username}:***@" if parts.password is not None else "***@"
    return urlunsplit((parts.scheme, user + host, parts.path, parts.query, parts.fragment))


def check_stream_name(name: str) -> str:
    """``name`` if JetStream accepts it as a stream name, else a ValueError saying why not."""
    if not name or not _STREAM_NAME.match(name):
        raise ValueError(
            f"{name!r} is not a valid JetStream stream name: use letters, digits, '_' and '-' "
            f"(no whitespace, '.', '*', '>' or path separators)"
        )
    return name


def check_subject(subject: str, *, wildcards: bool) -> str:
    """``subject`` if it is a valid NATS subject (with ``*``/``>`` only when ``wildcards``)."""
    tokens = subject.split(".")
    problem = None
    if not subject or any(not t for t in tokens):
        problem = "empty token"
    elif any(c.isspace() for c in subject):
        problem = "whitespace"
    elif not wildcards and any(t in ("*", ">") or "*" in t or ">" in t for t in tokens):
        problem = "a wildcard (messages are published to one concrete subject)"
    elif wildcards and any((t != ">" and ">" in t) or (t != "*" and "*" in t) for t in tokens):
        problem = "a wildcard inside a token"
    elif wildcards and ">" in tokens[:-1]:
        problem = "'>' before the last token"
    if problem:
        raise ValueError(f"{subject!r} is not a valid NATS subject: {problem}")
    return subject


async def _quiet_error(exc: Exception) -> None:
    log.debug("nats: %s", exc)


async def connect(url: str, timeout_s: float = 5.0) -> Client:
    """A connection to ``url``, or :class:`NatsUnavailable` within about ``timeout_s`` seconds.

    One attempt per server in the URL (comma-separated URLs make a pool), no retry loop: the
    caller is a Spark task or source method, and Spark's own retry is the right place to retry.
    """
    try:
        return await nats.connect(
            url,
            connect_timeout=timeout_s,
            allow_reconnect=False,
            max_reconnect_attempts=1,  # 0 would mean "forever" while connecting
            reconnect_time_wait=0.1,
            error_cb=_quiet_error,
        )
    except Exception as exc:  # NoServersError, OSError, TimeoutError, auth errors
        raise NatsUnavailable(
            f"NATS at {redact(url)} did not answer ({type(exc).__name__}: {exc or 'no server'}): "
            f"{NATS_START_HINT}"
        ) from exc


async def close(nc: Any) -> None:
    """Close ``nc`` and ignore a connection that is already gone."""
    try:
        await nc.close()
    except Exception as exc:
        log.debug("nats close: %s", exc)
