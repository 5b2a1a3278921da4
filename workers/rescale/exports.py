"""Collect: exporting the sealed vnodes of collecting steps, beside the epoch jobs.

An export runs on a background thread so that keys not moving never wait for it (I4); only the
step's held keys wait until it is written, read back and verified. A failed export is retried at
the next barrier, and the step stays held meanwhile.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from workers.layout import store_path
from workers.rescale import transfer
from workers.rescale.ledger import OperationLedger
from workers.rescale.operation import OperationState, StepState
from workers.rescale.protocol import StepPhase
from workers.state import open_store

log = logging.getLogger("workers.rescale")


class Exports:
    def __init__(self, ledger: OperationLedger, backend: str, *, background: bool = True) -> None:
        self.ledger = ledger
        self.backend = backend
        self._background = background
        self._exporting: set[tuple[str, int]] = set()

    def start(self) -> None:
        """In the background (unless disabled), export every collecting step not being exported."""
        with self.ledger.lock:
            todo = [
                (op, step)
                for op in self.ledger.running()
                for step in op.steps.values()
                if step.phase == StepPhase.COLLECTING
                and (op.operation_id, step.spec.step) not in self._exporting
            ]
            for op, step in todo:
                self._exporting.add((op.operation_id, step.spec.step))
        for op, step in todo:
            if self._background:
                threading.Thread(
                    target=self._export_step,
                    args=(op, step),
                    name=f"export-{op.operation_id}-{step.spec.step}",
                    daemon=True,
                ).start()

    def run(self) -> None:
        """Export every collecting step now, in this thread (tests and simulations)."""
        with self.ledger.lock:
            todo = [
                (op, step)
                for op in self.ledger.running()
                for step in op.steps.values()
                if step.phase == StepPhase.COLLECTING
            ]
        for op, step in todo:
            self._export_step(op, step)

    def _export_step(self, op: OperationState, step: StepState) -> None:
        spec = step.spec
        op_dir = self.ledger.store.op_dir(op.operation_id)
        try:
            path = store_path(self.ledger.dir, spec.fragment, spec.source_pu)
            manifests: dict[int, dict[str, Any]] = {}
            with open_store(self.backend, path, readonly=True) as source:
                for vnode in spec.vnodes:
                    export = source.export_vnode(vnode)
                    out = transfer.export_path(op_dir, spec.fragment, vnode)
                    table = transfer.export_table(export)
                    transfer.write_table(out, table)
                    # verify what the target will read (the ingest checks the checksum again)
                    if not transfer.export_reads_back(out, table):
                        raise RuntimeError(f"export of vnode {vnode} does not read back intact")
                    manifests[vnode] = json.loads(table.schema.metadata[b"manifest"])
            with self.ledger.lock:
                if step.phase == StepPhase.COLLECTING:
                    step.exports = manifests
                    step.enter(StepPhase.EXPORTED)
                    self.ledger.save(op)
        except Exception as exc:  # retried at the next barrier; the step stays held meanwhile
            log.exception("export of step %s of operation %s failed", spec.step, op.operation_id)
            with self.ledger.lock:
                step.error = f"export failed (will retry): {exc}"
                self.ledger.save(op)
        finally:
            with self.ledger.lock:
                self._exporting.discard((op.operation_id, spec.step))
