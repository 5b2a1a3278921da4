"""Where a runner's start goes, phase by phase, until its first committed epoch.

A start (cold, or after a crash or ``kill -9``) is downtime: an operator must see what it waits
for. Each phase is logged when it ends and the whole record rides on every heartbeat, so
``/healthz`` shows the phase running now and how long each finished one took.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("workers.runner")


@dataclass(frozen=True)
class Phase:
    name: str
    began_s: float  # since the start began
    took_s: float


class StartPhases:
    """The phases of one start, in order; thread-safe (phases may run side by side)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._began = clock()
        self._lock = threading.Lock()
        self._done: list[Phase] = []
        self._running: dict[str, float] = {}
        # the phase of the start's last stretch (the query's start, then its first epoch), which
        # each next one ends
        self._current: tuple[str, float] | None = None
        self.finished_s: float | None = None  # to the first committed epoch

    def elapsed(self) -> float:
        return self._clock() - self._began

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the block as phase ``name``; it is logged when it ends, even by an error."""
        began = self.begin(name)
        try:
            yield
        finally:
            self.end(name, began)

    def begin(self, name: str) -> float:
        began = self.elapsed()
        with self._lock:
            self._running[name] = began
        return began

    def end(self, name: str, began: float) -> None:
        took = self.elapsed() - began
        with self._lock:
            self._running.pop(name, None)
            self._done.append(Phase(name, round(began, 3), round(took, 3)))
        log.info("start: %s took %.2f s (%.2f s since the start)", name, took, began + took)

    @property
    def current(self) -> str | None:
        """The phase of the last stretch running now (None: none began, or the start is over)."""
        return None if self._current is None else self._current[0]

    def then(self, name: str | None) -> None:
        """End the last stretch's phase running now, if any, and begin ``name`` (None: none)."""
        if self._current is not None:
            self.end(*self._current)
        self._current = None if name is None else (name, self.begin(name))

    def first_epoch_committed(self, epoch: int) -> None:
        """The start is over: the runner committed ``epoch``; logged once with the breakdown."""
        if self.finished_s is not None:
            return
        self.then(None)
        self.finished_s = round(self.elapsed(), 3)
        with self._lock:
            parts = ", ".join(f"{p.name} {p.took_s:.2f}" for p in self._done)
        log.info(
            "start: first committed epoch (%d) %.2f s after the start (%s s)",
            epoch,
            self.finished_s,
            parts,
        )

    def to_json(self) -> dict[str, Any]:
        """What the heartbeat carries: the phases finished and running, and the start's total
        once its first epoch is committed."""
        with self._lock:
            done = [{"name": p.name, "began_s": p.began_s, "took_s": p.took_s} for p in self._done]
            running = sorted(self._running.items(), key=lambda item: item[1])
        now = self.elapsed()
        return {
            "phases": done,
            "running": [{"name": n, "for_s": round(now - b, 3)} for n, b in running],
            "elapsed_s": round(now, 3) if self.finished_s is None else self.finished_s,
            "first_epoch_s": self.finished_s,
        }


class Background:
    """One phase of the start run in a thread beside the others (the JVM's launch beside the
    checks that need no Spark, the executors' warm-up beside the driver's planning); ``result``
    joins it and raises what it raised."""

    def __init__(self, phases: StartPhases, name: str, work: Callable[[], Any]) -> None:
        self._work = work
        self._phases = phases
        self._name = name
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"start-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            with self._phases.phase(self._name):
                self._value = self._work()
        except BaseException as exc:  # handed to whoever joins
            self._error = exc

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value
