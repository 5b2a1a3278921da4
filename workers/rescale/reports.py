"""Which steps a progress report carries: those that changed since the last report the control
plane acknowledged (a delta), or every one (a full report).

A report is a notification (the runner's state files are the truth), so what matters is that the
control plane's view ends equal to the runner's whatever is lost on the way. The rule:

* the first report of an operation after the runner starts (a new ``session``) is full;
* a delta carries every step whose progress differs from the acknowledged view, on that view's
  ``version`` (``base_version``); a step in an ended phase (done, cancelled) that the view
  already holds so is not looked at again: an ended step does not change;
* a report that failed or was not acknowledged as sent (an exception, an older control plane
  answering nothing, a stale answer) makes the next one full: the control plane may hold it or
  not, and a full report is right either way;
* the control plane refuses a delta whose base it does not hold (``ReportFit.GAP``) and asks
  for a full one (``ProgressAck.full_wanted``), which the caller sends at once.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TypeVar

from workers.rescale.protocol import STEP_ENDED, OperationProgress, ProgressAck, StepProgress

T = TypeVar("T")


@dataclass
class AckedView:
    """What the control plane acknowledged of one operation: its report ``version`` and the
    steps as that report left them."""

    version: int
    steps: dict[int, StepProgress] = field(default_factory=dict)


class ProgressReports:
    """The reports of one runner (a ``session``) and what the control plane acknowledged of
    them. Thread-safe: exports report from threads of their own."""

    def __init__(self, session: str | None = None) -> None:
        self.session = session or uuid.uuid4().hex
        self._version = 0
        self._acked: dict[str, AckedView] = {}
        self._lock = threading.Lock()

    def report(
        self,
        head: OperationProgress,
        steps: Mapping[int, T],
        progress_of: Callable[[T], StepProgress],
        *,
        full: bool = False,
    ) -> OperationProgress:
        """``head`` (the operation's figures, without steps) with the steps to carry: of
        ``steps`` (step number -> the runner's step), those whose ``progress_of`` changed since
        the acknowledged view, or all of them (``full``, or no view acknowledged)."""
        with self._lock:
            self._version += 1
            acked = None if full else self._acked.get(head.operation_id)
            if acked is None:
                carried = [progress_of(steps[n]) for n in sorted(steps)]
                base = None
            else:
                carried = []
                for number, step in steps.items():
                    before = acked.steps.get(number)
                    if before is not None and before.phase in STEP_ENDED:
                        continue
                    now = progress_of(step)
                    if now != before:
                        carried.append(now)
                carried.sort(key=lambda s: s.step)
                base = acked.version
            return replace(
                head,
                steps=tuple(carried),
                session=self.session,
                version=self._version,
                base_version=base,
            )

    def answered(self, report: OperationProgress, ack: ProgressAck | None) -> bool:
        """Record the control plane's answer to ``report`` (None: it said nothing, or sending
        failed); True when it wants a full report now."""
        with self._lock:
            acked = self._acked.get(report.operation_id)
            if ack is None or not ack.acknowledges(report):
                if acked is None or acked.version < report.version:
                    self._acked.pop(report.operation_id, None)  # the next report is full
                return ack is not None and ack.full_wanted
            if acked is not None and acked.version > report.version:
                return False  # a later report's answer came first: it holds more
            if acked is None or not report.delta:
                acked = self._acked[report.operation_id] = AckedView(report.version)
            acked.version = report.version
            acked.steps.update((s.step, s) for s in report.steps)
            return False

    def forget(self, operation_id: str) -> None:
        """The operation's next report is full."""
        with self._lock:
            self._acked.pop(operation_id, None)

    def acked_version(self, operation_id: str) -> int | None:
        with self._lock:
            acked = self._acked.get(operation_id)
            return None if acked is None else acked.version
