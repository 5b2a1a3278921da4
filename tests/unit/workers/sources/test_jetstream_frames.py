"""The JetStream socket reader's burst parser: whole frames parsed with array operations must be
exactly the frames a one-at-a-time reading finds, whatever the payloads hold and wherever the
buffer ends."""

from __future__ import annotations

import random

import pytest

from workers.sources.jetstream_frames import Pulled, scan_burst

STREAM, CONSUMER = b"S", b"C"
HEADERS = b"NATS/1.0\r\nNats-Msg-Id: gen-1:0\r\n\r\n"
LOOKALIKE = b"HMSG s.a 1 $JS.ACK.S.C.1.99.99.1700000000.0 0 3"


def frame(
    seq: int,
    payload: bytes,
    *,
    headers: bytes | None = HEADERS,
    subject: bytes = b"s.a",
    consumer: bytes = CONSUMER,
    pending: int = 0,
) -> bytes:
    reply = b"$JS.ACK.%s.%s.1.%d.%d.1700000000.%d" % (STREAM, consumer, seq, seq, pending)
    if headers is None:
        line = b"MSG %s 1 %s %d" % (subject, reply, len(payload))
        return line + b"\r\n" + payload + b"\r\n"
    line = b"HMSG %s 1 %s %d %d" % (subject, reply, len(headers), len(headers) + len(payload))
    return line + b"\r\n" + headers + payload + b"\r\n"


def read_all(window: bytes) -> tuple[list[tuple[int, str, bytes]], int]:
    """What the reader takes from ``window``: bursts where scan_burst finds them, one frame at a time
    (by the lengths, as the reader's single path does) elsewhere; and the bursts' message count."""
    out: list[tuple[int, str, bytes]] = []
    pos = in_bursts = 0
    while pos < len(window):
        burst = scan_burst(window[pos:], STREAM, CONSUMER, 10**9)
        if burst is not None:
            messages, used, _, count = burst
            assert used > 0 and count == len(messages)
            out += list(rows(messages))
            pos += used
            in_bursts += count
            continue
        end = window.index(b"\r\n", pos)
        parts = window[pos:end].split(b" ")
        if parts[0] in (b"HMSG", b"MSG"):
            total = int(parts[-1])
            hdr = int(parts[4]) if parts[0] == b"HMSG" else 0
            body = end + 2
            seq = int(parts[3].split(b".")[5])
            out.append((seq, parts[1].decode(), window[body + hdr : body + total]))
            pos = body + total + 2
        else:  # PING, +OK: a line of its own
            pos = end + 2
    return out, in_bursts


def rows(messages: Pulled) -> list[tuple[int, str, bytes]]:
    return list(
        zip(
            messages.seqs.to_pylist(),
            messages.subjects.to_pylist(),
            messages.payloads.to_pylist(),
            strict=True,
        )
    )


def test_plain_frames_are_one_burst() -> None:
    payloads = [b'{"line":"w%05d"}' % i for i in range(500)]
    window = b"".join(frame(i + 1, p, pending=499 - i) for i, p in enumerate(payloads))
    burst = scan_burst(window, STREAM, CONSUMER, 10**9)
    assert burst is not None
    messages, used, pending, count = burst
    assert (used, pending, count) == (len(window), 0, 500)
    assert rows(messages) == [(i + 1, "s.a", p) for i, p in enumerate(payloads)]


def test_frames_without_headers_and_mixed() -> None:
    window = b"".join(
        frame(i + 1, b"p%d" % i, headers=None if i % 3 else HEADERS) for i in range(90)
    )
    got, in_bursts = read_all(window)
    assert got == [(i + 1, "s.a", b"p%d" % i) for i in range(90)]
    assert in_bursts == 90


def test_at_most_the_messages_asked_for() -> None:
    window = b"".join(frame(i + 1, b"x", pending=9 - i) for i in range(10))
    burst = scan_burst(window, STREAM, CONSUMER, 4)
    assert burst is not None
    assert burst[3] == 4 and burst[2] == 6
    assert burst[1] == len(b"".join(frame(i + 1, b"x", pending=9 - i) for i in range(4)))


@pytest.mark.parametrize(
    "odd",
    [
        b"",  # an empty payload
        b"a\r\nb",  # CRLF inside
        b"\r\n" + LOOKALIKE + b"\r\nabc",  # a line that looks like a whole frame
        LOOKALIKE,
        b"x\r\n" + LOOKALIKE.replace(b"HMSG", b"MSG").replace(b" 0 3", b" 3") + b"\r\n",
        b"\xff\xfe\x00\r",  # not UTF-8, a lone CR, a NUL
        b"\r\n\r\n",
    ],
)
def test_odd_payloads_are_read_exactly(odd: bytes) -> None:
    payloads = [b"p%d" % i for i in range(40)]
    payloads[7] = payloads[31] = odd
    window = b"".join(frame(i + 1, p) for i, p in enumerate(payloads))
    got, _ = read_all(window)
    assert got == [(i + 1, "s.a", p) for i, p in enumerate(payloads)]


def test_other_lines_and_other_consumers_end_a_burst() -> None:
    window = (
        frame(1, b"a")
        + b"PING\r\n"
        + frame(2, b"b")
        + frame(3, b"c", consumer=b"OTHER")
        + frame(4, b"d")
    )
    burst = scan_burst(window, STREAM, CONSUMER, 10**9)
    assert burst is not None and rows(burst[0]) == [(1, "s.a", b"a")]
    after_ping = window.index(b"HMSG", window.index(b"PING"))
    second = scan_burst(window[after_ping:], STREAM, CONSUMER, 10**9)
    assert second is not None and rows(second[0]) == [(2, "s.a", b"b")]
    assert scan_burst(window[after_ping + second[1] :], STREAM, CONSUMER, 10**9) is None


def test_a_status_frame_is_not_a_message() -> None:
    status = b"HMSG _INBOX.x 1 28 28\r\nNATS/1.0 408 Request Timeout\r\n\r\n\r\n"
    burst = scan_burst(frame(1, b"a") + status, STREAM, CONSUMER, 10**9)
    assert burst is not None and burst[3] == 1
    assert scan_burst(status, STREAM, CONSUMER, 10**9) is None


def test_a_window_cut_anywhere_gives_only_whole_frames() -> None:
    rng = random.Random(7)
    payloads = [
        rng.choice([b"", b"a\r\nb", LOOKALIKE, b'{"i":%d}' % i, b"\r\n" + LOOKALIKE + b"\r\n"])
        for i in range(12)
    ]
    frames = [frame(i + 1, p, headers=HEADERS if i % 2 else None) for i, p in enumerate(payloads)]
    window = b"".join(frames)
    bounds = {sum(len(f) for f in frames[:k]): k for k in range(len(frames) + 1)}
    for cut in range(len(window) + 1):
        burst = scan_burst(window[:cut], STREAM, CONSUMER, 10**9)
        if burst is None:
            continue
        messages, used, _, count = burst
        assert bounds.get(used) == count, (cut, used, count)
        assert rows(messages) == [(i + 1, "s.a", payloads[i]) for i in range(count)]
