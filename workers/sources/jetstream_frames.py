"""A JetStream pull's frames as Arrow columns: :class:`Pulled`, and the burst parser.

Parsing NATS frames (``HMSG subject sid reply hdr_len total_len\\r\\n<headers><payload>\\r\\n``)
one by one in Python cost about 8 µs a message. So the whole frames already in the socket
reader's buffer (:mod:`workers.sources.jetstream_wire`) are parsed as one **burst** with NumPy
and Arrow compute (:func:`scan_burst`): find every CRLF, split the lines starting
``HMSG``/``MSG`` at their spaces and the reply subjects at their dots, check each frame's
declared length against where the next one starts, and take the payloads as whole lines (or copy
them out when they hold CRLF). About 2 µs a message; the result is Arrow columns
(:class:`Pulled`), which the source's JSON reader takes as they are. Anything a burst does not
take (a frame cut by the end of the buffer, a status, ``PING``, a payload that happens to hold a
line shaped like a frame) the reader reads one line at a time; :class:`Collected` keeps both
kinds of messages in delivery order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


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


class Collected:
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


def scan_burst(
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
