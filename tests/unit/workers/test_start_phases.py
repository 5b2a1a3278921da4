"""A runner's start, phase by phase (workers/start_phases.py): what its log and heartbeat say."""

from __future__ import annotations

import logging
import threading

import pytest

from workers.start_phases import Background, StartPhases


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_phases_are_timed_in_order_and_the_running_one_is_shown() -> None:
    clock = Clock()
    phases = StartPhases(clock)
    with phases.phase("spark"):
        clock.now += 3.5
    began = phases.begin("store check")
    clock.now += 2.0

    said = phases.to_json()

    assert said["phases"] == [{"name": "spark", "began_s": 0.0, "took_s": 3.5}]
    assert said["running"] == [{"name": "store check", "for_s": 2.0}]
    assert said["elapsed_s"] == 5.5 and said["first_epoch_s"] is None
    phases.end("store check", began)
    assert [p["name"] for p in phases.to_json()["phases"]] == ["spark", "store check"]


def test_a_phase_that_fails_is_still_recorded() -> None:
    clock = Clock()
    phases = StartPhases(clock)
    with pytest.raises(ValueError), phases.phase("checks"):
        clock.now += 1.0
        raise ValueError("refused")
    assert phases.to_json()["phases"][0]["took_s"] == 1.0
    assert phases.to_json()["running"] == []


def test_the_first_committed_epoch_ends_the_start_once(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    phases = StartPhases(clock)
    with phases.phase("spark"):
        clock.now += 4.0
    clock.now += 6.0
    with caplog.at_level(logging.INFO, "workers.runner"):
        phases.first_epoch_committed(0)
        clock.now += 9.0
        phases.first_epoch_committed(1)  # later epochs are not the start's

    assert phases.finished_s == 10.0
    assert phases.to_json()["elapsed_s"] == 10.0  # the start's, not the runner's age
    said = [r.getMessage() for r in caplog.records if "first committed" in r.getMessage()]
    assert said == ["start: first committed epoch (0) 10.00 s after the start (spark 4.00 s)"]


def test_background_work_runs_beside_the_caller_and_hands_back_its_result_or_error() -> None:
    phases = StartPhases()
    release = threading.Event()

    def work() -> int:
        release.wait(5)
        return 42

    job = Background(phases, "import check", work)
    assert [p["name"] for p in phases.to_json()["running"]] == ["import check"]
    release.set()
    assert job.result() == 42
    assert [p["name"] for p in phases.to_json()["phases"]] == ["import check"]

    def broken() -> None:
        raise RuntimeError("module missing")

    failed = Background(phases, "again", broken)
    with pytest.raises(RuntimeError, match="module missing"):
        failed.result()


def test_the_last_stretch_runs_one_phase_after_the_other_until_the_first_epoch() -> None:
    clock = Clock()
    phases = StartPhases(clock)
    phases.then("query start")
    clock.now += 2.0
    assert phases.current == "query start"
    phases.then("first epoch")  # its first batch: the query's start is over
    clock.now += 1.5
    phases.first_epoch_committed(0)
    assert phases.current is None
    assert [(p["name"], p["took_s"]) for p in phases.to_json()["phases"]] == [
        ("query start", 2.0),
        ("first epoch", 1.5),
    ]
