"""The feeder's live mode (``--rate``, ``--follow``), without Spark, against the real NATS
server: the continuation and the signals (the pacing and the record ids, on their own, are
tests/unit/workers/sources/test_jetstream_publish.py and test_jetstream_generated.py). Every
stream is created for one test and deleted after it.

Tests assert behaviour, never time: a paced feeder is checked never to go faster than its rate
(a loaded machine only makes it slower), not to reach it."""

from __future__ import annotations

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
from workers.sources.generator import GeneratorConfig
from workers.sources.jetstream_feed import main
from workers.sources.jetstream_generated import (
    follow,
    generated,
    generated_ids,
    generated_index,
    last_generated,
)
from workers.sources.jetstream_publish import MIN_SLEEP_S, MSG_ID, WINDOW, feed

REPO = Path(__file__).resolve().parents[3]
CONFIG = GeneratorConfig(kind="events", key_space=50, pages=20, seed=11)


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
