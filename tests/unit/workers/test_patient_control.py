"""The runner waits out an unreachable control plane (workers.control.PatientControl)."""

from __future__ import annotations

from typing import Any

import pytest

from workers.control import Command, ControlUnavailable, Heartbeat, PatientControl


class Flaky:
    """A control plane that is down for its first ``down`` calls of each kind."""

    def __init__(self, down: int) -> None:
        self.down = down
        self.calls: dict[str, int] = {}

    def _hit(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        if self.calls[name] <= self.down:
            raise ControlUnavailable("connection refused")

    def poll_commands(self, pipeline: str) -> list[Command]:
        self._hit("poll")
        return [Command(id=1, kind="stop")]

    def heartbeat(self, beat: Heartbeat) -> None:
        self._hit("heartbeat")

    def report_progress(self, pipeline: str, progress: dict[str, Any]) -> None:
        self._hit("progress")
        if progress.get("broken"):
            raise ValueError("not an outage")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def patient(inner: Any, patience_s: float = 60.0) -> tuple[PatientControl, Clock]:
    clock = Clock()
    return PatientControl(
        inner, patience_s=patience_s, sleep=clock.sleep, clock=lambda: clock.now
    ), clock


def test_a_call_is_repeated_with_backoff_until_the_control_plane_answers() -> None:
    inner = Flaky(down=4)
    control, clock = patient(inner)
    assert control.poll_commands("p") == [Command(id=1, kind="stop")]
    assert inner.calls["poll"] == 5
    assert clock.slept == [0.2, 0.4, 0.8, 1.6]


def test_an_outage_longer_than_the_patience_ends_in_a_clear_error() -> None:
    control, clock = patient(Flaky(down=10_000), patience_s=30.0)
    with pytest.raises(ControlUnavailable, match=r"unreachable for 30s.*DATABASE_URL"):
        control.poll_commands("p")
    assert clock.now == pytest.approx(30.0)
    assert max(clock.slept) == 5.0


def test_other_errors_are_not_outages_and_heartbeats_are_not_repeated() -> None:
    inner = Flaky(down=0)
    control, clock = patient(inner)
    with pytest.raises(ValueError, match="not an outage"):
        control.report_progress("p", {"broken": True})
    assert inner.calls["progress"] == 1 and clock.slept == []
    down = Flaky(down=1)
    control, clock = patient(down)
    with pytest.raises(ControlUnavailable):
        control.heartbeat(Heartbeat("p", 3, "running", {}))
    assert down.calls["heartbeat"] == 1 and clock.slept == []
