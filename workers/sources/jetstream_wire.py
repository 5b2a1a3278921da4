"""Pulling one range of a JetStream pull consumer over a plain socket: the source's fast path.

nats-py hands every message through asyncio (a task wake-up, a ``Msg`` object, its headers
parsed into a dict): about 15 µs a message with a callback, 65 µs with ``fetch``. A micro-batch
of 200,000 records spent seconds there. The NATS protocol is text framing
(``HMSG subject sid reply hdr_len total_len\\r\\n<headers><payload>\\r\\n``), so this module speaks
just what a pull needs: ``CONNECT``, ``SUB`` an inbox, ``PUB`` a ``CONSUMER.MSG.NEXT`` request,
and read frames in bulk from one buffer, answering the server's ``PING``.

Parsing frame by frame in Python still cost about 8 µs a message. So the whole frames already
in the buffer are parsed as one **burst** with NumPy and Arrow compute (:func:`_scan`): find
every CRLF, split the lines starting ``HMSG``/``MSG`` at their spaces and the reply subjects at
their dots, check each frame's declared length against where the next one starts, and take the
payloads as whole lines (or copy them out when they hold CRLF). About 2 µs a message; the
result is Arrow columns (:class:`Pulled`), which the source's JSON reader takes as they are.
Anything a burst does not take (a frame cut by the end of the buffer, a status, ``PING``, a
payload that happens to hold a line shaped like a frame) is read one line at a time, as before.

Only for a plain ``nats://host:port`` with neither credentials nor TLS: a server whose ``INFO``
asks for either raises :class:`WireUnsupported`, and the source takes nats-py's path (which does
both). The consumer is created and deleted by the caller, with nats-py.
"""

from __future__ import annotations

import json
import secrets
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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


@dataclass(frozen=True)
class Pulled:
    """A range's messages in delivery order, as Arrow columns: stream sequence (int64), subject
    (string) and payload (binary, headers stripped)."""

    seqs: pa.Array
    subjects: pa.Array
    payloads: pa.Array

    def __len__(self) -> int:
        return len(self.seqs)

    def filter(self, keep: pa.Array) -> Pulled:
        return Pulled(
            self.seqs.filter(keep), self.subjects.filter(keep), self.payloads.filter(keep)
        )

    @classmethod
    def of(cls, messages: list[tuple[int, str, bytes]]) -> Pulled:
        """From ``(seq, subject, payload)`` tuples (nats-py's path, tests)."""
        return cls(
            pa.array([m[0] for m in messages], pa.int64()),
            pa.array([m[1] for m in messages], pa.string()),
            pa.array([m[2] for m in messages], pa.binary()),
        )


class _Collected:
    """The columns of :class:`Pulled`, filled one message at a time or a burst at a time,
    keeping delivery order."""

    def __init__(self) -> None:
        self.pieces: list[Pulled] = []
        self.seqs: list[int] = []
        self.subjects: list[str] = []
        self.payloads: list[bytes] = []

    def add(self, seq: int, subject: str, payload: bytes) -> None:
        self.seqs.append(seq)
        self.subjects.append(subject)
        self.payloads.append(payload)

    def _flush(self) -> None:
        if self.seqs:
            self.pieces.append(
                Pulled(
                    pa.array(self.seqs, pa.int64()),
                    pa.array(self.subjects, pa.string()),
                    pa.array(self.payloads, pa.binary()),
                )
            )
            self.seqs, self.subjects, self.payloads = [], [], []

    def add_burst(self, burst: Pulled) -> None:
        self._flush()
        self.pieces.append(burst)

    def pulled(self) -> Pulled:
        self._flush()
        if not self.pieces:
            return Pulled.of([])
        return Pulled(
            pa.concat_arrays([p.seqs for p in self.pieces]),
            pa.concat_arrays([p.subjects for p in self.pieces]),
            pa.concat_arrays([p.payloads for p in self.pieces]),
        )


def _gather(data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    """``data[starts[i]:ends[i]]`` of every i, as one binary array (one copy of those bytes)."""
    lengths = ends - starts
    offsets = np.zeros(len(starts) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    index = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])
    buffers = [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data[index])]
    return pa.Array.from_buffers(pa.binary(), len(starts), buffers)


def _payloads(
    data: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    every: pa.Array,
    begins: np.ndarray,
    finishes: np.ndarray,
) -> pa.Array:
    """The payloads ``data[begins[i]:finishes[i]]``: the lines that are exactly those (a
    payload without CRLF, the usual case), else copied out of ``data``."""
    at = np.searchsorted(starts, begins)
    if (at < len(ends)).all() and (starts[at] == begins).all() and (ends[at] == finishes).all():
        return every.take(pa.array(at))
    return _gather(data, begins, finishes)


def _fields(lines: pa.Array, sep: str, width: int) -> tuple[int, list[pa.Array]]:
    """Split each line at ``sep``: how many leading lines have exactly ``width`` fields, and
    those lines' fields, one array per position."""
    parts = pc.split_pattern(lines, sep)
    sizes = pc.list_value_length(parts).to_numpy(zero_copy_only=False)
    wrong = np.flatnonzero(sizes != width)
    run = int(wrong[0]) if len(wrong) else len(sizes)
    flat = pc.list_flatten(parts[:run])
    rows = np.arange(run) * width
    return run, [flat.take(pa.array(rows + k)) for k in range(width)]


def _leading(flags: pa.Array | np.ndarray) -> int:
    """How many leading entries are true."""
    values = flags if isinstance(flags, np.ndarray) else flags.to_numpy(zero_copy_only=False)
    false = np.flatnonzero(~values)
    return int(false[0]) if len(false) else len(values)


def _digits(text: pa.Array) -> pa.Array:
    return pc.match_substring_regex(text, "^[0-9]{1,18}$")


def _numbers(text: pa.Array) -> np.ndarray:
    numbers: np.ndarray = pc.cast(pc.cast(text, pa.string()), pa.int64()).to_numpy()
    return numbers


def _scan(
    window: bytes, stream: bytes, consumer: bytes, most: int
) -> tuple[Pulled, int, int, int] | None:
    """The longest run of whole messages of our consumer at the start of ``window`` (at most
    ``most``), parsed with array operations: ``(messages, bytes used, last pending, count)``, or
    None when the window does not start with one. Only the common shape is taken: ``HMSG``
    frames (the stream's messages have headers) of subscription 1 whose reply is
    ``$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>``.
    Each message's length is checked against where the next one starts, so a payload that
    happens to hold a line looking like a frame only ends the run early; the caller reads
    anything else one line at a time."""
    data = np.frombuffer(window, np.uint8)
    size = len(data)
    cr = np.flatnonzero(data[:-1] == 13)
    crlf = cr[data[cr + 1] == 10]
    if not len(crlf):
        return None
    starts = np.concatenate(([0], crlf[:-1] + 2))  # every whole line
    ends = crlf
    # lines starting "HMSG " or "MSG " (a payload may hold one too: the lengths below tell)
    hs = starts[starts + 5 <= size]
    b0, b1, b2, b3 = data[hs], data[hs + 1], data[hs + 2], data[hs + 3]
    with_headers = (b0 == 72) & (b1 == 77) & (b2 == 83) & (b3 == 71) & (data[hs + 4] == 32)
    without = (b0 == 77) & (b1 == 83) & (b2 == 71) & (b3 == 32)
    lines = np.flatnonzero(with_headers | without)
    if not len(lines) or hs[lines[0]] != 0:
        return None
    has_headers = with_headers[lines]
    line_starts, line_ends = hs[lines], ends[: len(hs)][lines]
    # every line as an array element: element i is window[starts[i]:ends[i]]
    whole_window = pa.Array.from_buffers(
        pa.binary(), 1, [None, pa.py_buffer(np.array([0, size], np.int32)), pa.py_buffer(window)]
    )
    every = pc.list_flatten(pc.split_pattern(whole_window, "\r\n"))
    # HMSG subject sid reply hdr_len total_len | MSG subject sid reply total_len
    parts = pc.split_pattern(every.take(pa.array(lines)), " ")
    at = parts.offsets.to_numpy()
    sizes = np.diff(at)
    run = _leading(sizes == np.where(has_headers, 6, 5))
    if run == 0:
        return None
    at, has_headers = at[: run + 1], has_headers[:run]
    flat = parts.values

    def field(positions: np.ndarray) -> pa.Array:
        return flat.take(pa.array(positions))

    subjects, sids, replies = field(at[:-1] + 1), field(at[:-1] + 2), field(at[:-1] + 3)
    total_text = field(at[1:] - 1)
    hdr_text = pc.if_else(pa.array(has_headers), field(at[:-1] + 4), b"0")
    shaped = pc.and_(
        pc.equal(sids, b"1"),
        pc.and_(_digits(hdr_text), _digits(total_text)),
    )
    run = min(run, _leading(shaped))
    if run == 0:
        return None
    hdrs, totals = _numbers(hdr_text[:run]), _numbers(total_text[:run])
    line_starts, line_ends = line_starts[:run], line_ends[:run]
    # whole, and the next frame starts where this one ends
    bodies = line_ends + 2
    frame_ends = bodies + totals + 2
    whole = (frame_ends <= size) & (hdrs <= totals)
    linked = np.append(line_starts[1:] == frame_ends[:-1], True)
    count = _leading(whole & linked)
    if count < run and whole[count]:
        count += 1  # whole but followed by something else: this one still counts
    count = min(count, most)
    if count == 0:
        return None
    tokens_run, tokens = _fields(replies[:count], ".", 9)
    js, ack, stream_tok, consumer_tok, _, seq_tok, _, _, pending_tok = tokens
    ours = pc.and_(
        pc.and_(pc.equal(js, b"$JS"), pc.equal(ack, b"ACK")),
        pc.and_(pc.equal(stream_tok, stream), pc.equal(consumer_tok, consumer)),
    )
    count = min(
        tokens_run, _leading(pc.and_(ours, pc.and_(_digits(seq_tok), _digits(pending_tok))))
    )
    if count == 0:
        return None
    seqs, pendings = _numbers(seq_tok[:count]), _numbers(pending_tok[:count])
    bodies, hdrs, totals = bodies[:count], hdrs[:count], totals[:count]
    messages = Pulled(
        pa.array(seqs, pa.int64()),
        pc.cast(subjects[:count], pa.string()),
        _payloads(data, starts, ends, every, bodies + hdrs, bodies + totals),
    )
    return messages, int(frame_ends[count - 1]), int(pendings[-1]), count


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
    (:func:`_scan`); anything else (a message cut by the end of the buffer, a status, a
    ``PING``) is read one line at a time."""
    conn = _Conn(address, timeout_s)
    ours = consumer.encode()
    out = _Collected()
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
                    burst = _scan(
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
