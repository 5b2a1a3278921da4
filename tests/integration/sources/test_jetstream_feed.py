"""The feeder's live mode (``--rate``, ``--follow``), without Spark: the pacing and the record
ids are checked on their own (a fake clock, a fake JetStream), the continuation and the signals
against the real NATS server. Every stream is created for one test and deleted after it.

Tests assert behaviour, never time: a paced feeder is checked never to go faster than its rate
(a loaded machine only makes it slower), not to reach it."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from nats.js.errors import NotFoundError

from tests.integration.natsservice import (
    create_stream,
    publish,
    read_subject,
    stream_state,
    unique_name,
)
from workers.sources.generator import CHUNK, GeneratorConfig
from workers.sources.jetstream_feed import (
    MIN_SLEEP_S,
    MSG_ID,
    WINDOW,
    Pacer,
    _publish,
    feed,
    follow,
    generated,
    generated_from,
    generated_ids,
    generated_index,
    last_generated,
    main,
)

REPO = Path(__file__).resolve().parents[3]
CONFIG = GeneratorConfig(kind="events", key_space=50, pages=20, seed=11)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# --- pacing and ids, no server ---------------------------------------------------------------


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


def test_a_generated_id_names_its_config_and_index() -> None:
    ids = list(generated_ids(CONFIG, 5, 8))
    assert [generated_index(i, CONFIG) for i in ids] == [5, 6, 7]
    other = GeneratorConfig(kind="events", key_space=50, pages=20, seed=12)
    assert [generated_index(i, other) for i in ids] == [None] * 3
    for foreign in (None, "", "order-17", "gen-:1", f"{ids[0]}x", ids[0].replace(":", ":-")):
        assert generated_index(foreign, CONFIG) is None


def test_endless_records_are_the_generator_records_across_chunks() -> None:
    first = CHUNK - 3
    got = list(itertools.islice(generated_from(CONFIG, first), 10))
    assert [msg_id for msg_id, _ in got] == list(generated_ids(CONFIG, first, first + 10))
    assert [record for _, record in got] == list(generated(CONFIG, first, first + 10))


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
        _publish(js, "S", "s.events", items, Pacer(rate), stop, progress)  # type: ignore[arg-type]
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


# --- against the NATS server -----------------------------------------------------------------


def stop_after_first_window() -> tuple[threading.Event, Any]:
    stop = threading.Event()
    return stop, lambda sent, stored: stop.set()


def generated_indexes(url: str, stream: str, subject: str) -> list[int | None]:
    return [
        generated_index(m["headers"].get(MSG_ID), CONFIG)
        for m in read_subject(url, stream, subject)
    ]


@pytest.mark.integration
def test_a_following_feeder_continues_after_the_last_record_of_its_config(
    nats_service: str, stream_names: list[str]
) -> None:
    stream = unique_name()
    stream_names.append(stream)
    subject = f"{stream.lower()}.events"
    assert last_generated(nats_service, stream, subject, CONFIG) is None  # no stream yet
    announced: list[tuple[int, int | None]] = []

    stop, progress = stop_after_first_window()
    done = follow(
        nats_service,
        stream,
        subject,
        CONFIG,
        stop=stop,
        progress=progress,
        announce=lambda first, previous: announced.append((first, previous)),
    )
    assert (done.first, done.previous, done.sent, done.stored) == (0, None, WINDOW, WINDOW)
    assert announced == [(0, None)]
    assert last_generated(nats_service, stream, subject, CONFIG) == WINDOW - 1

    stop, progress = stop_after_first_window()
    again = follow(nats_service, stream, subject, CONFIG, stop=stop, progress=progress)
    assert (again.first, again.previous, again.stored) == (WINDOW, WINDOW - 1, WINDOW)
    assert again.next == 2 * WINDOW

    # each record once, in order, with the generator's content: as one feeder would have sent
    messages = read_subject(nats_service, stream, subject)
    assert generated_indexes(nats_service, stream, subject) == list(range(2 * WINDOW))
    assert [json.loads(m["data"]) for m in messages] == list(generated(CONFIG, 0, 2 * WINDOW))

    # --start later than the next record skips ahead; an earlier one is not repeated
    stop, progress = stop_after_first_window()
    later = follow(
        nats_service, stream, subject, CONFIG, stop=stop, progress=progress, start=10 * WINDOW
    )
    assert (later.first, later.previous) == (10 * WINDOW, 2 * WINDOW - 1)
    stop, progress = stop_after_first_window()
    earlier = follow(nats_service, stream, subject, CONFIG, stop=stop, progress=progress, start=1)
    assert earlier.first == 11 * WINDOW
    assert stream_state(nats_service, stream).messages == 4 * WINDOW


@pytest.mark.integration
def test_a_following_feeder_starts_at_start_after_another_publisher(
    nats_service: str, stream_names: list[str]
) -> None:
    stream = unique_name()
    stream_names.append(stream)
    subject = f"{stream.lower()}.events"
    create_stream(nats_service, stream, [subject])
    publish(nats_service, subject, [b'{"user": "u", "page": "p", "ts": 1, "bytes": 2}'])
    assert last_generated(nats_service, stream, subject, CONFIG) is None  # no Nats-Msg-Id
    other = GeneratorConfig(kind="events", key_space=50, pages=20, seed=99)
    feed(nats_service, stream, subject, generated(other, 0, 5), msg_ids=generated_ids(other, 0, 5))
    assert last_generated(nats_service, stream, subject, other) == 4
    assert last_generated(nats_service, stream, subject, CONFIG) is None  # another config's

    stop, progress = stop_after_first_window()
    done = follow(nats_service, stream, subject, CONFIG, stop=stop, progress=progress, start=7)
    assert (done.first, done.previous, done.sent) == (7, None, WINDOW)
    assert generated_indexes(nats_service, stream, subject)[6:] == list(range(7, 7 + WINDOW))


@pytest.mark.integration
def test_a_paced_feed_is_never_faster_than_its_rate(
    nats_service: str, stream_names: list[str]
) -> None:
    stream = unique_name()
    stream_names.append(stream)
    rate, n = 100.0, 30
    began = time.monotonic()
    stored = feed(
        nats_service,
        stream,
        f"{stream.lower()}.events",
        generated(CONFIG, 0, n),
        msg_ids=generated_ids(CONFIG, 0, n),
        rate=rate,
    )
    assert stored == n
    assert time.monotonic() - began >= (n - 1) / rate - MIN_SLEEP_S


# --- the command line, in processes of its own (signals) -------------------------------------


def start_feeder(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "workers.sources.jetstream_feed", *args],
        cwd=REPO,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_messages(
    url: str, stream: str, at_least: int, process: subprocess.Popen[str], timeout: float = 60
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        try:
            if stream_state(url, stream).messages >= at_least:
                return
        except NotFoundError:  # not created yet
            pass
        time.sleep(0.1)
    process.kill()
    pytest.fail(f"the feeder did not publish {at_least} records in {timeout} s")


def stop_feeder(process: subprocess.Popen[str], signum: int) -> tuple[int, str, str]:
    process.send_signal(signum)
    try:
        out, err = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    return process.returncode, out, err


@pytest.mark.integration
def test_the_cli_follows_until_a_signal_and_resumes_where_it_stopped(
    nats_service: str, stream_names: list[str]
) -> None:
    stream = unique_name()
    stream_names.append(stream)
    subject = f"{stream.lower()}.lines"
    args = ["--url", nats_service, "--stream", stream, "--kind", "lines", "--follow"]
    args += ["--rate", "400", "--report-every", "0.2"]

    process = start_feeder(*args, "--rows", "20")
    wait_for_messages(nats_service, stream, 100, process)
    code, out, err = stop_feeder(process, signal.SIGTERM)
    assert code == 0, err
    assert "Traceback" not in err
    assert f"following: publishing lines records on {stream}/{subject} from record 0" in err
    assert "20 published (--rows): following on" in err
    assert "records/s, next record" in err  # a progress line
    first_run = stream_state(nats_service, stream).messages
    assert f"{first_run:,} records stored on {stream}/{subject}" in out
    assert f"a following feeder continues at {first_run:,}); stopped by SIGTERM" in out

    process = start_feeder(*args)  # --rows is optional with --follow
    wait_for_messages(nats_service, stream, first_run + 100, process)
    code, out, err = stop_feeder(process, signal.SIGINT)
    assert code == 0, err
    assert "Traceback" not in err
    assert f"after record {first_run - 1:,} (the last this generator published there)" in err
    assert f"records {first_run:,} to " in out and "stopped by SIGINT" in out

    total = stream_state(nats_service, stream).messages
    lines = GeneratorConfig(kind="lines")
    messages = read_subject(nats_service, stream, subject)
    assert [generated_index(m["headers"][MSG_ID], lines) for m in messages] == list(range(total))
    assert [json.loads(m["data"]) for m in messages] == list(generated(lines, 0, total))


@pytest.mark.integration
def test_a_signal_ends_a_bounded_feed_cleanly_saying_how_to_finish_it(
    nats_service: str, stream_names: list[str]
) -> None:
    stream = unique_name()
    stream_names.append(stream)
    # not --follow: the feed ends at --rows; paced so that the signal comes first
    process = start_feeder(
        "--url", nats_service, "--stream", stream, "--rows", "100000", "--rate", "300"
    )
    wait_for_messages(nats_service, stream, 50, process)
    code, out, err = stop_feeder(process, signal.SIGINT)
    assert code == 128 + signal.SIGINT
    assert "Traceback" not in err
    stored = stream_state(nats_service, stream).messages
    assert f"stopped by SIGINT after {stored:,} of 100,000 records" in err
    assert f"--start {stored} --rows {100000 - stored} publishes the rest" in err
    assert f"{stored:,} records stored" in out


def test_the_cli_refuses_a_bad_rate_or_a_missing_rows(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, message in [
        (["--stream", "S"], "--rows is required (unless --follow)"),
        (["--stream", "S", "--rows", "1", "--rate", "0"], "must be a positive number"),
        (["--stream", "S", "--follow", "--rate", "fast"], "must be a positive number"),
        (["--stream", "S", "--follow", "--report-every", "-1"], "must be a positive number"),
    ]:
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 2
        assert message in capsys.readouterr().err
