"""The runner's rescale operations as every part of the executor shares them.

Commands, the live protocol, exports and stop-start all read and change the same operations
under one lock, save each change to the operation's state file and report it as progress. The
state file is the truth; a progress report is a notification. An operation's final status is
reported only once the placement it ends with is saved: ``settled.txt`` lists those operations
(see :meth:`workers.rescale.executor.RescaleExecutor.placements_saved`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workers.pipeline.placement import VnodeMapping
from workers.rescale.operation import OperationState, OperationStore, StepState
from workers.rescale.protocol import OperationProgress, ProgressAck
from workers.rescale.reports import ProgressReports
from workers.storage import Location, location

log = logging.getLogger("workers.rescale")

# sends one progress report (``OperationProgress.to_json``); returns the control plane's
# answer, or None when it says nothing (then the next report is full)
Reporter = Callable[[dict[str, Any]], ProgressAck | None]


class OperationLedger:
    """The operations on this runner, guarded by ``lock``, and the placements they change.

    ``placements`` is the runner's own dict: changes are made in it, for the runner to save.
    ``durable``: where the operations' exports and hold queues go (a directory or a
    ``pyarrow.fs`` URI; :mod:`workers.rescale.transfer`), by default the pipeline's directory.
    """

    def __init__(
        self,
        pipeline_dir: Path,
        placements: dict[str, VnodeMapping],
        report: Reporter | None = None,
        *,
        durable: str | None = None,
    ) -> None:
        self.dir = Path(pipeline_dir)
        self.durable: Location = location(durable or self.dir.absolute())
        self.placements = placements
        self.store = OperationStore(self.dir)
        self.ops = self.store.load_all()
        settled = settled_operations(self.dir)
        self.unreported_final = {
            o.operation_id for o in self.ops.values() if o.final and o.operation_id not in settled
        }
        self._report = report or (lambda progress: None)
        self.reports = ProgressReports()
        self.lock = threading.RLock()

    def running(self) -> list[OperationState]:
        return [op for op in self.ops.values() if not op.final]

    def busy_fragments(self) -> dict[str, str]:
        return {frag: op.operation_id for op in self.running() for frag in op.fragments}

    def save(self, op: OperationState) -> None:
        with self.lock:
            self.store.save(op)
            if op.final and op.operation_id not in settled_operations(self.dir):
                # not before the placement it ends with is durable (see placements_saved)
                self.unreported_final.add(op.operation_id)
                return
            progress = self.progress(op)
        self.send(progress)

    def progress(self, op: OperationState, *, full: bool = False) -> OperationProgress:
        """The next report of ``op``: its steps that changed since the acknowledged report."""
        return self.reports.report(
            op.progress(steps=False), op.steps, StepState.progress, full=full
        )

    def send(self, progress: OperationProgress) -> None:
        """Send a report; a control plane that found a gap gets a full report at once."""
        for _ in range(2):
            try:
                ack = self._report(progress.to_json())
            except Exception:  # progress is a notification; the state file is the truth
                log.exception("reporting progress of operation %s failed", progress.operation_id)
                self.reports.answered(progress, None)
                return
            if not self.reports.answered(progress, ack):
                return
            log.info(
                "the control plane asks for a full report of operation %s", progress.operation_id
            )
            with self.lock:
                progress = self.progress(self.ops[progress.operation_id], full=True)

    def set_placement(self, name: str, pus: list[int], mapping: list[int]) -> None:
        current = self.placements[name]
        if tuple(pus) == current.parallel_units and tuple(mapping) == current.mapping:
            return
        version = current.version + (1 if tuple(mapping) != current.mapping else 0)
        self.placements[name] = VnodeMapping(name, tuple(pus), tuple(mapping), version)


def settled_operations(pipeline_dir: Path) -> set[str]:
    """Final operations whose placement changes are known to be in ``placement.json``."""
    path = Path(pipeline_dir) / "rescale" / "settled.txt"
    return set(path.read_text("utf-8").split()) if path.exists() else set()


def mark_settled(pipeline_dir: Path, operation_id: str) -> None:
    if operation_id in settled_operations(pipeline_dir):
        return
    path = Path(pipeline_dir) / "rescale" / "settled.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(operation_id + "\n")
