"""Publishing to a JetStream stream (workers/sources/jetstream_publish.py), without a server:
the pacing on a fake clock, the publisher against a fake JetStream.

Tests assert behaviour, never time: a paced publisher is checked never to go faster than its
rate (a loaded machine only makes it slower), not to reach it."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from typing import Any

import pytest

from workers.sources.generator import GeneratorConfig
from workers.sources.jetstream_generated import generated_from, generated_ids
from workers.sources.jetstream_publish import MIN_SLEEP_S, MSG_ID, WINDOW, Pacer, publish_paced

CONFIG = GeneratorConfig(kind="events", key_space=50, pages=20, seed=11)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_unpaced_feeder_never_waits() -> None:
    pacer = Pacer(None, clock=FakeClock())
    assert [pacer.delay(n) for n in range(5)] == [0.0] * 5


def test_records_are_due_rate_per_second_from_the_first() -> None:
    clock = FakeClock()
    pacer = Pacer(4.0, clock=clock)
    assert pacer.delay(0) == 0.0  # the first record goes at once
    assert pacer.delay(1) == pytest.approx(0.25)
    assert pacer.delay(4) == pytest.approx(1.0)
    clock.now += 0.25
    assert pacer.delay(1) == 0.0
    assert pacer.delay(2) == pytest.approx(0.25)
    clock.now += 10.0  # due times are absolute: time spent elsewhere is not added to them
    clock.now -= 9.5
    assert pacer.delay(3) == 0.0  # 0.75 s after the first record is exactly record 3's time


def test_a_feeder_a_little_behind_catches_up_but_one_far_behind_does_not_burst() -> None:
    clock = FakeClock()
    pacer = Pacer(10.0, clock=clock, max_lag_s=1.0)
    assert pacer.delay(0) == 0.0
    clock.now += 0.5  # 0.5 s late for record 1 (due at 0.1 s): send the backlog at once
    assert [pacer.delay(n) for n in (1, 2, 3, 4, 5)] == [0.0] * 5
    assert pacer.delay(6) == pytest.approx(0.1)
    clock.now += 5.0  # suspended: 5 s behind
    assert pacer.delay(6) == 0.0  # starts over from now...
    assert pacer.delay(7) == pytest.approx(0.1)  # ...at the rate, not 50 records at once
    assert pacer.delay(16) == pytest.approx(1.0)


@pytest.mark.parametrize("rate", [0.0, -1.0, float("inf"), float("nan")])
def test_a_rate_must_be_a_positive_number(rate: float) -> None:
    with pytest.raises(ValueError, match="positive number"):
        Pacer(rate)


class FakeAck:
    duplicate = False


class FakeJetStream:
    """publish_async as nats-py's: a future per message, resolved by the server later (here: at
    once). Records the time of each publish and how many acks were awaited."""

    def __init__(self) -> None:
        self.sent: list[tuple[float, bytes, dict[str, str] | None]] = []

    async def publish_async(
        self, subject: str, payload: bytes, stream: str, headers: dict[str, str] | None
    ) -> asyncio.Future[Any]:
        self.sent.append((time.monotonic(), payload, headers))
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        future.set_result(FakeAck())
        return future


def run_publish(
    items: Any, rate: float | None, stop: threading.Event | None, progress: Any = None
) -> tuple[FakeJetStream, int, int]:
    js = FakeJetStream()
    sent, stored = asyncio.run(
        publish_paced(js, "S", "s.events", items, Pacer(rate), stop, progress)  # type: ignore[arg-type]
    )
    return js, sent, stored


def test_a_paced_publisher_never_runs_ahead_of_its_rate() -> None:
    rate, n = 200.0, 40
    began = time.monotonic()  # before the pacer's first record
    js, sent, stored = run_publish(itertools.islice(generated_from(CONFIG, 0), n), rate, None)
    assert sent == stored == n
    for k, (at, _, _) in enumerate(js.sent):
        # record k is due k / rate after the first; bursts start at most MIN_SLEEP_S early
        assert at - began >= k / rate - MIN_SLEEP_S, f"record {k} sent too early"
    assert [h[MSG_ID] for _, _, h in js.sent if h] == list(generated_ids(CONFIG, 0, n))


def test_a_stop_ends_the_publisher_after_the_acks_in_flight() -> None:
    stop = threading.Event()
    calls: list[tuple[int, int]] = []

    def progress(sent: int, stored: int) -> None:
        calls.append((sent, stored))
        stop.set()  # at the first window's acks

    js, sent, stored = run_publish(generated_from(CONFIG, 0), None, stop, progress)
    assert sent == stored == WINDOW == len(js.sent)  # endless records, ended by the stop
    assert calls[-1] == (WINDOW, WINDOW)


def test_a_paced_wait_ends_at_a_stop() -> None:
    stop = threading.Event()

    def progress(sent: int, stored: int) -> None:  # settled before the wait for record 1
        if not stop.is_set():
            threading.Timer(0.2, stop.set).start()

    began = time.monotonic()
    _, sent, stored = run_publish(generated_from(CONFIG, 0), 0.01, stop, progress)
    assert sent == stored == 1
    # record 1 was due 100 s after record 0: the wait looked at the stop while it slept
    assert time.monotonic() - began < 50
