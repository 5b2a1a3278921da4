"""Barriers on an idle stream: the runner forces an empty epoch when control work waits.

Structured Streaming runs a micro-batch only when a source reports an offset beyond the last one,
so a stream that receives nothing reaches no barrier, and everything applied at barriers (a
rescale's begin and steps, a cancel, a stop-start, a stop) would wait for the next record.
Operators scale in precisely when traffic is low, so control must not depend on records arriving.

The query therefore reads the pipeline's stream unioned with the runner's *control stream*
(:mod:`workers.sources.control`), whose offset advances on a *tick*: a new empty file in a
directory of the pipeline's (:class:`BarrierTicks`). The runner ticks between epochs when
control work waits: at once when one of its operations would move at the next barrier, and
after ``idle_s`` without an epoch when the control plane has a command not yet acknowledged
(asking it costs a query, so it is asked at most once per ``idle_s``). The control stream's next
``latestOffset`` then differs from its last committed one, and Spark runs a micro-batch in which
the pipeline's source may have no record: an *empty epoch*, with its own epoch number,
offset-log entry and recorded plan, like any other. The pipeline's source takes no part, so
this works with any source. Why it keeps every guarantee is argued in docs/rescale.md ("Idle
streams").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from workers.rescale.protocol import STEP_ENDED, STEP_HOLDING, StepPhase, Strategy
from workers.sources.control import ControlStream

if TYPE_CHECKING:
    from workers.rescale.operation import OperationState

log = logging.getLogger("workers.idle")


def awaits_barrier(operations: Iterable[OperationState]) -> bool:
    """Whether the next barrier would move one of these (unfinished) operations forward.

    Everything but a step still being exported changes at a barrier: a new operation records its
    first epoch, a pending step is collected (if fewer than ``steps_in_flight`` hold their
    vnodes), an exported one acquired, an acquired one dropped,
    a dropped one done; a stop-start runs entirely at one barrier; an operation whose steps are
    all over completes (or is cancelled) at the next one. A step in ``collecting`` waits for its
    export thread, which no barrier hastens; the thread's end makes it ``exported``, unless the
    operation is cancelled: then a barrier gives it back to its source.
    """
    for op in operations:
        if op.final:
            continue
        if op.strategy != Strategy.LIVE or op.begun_epoch is None:
            return True
        phases = {step.phase for step in op.steps.values()}
        # a pending step waiting for a free slot (steps_in_flight) moves only once one frees
        moving = phases - {StepPhase.COLLECTING, StepPhase.PENDING, *STEP_ENDED}
        # a cancel ends pending steps and gives held ones back to their source at a barrier
        cancels = op.cancel_requested and bool(phases & {StepPhase.PENDING, *STEP_HOLDING})
        if moving or op.startable() or cancels:
            return True
        if not phases - STEP_ENDED and (op.finish_requested or op.cancel_requested):
            return True
    return False


class BarrierTicks:
    """Forces a barrier when control work waits between epochs. Called from the runner's watch
    loop (one thread); the control stream only reads the counter.

    A tick is never repeated before Spark has started an epoch for it, unless ``idle_s`` passed
    (Spark's trigger waits for its interval; the source may have read the counter just before).
    Ticks never add epochs to a stream with records: Spark's trigger paces epochs either way.
    """

    def __init__(
        self,
        control: ControlStream,
        idle_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.control = control
        self.idle_s = idle_s
        self._clock = clock
        self._last_epoch = clock()  # the last epoch's start or end
        self._last_asked = clock()  # the last question to the control plane
        self._last_tick: float | None = None  # a tick no epoch has started for yet
        self.forced = 0  # ticks this runner made

    def epoch_started(self) -> None:
        self._last_epoch = self._clock()
        self._last_tick = None

    def since_epoch_s(self) -> float:
        """Seconds since the last epoch started or ended."""
        return self._clock() - self._last_epoch

    def epoch_ended(self) -> None:
        self._last_epoch = self._clock()

    def poll(
        self,
        in_epoch: bool,
        operations_wait: Callable[[], bool],
        commands_wait: Callable[[], bool],
    ) -> bool:
        """Tick if control work waits; returns whether it ticked.

        ``operations_wait`` is local and cheap (the runner's own operations); ``commands_wait``
        may query the control plane, and is asked only after ``idle_s`` without an epoch.
        """
        now = self._clock()
        if in_epoch or (self._last_tick is not None and now - self._last_tick < self.idle_s):
            return False
        try:
            waiting = operations_wait()
            if not waiting and min(now - self._last_epoch, now - self._last_asked) >= self.idle_s:
                self._last_asked = now
                waiting = commands_wait()
        except Exception:  # the control plane is unreachable: a later poll asks again
            log.warning("could not tell whether control work waits", exc_info=True)
            return False
        if not waiting:
            return False
        try:
            self.tick()
        except OSError as exc:  # STATE_DIR full or unwritable: no epoch could commit anyway
            log.warning("could not force a barrier (%s); the next poll tries again", exc)
            return False
        return True

    def tick(self) -> int:
        """Tick the control stream durably; returns how many ticks there have been."""
        value = self.control.tick()
        again = self._last_tick is not None  # Spark has not started an epoch for the last one
        self._last_tick = self._clock()
        self.forced += 1
        log.log(
            logging.DEBUG if again else logging.INFO,
            "control work waits between epochs: forcing a barrier (tick %d)",
            value,
        )
        return value


class NoDataEpochs:
    """When a processor needs an epoch with no records: Spark's no-data micro-batch.

    Spark runs one after a batch when a ``transformWithState`` operator asks for it (on by
    default, ``spark.sql.streaming.noDataMicroBatches.enabled``): in ``EventTime``, when the
    watermark has moved past the one the last batch ran at (the timers it made due fire there,
    on an idle stream too); in ``ProcessingTime``, always, so an idle Spark query runs batches
    back to back. Rescaler runs one in the first case, once per advance of the watermark, and in
    the second only once the earliest processing-time timer any PU reported is due, at most one
    per ``min_interval_s``, so an idle pipeline does not spin. On a stream with records, the tick
    this asks for adds no epoch: the next epoch comes with them.
    """

    def __init__(
        self,
        time_modes: Iterable[str],
        watermark_advanced: Callable[[], bool],
        min_interval_s: float,
        *,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        modes = set(time_modes)
        self.event_time = "eventtime" in modes
        self.processing_time = "processingtime" in modes
        self._watermark_advanced = watermark_advanced
        self.min_interval_s = min_interval_s
        self._now_ms = now_ms
        # unknown until the first epoch's reports: a restarted runner's first tick finds out
        self.next_timer_ms: int | None = 0 if self.processing_time else None

    def epoch_committed(self, stats: Iterable[dict[str, Any]]) -> None:
        """Every PU's report of the epoch: the earliest processing-time timer among them."""
        found = [s["next_timer_ms"] for s in stats if s.get("next_timer_ms") is not None]
        self.next_timer_ms = min(found) if found else None

    def due(self, idle_s: float) -> bool:
        """Whether a no-data epoch is due, ``idle_s`` after the last epoch."""
        if self.event_time and self._watermark_advanced():
            return True
        return (
            self.processing_time
            and self.next_timer_ms is not None
            and self.next_timer_ms <= self._now_ms()
            and idle_s >= self.min_interval_s
        )
