"""Pulling one range of a JetStream pull consumer over a plain socket: the source's fast path.

nats-py hands every message through asyncio (a task wake-up, a ``Msg`` object, its headers
parsed into a dict): about 15 µs a message with a callback, 65 µs with ``fetch``. A micro-batch
of 200,000 records spent seconds there. The NATS protocol is text framing
(``HMSG subject sid reply hdr_len total_len\\r\\n<headers><payload>\\r\\n``), so this module speaks
just what a pull needs: ``CONNECT``, ``SUB`` an inbox, ``PUB`` a ``CONSUMER.MSG.NEXT`` request,
and read frames in bulk from one buffer, answering the server's ``PING``.

The whole frames already in the buffer are parsed as one burst with array operations
(:mod:`workers.sources.jetstream_frames`, about 2 µs a message, into Arrow columns:
:class:`~workers.sources.jetstream_frames.Pulled`); anything a burst does not take (a frame cut
by the end of the buffer, a status, ``PING``, a payload that happens to hold a line shaped like a
frame) is read here one line at a time.

Only for a plain ``nats://host:port`` with neither credentials nor TLS: a server whose ``INFO``
asks for either raises :class:`WireUnsupported`, and the source takes nats-py's path (which does
both). The consumer is created and deleted by the caller, with nats-py.
"""

from __future__ import annotations

import json
import secrets
import socket
from urllib.parse import urlsplit

import pyarrow.compute as pc

from workers.sources.jetstream_frames import Collected, Pulled, scan_burst

CONNECT = (
    b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true,'
    b'"protocol":1,"name":"rescaler-jetstream-source"}\r\n'
)
READ_SIZE = 1 << 20
BURST_MIN_BYTES = 16 << 10  # unparsed bytes worth parsing as a burst
BURST_MIN_MESSAGES = 16  # a burst shorter than this (a look-alike line in a payload, ...)
SINGLE_AFTER_SHORT_BURST = 256  # ... and this many messages are read one at a time


class WireUnsupported(Exception):
    """The server wants TLS or credentials: use the full client."""


class WireError(ConnectionError):
    """The server closed the connection, said -ERR, or did not answer in time."""


def plain_address(url: str) -> tuple[str, int] | None:
    """(host, port) of a single ``nats://host[:port]`` URL without credentials, else None."""
    if "," in url:
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("nats", "") or parts.username or parts.password or not parts.hostname:
        return None
    return parts.hostname, parts.port or 4222


def _ack_position(reply: bytes) -> tuple[bytes, int, int]:
    """(consumer, stream sequence, pending) from ``$JS.ACK.…`` (9 tokens, or 11+ with the
    domain and account hash)."""
    tokens = reply.split(b".")
    if len(tokens) == 9:
        return tokens[3], int(tokens[5]), int(tokens[8])
    if len(tokens) >= 11:
        return tokens[5], int(tokens[7]), int(tokens[10])
    raise WireError(f"not a JetStream reply subject: {reply!r}")


class _Conn:
    def __init__(self, address: tuple[str, int], timeout_s: float) -> None:
        try:
            self.sock = socket.create_connection(address, timeout=timeout_s)
        except OSError as exc:
            raise WireError(f"cannot connect to {address[0]}:{address[1]}: {exc}") from exc
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.pos = 0
        info = self.line()
        if not info.startswith(b"INFO "):
            raise WireError(f"unexpected greeting {info[:80]!r}")
        server = json.loads(info[5:])
        if server.get("tls_required") or server.get("auth_required"):
            self.close()
            raise WireUnsupported("the server wants TLS or credentials")
        # an inbox of this connection alone: every subscriber of a subject gets its messages
        self.inbox = b"_INBOX.rescaler." + secrets.token_hex(12).encode()
        self.sock.sendall(CONNECT + b"SUB " + self.inbox + b" 1\r\n")

    def close(self) -> None:
        self.sock.close()

    def fill(self) -> None:
        if self.pos > READ_SIZE:  # drop what was parsed, now and then
            del self.buf[: self.pos]
            self.pos = 0
        try:
            chunk = self.sock.recv(READ_SIZE)
        except TimeoutError as exc:
            raise WireError("the server did not answer in time") from exc
        if not chunk:
            raise WireError("the server closed the connection")
        self.buf += chunk

    def line(self) -> bytes:
        while (end := self.buf.find(b"\r\n", self.pos)) < 0:
            self.fill()
        line = bytes(self.buf[self.pos : end])
        self.pos = end + 2
        return line


def pull_range(
    address: tuple[str, int],
    stream: str,
    consumer: str,
    *,
    end: int,
    last: int,
    pending: int,
    batch_max: int,
    timeout_s: float,
    api_prefix: str = "$JS.API",
) -> tuple[Pulled, str | None]:
    """The messages with sequence ``<= end`` that the pull consumer delivers after ``last``, in
    batches asking no more than the range can hold; and the server's status when a batch came
    back empty (404/408: the announced messages are gone), else None.

    Whole messages already in the buffer are parsed as a burst with array operations
    (:func:`~workers.sources.jetstream_frames.scan_burst`); anything else (a message cut by the end of the buffer, a status, a
    ``PING``) is read one line at a time."""
    conn = _Conn(address, timeout_s)
    ours = consumer.encode()
    out = Collected()
    subject = f"{api_prefix}.CONSUMER.MSG.NEXT.{stream}.{consumer}".encode()
    single_until = 0  # after a short burst, read this many messages one at a time
    try:
        while pending > 0 and last < end:
            wanted = min(pending, end - last, batch_max)
            body = json.dumps({"batch": wanted, "expires": int(timeout_s * 1e9)}).encode()
            conn.sock.sendall(b"PUB %s %s %d\r\n%s\r\n" % (subject, conn.inbox, len(body), body))
            got = 0
            status: str | None = None
            while got < wanted and status is None:
                if got >= single_until and len(conn.buf) - conn.pos >= BURST_MIN_BYTES:
                    burst = scan_burst(
                        bytes(memoryview(conn.buf)[conn.pos :]), stream.encode(), ours, wanted - got
                    )
                    if burst is not None:
                        messages, used, pending, count = burst
                        conn.pos += used
                        got += count
                        last = messages.seqs[-1].as_py()
                        if last > end:  # only a filtered range's last message can be past it
                            messages = messages.filter(pc.less_equal(messages.seqs, end))
                        out.add_burst(messages)
                    if burst is None or burst[3] < BURST_MIN_MESSAGES:
                        single_until = got + SINGLE_AFTER_SHORT_BURST
                    continue
                line = conn.line()
                if line.startswith((b"HMSG ", b"MSG ")):
                    parts = line.split(b" ")
                    total = int(parts[-1])
                    headers = int(parts[-2]) if parts[0] == b"HMSG" else 0
                    has_reply = len(parts) == (6 if headers else 5)
                    while len(conn.buf) < conn.pos + total + 2:
                        conn.fill()
                    body_at = conn.pos
                    data = bytes(conn.buf[body_at + headers : body_at + total])
                    if not data and headers and not has_reply:  # a status: 404, 408, 409
                        head = bytes(conn.buf[body_at : body_at + headers]).split(b"\r\n")[0]
                        status = head.decode("ascii", "replace")
                    else:
                        owner, seq, pending = _ack_position(parts[3])
                        if owner != ours:
                            raise WireError(f"a message of consumer {owner!r} on our inbox")
                        got += 1
                        last = seq
                        if seq <= end:
                            out.add(seq, parts[1].decode(), data)
                    conn.pos = body_at + total + 2
                elif line == b"PING":
                    conn.sock.sendall(b"PONG\r\n")
                elif line.startswith(b"-ERR"):
                    raise WireError(line.decode("utf-8", "replace"))
                # +OK, PONG, INFO updates: nothing to do
            if got == 0:
                return out.pulled(), status or "no messages"
            if last >= end:
                break
    finally:
        conn.close()
    return out.pulled(), None
