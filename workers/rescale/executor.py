"""The runner's side of a rescale: epoch-aligned ICADD, and stop-start through recovery partitions.

At every epoch barrier the runner asks :meth:`RescaleExecutor.plan` for the epoch's placements
and per-PU actions. Planning an epoch first moves steps forward (a decision is recorded as the
*epoch* at which a phase happens), then derives everything the epoch does from those epochs:

* vnodes of steps with ``collect_epoch <= e < acquire_epoch`` are *held*: their records are routed
  to the target's task, which appends them to a hold queue file instead of applying them;
* the source seals a step's vnodes at ``collect_epoch``; a background thread exports them;
* at ``acquire_epoch`` the mapping sends them to the target, whose task ingests the verified
  exports, then applies the hold queue and the epoch's records in source order;
* at ``drop_epoch`` the source deletes their ranges.

Because the plan is derived, re-planning after a crash gives the same plan, and a re-run epoch
reuses the plan recorded before it first ran. Every task action is idempotent for the same reason.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workers.control import Command
from workers.epoch import store_path
from workers.pipeline.placement import FragmentActions, FragmentPlacement, SlotActions
from workers.rescale import transfer
from workers.rescale.operation import OperationState, OperationStore, StepState
from workers.rescale.planner import StepSpec
from workers.state import open_store
from workers.state.base import VnodeExport, checksum_items, decode_key

log = logging.getLogger("workers.rescale")

Reporter = Callable[[dict[str, Any]], None]


class CommandRefused(Exception):
    """A rescale command the runner will not carry out; the message says why."""


class RescaleExecutor:
    def __init__(
        self,
        pipeline_dir: Path,
        placements: dict[str, FragmentPlacement],
        *,
        backend: str,
        worker_pus: set[int],
        report: Reporter | None = None,
        background_exports: bool = True,
    ) -> None:
        self.dir = Path(pipeline_dir)
        self.placements = placements
        self.backend = backend
        self.worker_pus = set(worker_pus)
        self.store = OperationStore(self.dir)
        self.ops = self.store.load_all()
        settled = settled_operations(self.dir)
        self._unreported_final = {
            o.id for o in self.ops.values() if o.final and o.id not in settled
        }
        self._report = report or (lambda progress: None)
        self._background = background_exports
        self._lock = threading.RLock()
        self._exporting: set[tuple[str, int]] = set()
        self._reconcile()

    # -- queries -----------------------------------------------------------------------------
    def running(self) -> list[OperationState]:
        return [op for op in self.ops.values() if not op.final]

    def busy_fragments(self) -> dict[str, str]:
        return {frag: op.id for op in self.running() for frag in op.fragments}

    def _save(self, op: OperationState) -> None:
        with self._lock:
            self.store.save(op)
            if op.final and op.id not in settled_operations(self.dir):
                # not before the placement it ends with is durable (see placements_saved)
                self._unreported_final.add(op.id)
                return
            progress = op.progress()
        self._send(progress)

    def _send(self, progress: dict[str, Any]) -> None:
        try:
            self._report(progress)
        except Exception:  # progress is a notification; the state file is the truth
            log.exception("reporting progress of operation %s failed", progress["operation"])

    # -- commands ----------------------------------------------------------------------------
    def handle(self, command: Command) -> str:
        """Apply a rescale command (idempotent); returns a detail line or raises CommandRefused."""
        payload = command.payload
        op_id = str(payload.get("operation", ""))
        if not op_id:
            raise CommandRefused(f"{command.kind}: payload has no 'operation'")
        with self._lock:
            if command.kind == "rescale.begin":
                return self._begin(op_id, payload)
            op = self.ops.get(op_id)
            if op is None:
                raise CommandRefused(f"operation {op_id} was never begun on this runner")
            if command.kind == "rescale.step":
                return self._add_step(op, StepSpec.from_json(payload["step"]))
            if command.kind == "rescale.cancel":
                if op.final:
                    return f"operation {op_id} already {op.status}"
                op.cancel_requested = True
                self._save(op)
                return "cancel requested: the steps in flight finish, no new step starts"
            if command.kind == "rescale.finish":
                if op.final:
                    return f"operation {op_id} already {op.status}"
                op.finish_requested = True
                self._save(op)
                return "finishing once every step is done"
        raise CommandRefused(f"unknown rescale command {command.kind!r}")

    def _begin(self, op_id: str, payload: dict[str, Any]) -> str:
        if op_id in self.ops:
            return f"operation {op_id} already begun"
        fragments: dict[str, dict[str, Any]] = payload["fragments"]
        busy = self.busy_fragments()
        for name, change in fragments.items():
            if name not in self.placements:
                raise CommandRefused(f"no stateful fragment {name!r} on this runner")
            if name in busy:
                raise CommandRefused(f"fragment {name!r} is busy with operation {busy[name]}")
            unknown = set(change.get("added", [])) - self.worker_pus
            if unknown:
                raise CommandRefused(f"{name}: parallel units {sorted(unknown)} do not exist")
            if payload.get("strategy") == "stop_start":
                after = change.get("mapping_after")
                if not after or len(after) != self.placements[name].vnodes:
                    raise CommandRefused(f"{name}: stop_start needs a full mapping_after")
        op = OperationState(id=op_id, strategy=payload.get("strategy", "live"), fragments=fragments)
        self.ops[op_id] = op
        self._save(op)
        return f"operation {op_id} begun"

    def _add_step(self, op: OperationState, spec: StepSpec) -> str:
        if spec.id in op.steps:
            return f"step {spec.id} already issued"
        if op.final or op.cancel_requested:
            raise CommandRefused(f"operation {op.id} is {op.status}; no new step may start")
        if op.strategy != "live":
            raise CommandRefused(f"operation {op.id} is {op.strategy}; it has no steps")
        if spec.fragment not in op.fragments:
            raise CommandRefused(
                f"step {spec.id}: fragment {spec.fragment!r} is not in operation {op.id}"
            )
        placement = self.placements[spec.fragment]
        moving = {
            v
            for other in self.running()
            for s in other.steps.values()
            if s.spec.fragment == spec.fragment and s.phase not in ("done", "cancelled")
            for v in s.spec.vnodes
        }
        for vnode in spec.vnodes:
            if not 0 <= vnode < placement.vnodes:
                raise CommandRefused(f"step {spec.id}: vnode {vnode} out of range")
            if placement.mapping[vnode] != spec.source:
                raise CommandRefused(
                    f"step {spec.id}: vnode {vnode} is on PU {placement.mapping[vnode]}, "
                    f"not on PU {spec.source}"
                )
            if vnode in moving:
                raise CommandRefused(f"step {spec.id}: vnode {vnode} is already moving")
        if spec.target not in self.worker_pus:
            raise CommandRefused(f"step {spec.id}: target PU {spec.target} does not exist")
        if spec.target == spec.source:
            raise CommandRefused(f"step {spec.id}: source and target are both PU {spec.source}")
        step = StepState(spec)
        step.enter("pending")
        op.steps[spec.id] = step
        self._save(op)
        return f"step {spec.id} issued"

    # -- the barrier ---------------------------------------------------------------------------
    def plan(self, epoch: int) -> dict[str, FragmentActions]:
        """Move operations forward for ``epoch`` and derive its actions; updates placements."""
        with self._lock:
            for op in self.running():
                if op.strategy == "stop_start":
                    self._stop_start(op, epoch)
                else:
                    self._advance(op, epoch)
            self._apply_placements()
            actions = self._actions(epoch)
        self.start_exports()
        return actions

    def _advance(self, op: OperationState, epoch: int) -> None:
        changed = False
        if op.begun_epoch is None:
            op.begun_epoch = epoch
            changed = True
        for step in sorted(op.steps.values(), key=lambda s: s.spec.id):
            before = (step.phase, step.collect_epoch, step.acquire_epoch, step.drop_epoch)
            if step.phase == "pending" and op.cancel_requested:
                step.enter("cancelled")
            if step.phase == "dropping" and step.drop_epoch is not None and step.drop_epoch < epoch:
                step.enter("done")
            if (
                step.phase in ("acquiring", "acquired")
                and step.acquire_epoch is not None
                and (step.acquire_epoch < epoch)
            ):
                step.drop_epoch = epoch
                step.enter("dropping")
            if (
                step.phase == "exported"
                and step.collect_epoch is not None
                and (step.collect_epoch < epoch)
            ):
                step.acquire_epoch = epoch
                step.enter("acquiring")
            if step.phase == "pending":
                step.collect_epoch = epoch
                step.enter("collecting")
            changed |= before != (
                step.phase,
                step.collect_epoch,
                step.acquire_epoch,
                step.drop_epoch,
            )
        if not op.in_flight() and all(s.phase in ("done", "cancelled") for s in op.steps.values()):
            if op.cancel_requested:
                op.status, op.finished_epoch = "cancelled", epoch
                changed = True
            elif op.finish_requested:
                op.status, op.finished_epoch = "completed", epoch
                changed = True
        if changed:
            self._save(op)

    def _apply_placements(self) -> None:
        """Placements as the operations' recorded epochs say (idempotent: safe after a crash).

        Operations whose final placement is known to be saved are skipped; the others are
        applied oldest first, so a later operation's moves win.
        """
        settled = settled_operations(self.dir)
        for op in sorted(self.ops.values(), key=lambda o: o.created_at):
            if op.id in settled:
                continue
            if op.strategy == "stop_start":
                if op.status == "completed":
                    for name, change in op.fragments.items():
                        self._set_placement(
                            name, list(change["pus_after"]), list(change["mapping_after"])
                        )
                continue
            for name, change in op.fragments.items():
                placement = self.placements[name]
                pus = list(placement.pus)
                mapping = list(placement.mapping)
                if not op.final:
                    pus += [pu for pu in change.get("added", []) if pu not in pus]
                for step in op.steps.values():
                    if step.spec.fragment == name and step.acquire_epoch is not None:
                        for vnode in step.spec.vnodes:
                            mapping[vnode] = step.spec.target
                if op.final:
                    pus = self._release(op, name, pus, mapping)
                self._set_placement(name, pus, mapping)

    def placements_saved(self) -> None:
        """The runner saved the placements: final operations' effects are now durable, and
        their final status can be reported."""
        with self._lock:
            settled = settled_operations(self.dir)
            for op in self.ops.values():
                if op.final and op.id not in settled:
                    mark_settled(self.dir, op.id)
                    self._clean_up(op)
            report = [self.ops[i].progress() for i in sorted(self._unreported_final)]
            self._unreported_final.clear()
        for progress in report:
            self._send(progress)

    def _clean_up(self, op: OperationState) -> None:
        """Exports and hold queues of a settled operation are spent: its state file stays as the
        record of what it did. One operation per fragment at a time, so every hold queue file of
        its fragments up to its last epoch is its own."""
        shutil.rmtree(self.store.op_dir(op.id) / "exports", ignore_errors=True)
        last = op.finished_epoch if op.finished_epoch is not None else -1
        for name in op.fragments:
            for path in (self.dir / "rescale" / "holdq" / name).glob("pu-*/epoch-*.arrow"):
                if int(path.stem.split("-")[1]) <= last:
                    path.unlink(missing_ok=True)

    def _release(
        self, op: OperationState, name: str, pus: list[int], mapping: list[int]
    ) -> list[int]:
        """Drop from the fragment the PUs this operation removed (or, cancelled, added) that no
        longer own anything; a PU that still owns a vnode stays: the mapping says so."""
        change = op.fragments[name]
        candidates = (
            change.get("removed", []) if op.status == "completed" else change.get("added", [])
        )
        owning = set(mapping)
        busy = {
            pu for other in self.running() for pu in other.fragments.get(name, {}).get("added", [])
        }
        return [pu for pu in pus if not (pu in candidates and pu not in owning and pu not in busy)]

    def _reconcile(self) -> None:
        # a crash between saving an operation and saving the placement: apply it again
        with self._lock:
            self._apply_placements()

    def _set_placement(self, name: str, pus: list[int], mapping: list[int]) -> None:
        current = self.placements[name]
        if tuple(pus) == current.pus and tuple(mapping) == current.mapping:
            return
        version = current.version + (1 if tuple(mapping) != current.mapping else 0)
        self.placements[name] = FragmentPlacement(name, tuple(pus), tuple(mapping), version)

    def _actions(self, epoch: int) -> dict[str, FragmentActions]:
        held: dict[str, dict[int, int]] = defaultdict(dict)
        slots: dict[str, dict[int, dict[str, Any]]] = defaultdict(lambda: defaultdict(dict))
        for op in self.running():
            if op.strategy != "live":
                continue
            op_dir = self.store.op_dir(op.id)
            for step in op.steps.values():
                spec = step.spec
                frag = spec.fragment
                c, a, d = step.collect_epoch, step.acquire_epoch, step.drop_epoch
                if c is not None and c <= epoch and (a is None or epoch < a):
                    for vnode in spec.vnodes:
                        held[frag][vnode] = spec.target
                    slots[frag][spec.target]["hold_path"] = str(
                        transfer.hold_path(self.dir / "rescale", frag, spec.target, epoch)
                    )
                if c == epoch:
                    slots[frag][spec.source].setdefault("seal", []).extend(spec.vnodes)
                if a == epoch and c is not None:
                    target = slots[frag][spec.target]
                    target.setdefault("ingest", []).extend(
                        str(transfer.export_path(op_dir, frag, v)) for v in spec.vnodes
                    )
                    target.setdefault("replay_files", []).extend(
                        str(transfer.hold_path(self.dir / "rescale", frag, spec.target, x))
                        for x in range(c, a)
                    )
                    target.setdefault("replay_vnodes", []).extend(spec.vnodes)
                if d == epoch:
                    slots[frag][spec.source].setdefault("drop", []).extend(spec.vnodes)
        return {
            frag: FragmentActions(
                held=dict(held.get(frag, {})),
                slots={
                    pu: SlotActions(
                        seal=tuple(sorted(a.get("seal", []))),
                        drop=tuple(sorted(a.get("drop", []))),
                        ingest=tuple(a.get("ingest", [])),
                        replay_files=tuple(dict.fromkeys(a.get("replay_files", []))),
                        replay_vnodes=tuple(sorted(a.get("replay_vnodes", []))),
                        hold_path=a.get("hold_path"),
                    )
                    for pu, a in slots.get(frag, {}).items()
                },
            )
            for frag in self.placements
        }

    def committed(self, epoch: int, stats: list[dict[str, Any]]) -> None:
        """After an epoch's job: record held rows, acquisitions and drops that it made durable."""
        held: dict[tuple[str, int], int] = {}
        for stat in stats:
            for vnode, rows in stat.get("held", {}).items():
                held[(stat["fragment"], int(vnode))] = rows
        with self._lock:
            for op in self.running():
                changed = False
                for step in op.steps.values():
                    frag = step.spec.fragment
                    for vnode in step.spec.vnodes:
                        rows = held.get((frag, vnode))
                        if rows is not None and step.phase in ("collecting", "exported"):
                            step.hold_rows[vnode] = step.hold_rows.get(vnode, 0) + rows
                            changed = True
                    if step.phase == "acquiring" and step.acquire_epoch == epoch:
                        step.keys_moved = sum(m["keys"] for m in step.exports.values())
                        step.bytes_moved = sum(m["bytes"] for m in step.exports.values())
                        step.enter("acquired")
                        changed = True
                    if step.phase == "dropping" and step.drop_epoch == epoch:
                        step.enter("done")
                        changed = True
                if changed:
                    self._save(op)

    # -- Collect: exports beside the epoch jobs -----------------------------------------------------
    def start_exports(self) -> None:
        with self._lock:
            todo = [
                (op, step)
                for op in self.running()
                for step in op.steps.values()
                if step.phase == "collecting" and (op.id, step.spec.id) not in self._exporting
            ]
            for op, step in todo:
                self._exporting.add((op.id, step.spec.id))
        for op, step in todo:
            if self._background:
                threading.Thread(
                    target=self._export_step,
                    args=(op, step),
                    name=f"export-{op.id}-{step.spec.id}",
                    daemon=True,
                ).start()

    def run_exports(self) -> None:
        """Export every collecting step now, in this thread (tests and simulations)."""
        with self._lock:
            todo = [
                (op, step)
                for op in self.running()
                for step in op.steps.values()
                if step.phase == "collecting"
            ]
        for op, step in todo:
            self._export_step(op, step)

    def _export_step(self, op: OperationState, step: StepState) -> None:
        spec = step.spec
        op_dir = self.store.op_dir(op.id)
        try:
            path = store_path(self.dir, spec.fragment, spec.source)
            manifests: dict[int, dict[str, Any]] = {}
            with open_store(self.backend, path, readonly=True) as source:
                for vnode in spec.vnodes:
                    export = source.export_vnode(vnode)
                    out = transfer.export_path(op_dir, spec.fragment, vnode)
                    manifests[vnode] = transfer.write_export(out, export)
                    written = transfer.read_export(out)  # verify what the target will read
                    if (
                        written.keys != export.keys
                        or checksum_items(written.items) != export.checksum
                    ):
                        raise RuntimeError(f"export of vnode {vnode} does not read back intact")
            with self._lock:
                if step.phase == "collecting":
                    step.exports = manifests
                    step.enter("exported")
                    self._save(op)
        except Exception as exc:  # retried at the next barrier; the step stays held meanwhile
            log.exception("export of step %s of operation %s failed", spec.id, op.id)
            with self._lock:
                step.error = f"export failed (will retry): {exc}"
                self._save(op)
        finally:
            with self._lock:
                self._exporting.discard((op.id, spec.id))

    # -- stop-start --------------------------------------------------------------------------------
    def _stop_start(self, op: OperationState, epoch: int) -> None:
        """Snapshot into recovery partitions, restart at the new size, restore by key.

        The stream waits at this barrier for all of it; each phase is durable, and a crash at
        any point resumes from the last finished phase (the snapshot holds everything).
        """
        op_dir = self.store.op_dir(op.id)
        if op.begun_epoch is None:
            op.begun_epoch = epoch
        started = time.perf_counter()
        if op.phase == "begun":
            for name in op.fragments:
                self._snapshot(op_dir, name)
            op.phase = "snapshotted"
            self._save(op)
        if op.phase == "snapshotted":
            for name in op.fragments:
                for pu in self.placements[name].pus:
                    path = store_path(self.dir, name, pu)
                    if path.exists():
                        with open_store(self.backend, path) as store:
                            for vnode in list(store.vnode_stats()):
                                store.drop_vnode(vnode)
            op.phase = "cleared"
            self._save(op)
        if op.phase == "cleared":
            for name, change in op.fragments.items():
                mapping = list(change["mapping_after"])
                self._restore(op_dir, name, mapping)
                self._set_placement(name, list(change["pus_after"]), mapping)
            op.phase = "restored"
            op.status, op.finished_epoch = "completed", epoch
            self._save(op)
            for name in op.fragments:
                shutil.rmtree(op_dir / "snapshot" / name, ignore_errors=True)
        log.info(
            "stop-start %s done at epoch %d in %.3fs", op.id, epoch, time.perf_counter() - started
        )

    def _snapshot(self, op_dir: Path, name: str) -> None:
        parts: dict[int, list[tuple[bytes, bytes]]] = defaultdict(list)
        for pu in self.placements[name].pus:
            path = store_path(self.dir, name, pu)
            if not path.exists():
                continue
            with open_store(self.backend, path, readonly=True) as store:
                for key, value in store.scan():
                    vnode, _ = decode_key(key)
                    parts[transfer.recovery_partition(vnode)].append((key, value))
        for part in range(transfer.RECOVERY_PARTITIONS):
            transfer.write_partition(
                transfer.snapshot_path(op_dir, name, part), parts.get(part, [])
            )

    def _restore(self, op_dir: Path, name: str, mapping: list[int]) -> None:
        by_owner: dict[int, dict[int, list[tuple[bytes, bytes]]]] = defaultdict(
            lambda: defaultdict(list)
        )
        for part in range(transfer.RECOVERY_PARTITIONS):
            for key, value in transfer.read_partition(transfer.snapshot_path(op_dir, name, part)):
                vnode, _ = decode_key(key)
                by_owner[mapping[vnode]][vnode].append((key, value))
        for pu in sorted(set(mapping)):
            with open_store(self.backend, store_path(self.dir, name, pu)) as store:
                for vnode, items in sorted(by_owner.get(pu, {}).items()):
                    items.sort()
                    store.ingest(VnodeExport(vnode, items, len(items), checksum_items(items)))


def settled_operations(pipeline_dir: Path) -> set[str]:
    """Final operations whose placement changes are known to be in ``placement.json``."""
    path = Path(pipeline_dir) / "rescale" / "settled.txt"
    return set(path.read_text("utf-8").split()) if path.exists() else set()


def mark_settled(pipeline_dir: Path, op_id: str) -> None:
    if op_id in settled_operations(pipeline_dir):
        return
    path = Path(pipeline_dir) / "rescale" / "settled.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(op_id + "\n")
