"""The runner's heartbeat: what it says of itself every ``heartbeat_interval_s``, from the first
moment of its start (so ``/healthz`` can say which phase a starting runner waits in)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from workers.control import ControlInterface, ControlUnavailable, Heartbeat

log = logging.getLogger("workers.runner")


class HeartbeatLoop:
    """Beats on a thread of its own until ``stop`` is set; ``beat()`` also beats at once."""

    def __init__(
        self,
        control: ControlInterface,
        heartbeat: Callable[[], Heartbeat],
        interval_s: float,
        stop: threading.Event,
    ) -> None:
        self.control = control
        self.heartbeat = heartbeat
        self.interval_s = interval_s
        self.stop = stop

    def start(self) -> None:
        threading.Thread(target=self._loop, name="heartbeat", daemon=True).start()

    def _loop(self) -> None:
        while not self.stop.wait(self.interval_s):
            self.beat()

    def beat(self) -> None:
        try:
            self.control.heartbeat(self.heartbeat())
        except ControlUnavailable as exc:  # waited out by the epochs; the next beat replaces it
            log.warning("heartbeat missed: %s", exc)
        except Exception:  # a missed heartbeat must never kill the pipeline
            log.exception("heartbeat failed")
