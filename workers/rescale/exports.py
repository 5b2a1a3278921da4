"""Collect: exporting the sealed vnodes of collecting steps, as Spark tasks beside the epoch jobs.

At the barrier that collects a step, the step's vnodes are final at the source (their records of
this epoch on are held), so they can be exported while the stream goes on. The driver submits one
Spark job with one task per (fragment, source PU); each task reads its vnodes out of the store as
sorted runs of columns, writes each as an export file with a columnar checksum, reads it back and
returns the manifests. The driver only records the phase: no key passes through its Python, and
keys not moving never wait for an export (I4); only the step's held keys wait until it is written
and verified. A failed export is retried at the next barrier, and the step stays held meanwhile.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workers.hashing import KeyRange
from workers.layout import pu_store
from workers.rescale import transfer
from workers.rescale.ledger import OperationLedger
from workers.rescale.operation import OperationState, StepState
from workers.rescale.protocol import StepPhase
from workers.spark_tasks import run_tasks, task_location
from workers.state import open_store
from workers.state.base import StateStoreError
from workers.storage import location

log = logging.getLogger("workers.rescale")

EXPORT_FAILED = "export failed (will retry)"
RETRY_AFTER_S = (1.0, 30.0)  # a waited-for export that failed starts again: back-off bounds


class ExportWaitStopped(Exception):
    """The runner is stopping while a barrier waits for exports: the epoch does not run."""


@dataclass(frozen=True)
class ExportTask:
    """One source PU's vnodes of one fragment to export: (vnode, key range or None, export
    file) triples."""

    pipeline_dir: str
    backend: str
    fragment: str
    pu: int
    exports: tuple[tuple[int, KeyRange | None, str], ...]
    durable: str = ""  # the durable location's root; "": pipeline_dir
    # the epoch the store has applied at least: the one before the steps' seal (their vnodes'
    # state is final from it on; the records of the seal epoch on are held)
    applied: int = -1


def export_pu(task: ExportTask) -> dict[str, Any]:
    """On an executor: export the task's vnodes from its PU's store (opened read-only; the
    vnodes are sealed, the store keeps serving the others). Returns the manifests by vnode and
    where and how long the task ran."""
    started = time.perf_counter()
    path = pu_store(task.pipeline_dir, task.fragment, task.pu)
    manifests: dict[str, dict[str, Any]] = {}
    at = location(task.durable or task.pipeline_dir)
    if not path.is_dir():
        raise StateStoreError(
            f"{task.fragment} PU {task.pu}: no store at {path} on this executor: lost with its "
            f"disk, or not rebuilt yet; the export is taken again once it is"
        )
    with open_store(task.backend, path, readonly=True) as store:
        # a store behind the epoch before the steps' seal is not the one they sealed (lost, and
        # made again empty by a task since): exporting it would move nothing, verified
        if store.applied_epoch() < task.applied:
            raise StateStoreError(
                f"{path} has applied epoch {store.applied_epoch()}, but the sealed vnodes were "
                f"final at epoch {task.applied}: not the store the step sealed (lost with its "
                f"disk?); the export is taken again once the store is rebuilt"
            )
        stats = store.vnode_stats()
        for vnode, key_range, out in task.exports:
            if key_range is not None:  # one range of a hot vnode: read by its keys' hashes
                keys, values = store.key_range_columns(vnode, key_range)
                manifests[out] = transfer.write_export(at, out, vnode, keys, values, key_range)
                continue
            held = stats.get(vnode)
            keys, values = store.vnode_columns(vnode, held.keys if held else 0)
            if len(keys) != (held.keys if held else 0):
                raise StateStoreError(
                    f"{path}: vnode {vnode} holds {len(keys)} keys, its stats say "
                    f"{held.keys if held else 0}"
                )
            manifests[out] = transfer.write_export(at, out, vnode, keys, values)
    executor, host = task_location()
    return {
        "fragment": task.fragment,
        "pu": task.pu,
        "manifests": manifests,  # by export file
        "executor": executor,
        "host": host,
        "seconds": round(time.perf_counter() - started, 4),
    }


def export_tasks(
    ledger: OperationLedger, backend: str, todo: list[tuple[OperationState, StepState]]
) -> list[ExportTask]:
    """The steps' vnodes grouped into one task per (fragment, source PU), in a stable order."""
    grouped: dict[tuple[str, int], list[tuple[int, KeyRange | None, str]]] = defaultdict(list)
    applied: dict[tuple[str, int], int] = defaultdict(lambda: -1)
    for op, step in todo:
        spec = step.spec
        group = (spec.fragment, spec.source_pu)
        for vnode in spec.vnodes:
            out = transfer.export_path(op.operation_id, spec.fragment, vnode, spec.key_range)
            grouped[group].append((vnode, spec.key_range, out))
        if step.collect_epoch is not None:
            applied[group] = max(applied[group], step.collect_epoch - 1)
    return [
        ExportTask(
            str(ledger.dir),
            backend,
            fragment,
            pu,
            tuple(sorted(exports, key=_by_file)),
            durable=ledger.durable.uri,
            applied=applied[(fragment, pu)],
        )
        for (fragment, pu), exports in sorted(grouped.items())
    ]


def _by_file(export: tuple[int, KeyRange | None, str]) -> str:
    return export[2]


class Exports:
    def __init__(
        self,
        ledger: OperationLedger,
        backend: str,
        *,
        spark: Any = None,
        background: bool = True,
        homes: Callable[[], dict[int, str]] | None = None,
    ) -> None:
        self.ledger = ledger
        self.backend = backend
        # PU -> its home executor's location: a source PU's export runs where its store is
        self.homes = homes
        self.spark = spark  # None: the tasks run in this process (simulations, unit tests)
        self._background = background
        self._exporting: set[tuple[str, int]] = set()
        # notified whenever an export job ends, well or not (under the ledger's lock)
        self._ended = threading.Condition(ledger.lock)
        self.last_runs: list[dict[str, Any]] = []  # what the last export job's tasks did

    def start(self) -> None:
        """In the background (unless disabled), export every collecting step not being exported."""
        with self.ledger.lock:
            todo = [
                (op, step)
                for op in self.ledger.running()
                for step in op.steps.values()
                if step.phase == StepPhase.COLLECTING
                and not step.returning
                and (op.operation_id, step.spec.step) not in self._exporting
            ]
            for op, step in todo:
                self._exporting.add((op.operation_id, step.spec.step))
        if todo and self._background:
            threading.Thread(
                target=self._export, args=(todo,), name="rescale-exports", daemon=True
            ).start()

    def run(self) -> None:
        """Export every collecting step now, in this thread (tests and simulations)."""
        with self.ledger.lock:
            todo = [
                (op, step)
                for op in self.ledger.running()
                for step in op.steps.values()
                if step.phase == StepPhase.COLLECTING and not step.returning
            ]
        if todo:
            self._export(todo)

    def wait(
        self,
        steps: list[tuple[OperationState, StepState]],
        *,
        should_stop: Callable[[], bool] = lambda: False,
        interrupt: Callable[[], bool] = lambda: False,
        poll_s: float = 0.5,
    ) -> bool:
        """Block until every one of ``steps`` is exported (or its operation ended or is being
        cancelled: a cancel gives held steps back to their source); returns True then.

        A failed export starts again after a back-off (doubling from 1 s to 30 s) until one
        succeeds: the records the caller holds back stay in the source meanwhile, so nothing is
        lost and no hold queue grows. ``should_stop`` ends the wait (:class:`ExportWaitStopped`);
        ``interrupt`` (a command is waiting, such as a cancel) ends it with False, so the caller
        can apply the command and wait again.
        """
        delay = RETRY_AFTER_S[0]
        while True:
            with self._ended:
                left = [
                    (op, step)
                    for op, step in steps
                    if step.phase == StepPhase.COLLECTING
                    and not (op.final or op.cancel_requested or step.returning)
                ]
                if not left:
                    return True
                idle = any((op.operation_id, s.spec.step) not in self._exporting for op, s in left)
                failed = any(s.error.startswith(EXPORT_FAILED) for _, s in left)
            if should_stop():
                raise ExportWaitStopped(
                    f"stopping while {len(left)} steps' exports were awaited at the barrier"
                )
            if interrupt():
                return False
            if idle or not self._background:
                if failed:
                    deadline = time.monotonic() + delay
                    while time.monotonic() < deadline and not (should_stop() or interrupt()):
                        time.sleep(min(poll_s, delay))
                    delay = min(delay * 2, RETRY_AFTER_S[1])
                if self._background:
                    self.start()
                else:
                    self.run()
                    continue
            with self._ended:
                self._ended.wait(timeout=poll_s)

    def _export(self, todo: list[tuple[OperationState, StepState]]) -> None:
        tasks = export_tasks(self.ledger, self.backend, todo)
        vnodes = sum(len(t.exports) for t in tasks)
        try:
            homes = self.homes() if self.homes is not None else {}
            runs = run_tasks(
                self.spark,
                tasks,
                export_pu,
                f"rescaler rescale export: {vnodes} vnodes of {len(todo)} steps "
                f"({len(tasks)} PU tasks)",
                locations=[homes.get(t.pu) for t in tasks],
            )
        except Exception as exc:  # retried at the next barrier; the steps stay held meanwhile
            log.exception("export of %d steps failed", len(todo))
            with self.ledger.lock:
                for op, step in todo:
                    if step.phase == StepPhase.COLLECTING:
                        step.error = f"{EXPORT_FAILED}: {exc}"
                        self.ledger.save(op)
                    self._exporting.discard((op.operation_id, step.spec.step))
                self._ended.notify_all()
            return
        self.last_runs = runs
        manifests = {out: manifest for run in runs for out, manifest in run["manifests"].items()}
        with self.ledger.lock:
            saved: dict[str, OperationState] = {}
            for op, step in todo:
                self._exporting.discard((op.operation_id, step.spec.step))
                if step.phase != StepPhase.COLLECTING or step.returning:
                    continue  # moved on, or given back to its source meanwhile
                spec = step.spec
                step.exports = {
                    v: manifests[
                        transfer.export_path(op.operation_id, spec.fragment, v, spec.key_range)
                    ]
                    for v in spec.vnodes
                }
                if step.error.startswith(EXPORT_FAILED):
                    step.error = ""
                step.enter(StepPhase.EXPORTED)
                saved[op.operation_id] = op
            for op in saved.values():
                self.ledger.save(op)
            self._ended.notify_all()
        log.info(
            "exported %d vnodes (%d keys) in %d PU tasks: %s",
            vnodes,
            sum(m["keys"] for m in manifests.values()),
            len(runs),
            ", ".join(
                f"{r['fragment']}/pu-{r['pu']} {r['seconds']}s on {r['executor']}" for r in runs
            ),
        )
