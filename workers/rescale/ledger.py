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
from workers.rescale.operation import OperationState, OperationStore

log = logging.getLogger("workers.rescale")

Reporter = Callable[[dict[str, Any]], None]


class OperationLedger:
    """The operations on this runner, guarded by ``lock``, and the placements they change.

    ``placements`` is the runner's own dict: changes are made in it, for the runner to save.
    """

    def __init__(
        self,
        pipeline_dir: Path,
        placements: dict[str, VnodeMapping],
        report: Reporter | None = None,
    ) -> None:
        self.dir = Path(pipeline_dir)
        self.placements = placements
        self.store = OperationStore(self.dir)
        self.ops = self.store.load_all()
        settled = settled_operations(self.dir)
        self.unreported_final = {
            o.operation_id for o in self.ops.values() if o.final and o.operation_id not in settled
        }
        self._report = report or (lambda progress: None)
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
            progress = op.progress().to_json()
        self.send(progress)

    def send(self, progress: dict[str, Any]) -> None:
        try:
            self._report(progress)
        except Exception:  # progress is a notification; the state file is the truth
            log.exception("reporting progress of operation %s failed", progress["operation_id"])

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
