"""The epochs' clock: the processing time and event-time watermark each epoch runs at.

Spark gives a stateful processor a batch timestamp and a watermark per micro-batch; Rescaler
gives the same per epoch (:class:`~workers.pipeline.placement.EpochClock`, recorded in the epoch
plan so that a re-run sees the same times). The watermark follows Spark's rule: the largest event
time seen in earlier epochs minus the pipeline's delay, never going back, starting at 0; rows
are late against the previous epoch's watermark (Spark's watermark for late events). Both are
kept in a small file beside the placement, written once per committed epoch from that epoch's
plan and reports, so a restarted runner resumes them exactly.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workers.pipeline.placement import EpochClock, EpochPlan, write_json_atomic

WATERMARK_FILE = "watermark.json"


class Watermark:
    """Plans each epoch's clock and advances the watermark when an epoch commits."""

    def __init__(
        self,
        path: Path,
        delay_ms: int,
        *,
        event_time: bool = True,
        now_ms: Callable[[], int] | None = None,
    ) -> None:
        self.path = Path(path)
        self.delay_ms = delay_ms
        self.event_time = event_time  # without event time there is no watermark to keep
        self._now_ms = now_ms or (lambda: int(time.time() * 1000))
        saved: dict[str, Any] = {}
        if self.path.exists():
            saved = json.loads(self.path.read_text("utf-8"))
        self.watermark_ms = int(saved.get("watermark_ms", 0))
        self.late_ms = int(saved.get("late_ms", 0))
        self.batch_ms = int(saved.get("batch_ms", 0))

    def clock(self, epoch: int) -> EpochClock:
        """The clock of a new epoch (a re-run reuses its recorded plan's)."""
        # strictly increasing: held rows are replayed grouped by their epoch's clock
        self.batch_ms = max(self.batch_ms + 1, self._now_ms())
        return EpochClock(self.batch_ms, self.watermark_ms, self.late_ms)

    @property
    def advanced(self) -> bool:
        """Whether the next epoch's watermark is past the last one's: Spark then runs a no-data
        batch for an event-time processor (its timers due at the new watermark fire there)."""
        return self.event_time and self.watermark_ms > self.late_ms

    def committed(self, plan: EpochPlan, stats: list[dict[str, Any]]) -> None:
        """Advance from the epoch's own plan and reports: repeating it changes nothing."""
        seen = [s["max_event_ms"] for s in stats if s.get("max_event_ms") is not None]
        watermark = plan.clock.watermark_ms
        if seen:
            watermark = max(watermark, max(seen) - self.delay_ms)
        self.watermark_ms = max(self.watermark_ms, watermark)
        self.late_ms = max(self.late_ms, plan.clock.watermark_ms)
        self.batch_ms = max(self.batch_ms, plan.clock.batch_ms)
        if not self.event_time:
            return
        write_json_atomic(
            self.path,
            {
                "epoch": plan.epoch,
                "watermark_ms": self.watermark_ms,
                "late_ms": self.late_ms,
                "batch_ms": self.batch_ms,
            },
        )
