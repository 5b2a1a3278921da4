"""The runner's side of a rescale: epoch-aligned ICADD, and stop-start through recovery partitions.

At every epoch barrier the runner asks :meth:`RescaleExecutor.plan` for the epoch's placements
and per-PU actions. The executor composes the parts, which share one :class:`OperationLedger`:

* :mod:`~workers.rescale.commands` — begin, step, cancel and finish commands;
* :mod:`~workers.rescale.live` — the live protocol: moving steps forward at each barrier and
  deriving the epoch's actions from the epochs they recorded;
* :mod:`~workers.rescale.exports` — exports of collecting steps, as Spark tasks beside the epochs;
* :mod:`~workers.rescale.stop_start` — stop-start through recovery partitions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workers.control import Command
from workers.pipeline.placement import FragmentActions, VnodeMapping
from workers.rescale.commands import CommandHandler, CommandRefused
from workers.rescale.exports import Exports
from workers.rescale.ledger import OperationLedger, Reporter, mark_settled, settled_operations
from workers.rescale.live import LiveProtocol
from workers.rescale.operation import OperationState
from workers.rescale.protocol import Strategy
from workers.rescale.stop_start import StopStart

__all__ = ["CommandRefused", "HoldQueueBounds", "RescaleExecutor"]

log = logging.getLogger("workers.rescale")


@dataclass(frozen=True)
class HoldQueueBounds:
    """Bytes a collecting step's hold queue, and a target PU's hold queues together, may reach
    before the next epoch waits for the step's export (docs/rescale.md, "Bounded hold queues")."""

    step_bytes: int
    pu_bytes: int


class RescaleExecutor:
    def __init__(
        self,
        pipeline_dir: Path,
        placements: dict[str, VnodeMapping],
        *,
        backend: str,
        worker_pus: set[int],
        report: Reporter | None = None,
        background_exports: bool = True,
        spark: Any = None,
        hold_queue_bounds: HoldQueueBounds | None = None,
        should_stop: Callable[[], bool] = lambda: False,
        durable: str | None = None,
        homes: Callable[[], dict[int, str]] | None = None,
    ) -> None:
        self.ledger = OperationLedger(pipeline_dir, placements, report, durable=durable)
        self.commands = CommandHandler(self.ledger, worker_pus)
        self.live = LiveProtocol(self.ledger)
        self.exports = Exports(
            self.ledger, backend, spark=spark, background=background_exports, homes=homes
        )
        # stop-start's snapshot, clear and restore are Spark jobs (None: in this process)
        self.stop_start = StopStart(self.ledger, backend, spark, homes)
        self.hold_queue_bounds = hold_queue_bounds  # None: unbounded
        self._should_stop = should_stop
        # a crash between saving an operation and saving the placement: apply it again
        with self.ledger.lock:
            self._apply_placements()

    # -- queries -----------------------------------------------------------------------------
    @property
    def ops(self) -> dict[str, OperationState]:
        return self.ledger.ops

    def set_worker_pus(self, pus: set[int]) -> None:
        """The PUs that may be given vnodes from now on (workers joined, left or drained)."""
        self.commands.worker_pus = set(pus)

    def running(self) -> list[OperationState]:
        return self.ledger.running()

    def busy_fragments(self) -> dict[str, str]:
        return self.ledger.busy_fragments()

    # -- commands ----------------------------------------------------------------------------
    def handle(self, command: Command) -> str:
        """Apply a rescale command (idempotent); returns a detail line or raises CommandRefused."""
        return self.commands.handle(command)

    # -- the barrier ---------------------------------------------------------------------------
    def plan(self, epoch: int, *, hold_queues_waited: bool = False) -> dict[str, FragmentActions]:
        """Move operations forward for ``epoch`` and derive its actions; updates placements.

        First, a step whose hold queue reached its bound keeps the epoch waiting here, and
        with it the source, until the step's export is verified: this epoch then acquires it.
        """
        if not hold_queues_waited:  # the barrier waits itself, applying commands meanwhile
            self.bound_hold_queues()
        with self.ledger.lock:
            for op in self.ledger.running():
                if op.strategy == Strategy.STOP_START:
                    self.stop_start.run(op, epoch)
                else:
                    self.live.advance(op, epoch)
            self._apply_placements()
            actions = self.live.actions(epoch)
        self.start_exports()
        return actions

    def bound_hold_queues(self, interrupt: Callable[[], bool] = lambda: False) -> bool:
        """Wait for the exports of the collecting steps whose hold queue reached its bound;
        True once none is left to wait for, False when ``interrupt`` ended the wait (a command
        arrived: the barrier applies it, a cancel gives the held steps back, and waits again).

        The epoch about to be planned has not read its records yet, so they stay in the source
        while this waits: no hold queue grows past its bound by more than the one epoch that
        crossed it, and nothing is dropped. The operations say which steps they wait for
        (``hold_queue_full``), which the control plane shows as what the operation waits for.
        """
        bounds = self.hold_queue_bounds
        if bounds is None:
            return True
        with self.ledger.lock:
            full = self.live.over_bound(bounds.step_bytes, bounds.pu_bytes)
            if not full:
                return True
            ops = {op.operation_id: op for op, _ in full}
            for op in ops.values():
                op.hold_queue_full = tuple(sorted(s.spec.step for o, s in full if o is op))
                self.ledger.save(op)
        log.warning(
            "hold queues full (a step's bound %d bytes, a PU's %d): the stream waits for the "
            "exports of %s",
            bounds.step_bytes,
            bounds.pu_bytes,
            ", ".join(f"{op.operation_id} step {s.spec.step}" for op, s in full),
        )
        try:
            return self.exports.wait(full, should_stop=self._should_stop, interrupt=interrupt)
        finally:
            with self.ledger.lock:
                for op in ops.values():
                    op.hold_queue_full = ()
                    self.ledger.save(op)

    def _apply_placements(self) -> None:
        """Placements as the operations' recorded epochs say (idempotent: safe after a crash).

        Operations whose final placement is known to be saved are skipped; the others are
        applied oldest first, so a later operation's moves win.
        """
        settled = settled_operations(self.ledger.dir)
        for op in sorted(self.ledger.ops.values(), key=lambda o: o.created_at):
            if op.operation_id in settled:
                continue
            if op.strategy == Strategy.STOP_START:
                self.stop_start.apply_placement(op)
            else:
                self.live.apply_placement(op)

    def placements_saved(self) -> None:
        """The runner saved the placements: final operations' effects are now durable, and
        their final status can be reported."""
        ledger = self.ledger
        with ledger.lock:
            settled = settled_operations(ledger.dir)
            for op in ledger.ops.values():
                if op.final and op.operation_id not in settled:
                    mark_settled(ledger.dir, op.operation_id)
                    self.live.clean_up(op)
            report = [ledger.progress(ledger.ops[i]) for i in sorted(ledger.unreported_final)]
            ledger.unreported_final.clear()
        for progress in report:
            ledger.send(progress)

    def committed(self, epoch: int, stats: list[dict[str, Any]]) -> None:
        """After an epoch's job: record held rows, acquisitions and drops that it made durable."""
        self.live.committed(epoch, stats)

    # -- Collect: exports beside the epoch jobs -----------------------------------------------------
    def start_exports(self) -> None:
        self.exports.start()

    def run_exports(self) -> None:
        """Export every collecting step now, in this thread (tests and simulations)."""
        self.exports.run()
