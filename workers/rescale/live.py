"""The live protocol at the epoch barrier: epoch-aligned ICADD.

Planning an epoch first moves steps forward (a decision is recorded as the *epoch* at which a
phase happens), then derives everything the epoch does from those epochs:

* vnodes of steps with ``collect_epoch <= e < acquire_epoch`` are *held*: their records are routed
  to the target's task, which appends them to a hold queue file instead of applying them. At most
  ``steps_in_flight`` steps of an operation hold at once: a pending step is collected at the first
  barrier with a free slot, which may be the barrier that acquires an earlier step;
* the source seals a step's vnodes at ``collect_epoch``; Spark tasks beside the epoch jobs
  export them (:mod:`workers.rescale.exports`);
* at ``acquire_epoch`` the mapping sends them to the target, whose task ingests the verified
  exports, then applies the hold queue and the epoch's records in source order;
* at ``drop_epoch``, the same epoch, the source deletes their ranges (operations recorded by an
  earlier release drop one epoch later).

Because the plan is derived, re-planning after a crash gives the same plan, and a re-run epoch
reuses the plan recorded before it first ran. Every task action is idempotent for the same reason.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from workers.pipeline.placement import CutVnode, FragmentActions, SlotActions
from workers.rescale import transfer
from workers.rescale.ledger import OperationLedger
from workers.rescale.operation import OperationState, StepState
from workers.rescale.protocol import (
    STEP_ENDED,
    STEP_HOLDING,
    OperationStatus,
    StepPhase,
    Strategy,
)


class LiveProtocol:
    def __init__(self, ledger: OperationLedger) -> None:
        self.ledger = ledger

    def advance(self, op: OperationState, epoch: int) -> None:
        """Move the operation's steps (and the operation) forward for ``epoch``.

        First every started step moves on (a dropped one is done, an acquired one dropped, an
        exported one acquired), then pending steps are collected while fewer than the
        granularity's ``steps_in_flight`` steps hold their vnodes: a step acquired at this
        barrier has freed its slot, so the next step is collected at the same barrier and a wave
        of steps costs one epoch. Re-run for the same epoch (a crash before its plan was
        recorded), it finds the steps it moved and the slots it filled, and does nothing more.
        """
        changed = False
        if op.begun_epoch is None:
            op.begun_epoch = epoch
            changed = True
        steps = sorted(op.steps.values(), key=lambda s: s.spec.step)

        def moment() -> list[tuple[Any, ...]]:
            return [
                (s.phase, s.collect_epoch, s.acquire_epoch, s.drop_epoch, s.return_epoch)
                for s in steps
            ]

        before = moment()
        # a cut vnode with a key range on its target already finishes under a cancel
        split = op.split_vnodes() if op.cancel_requested else set()
        for step in steps:
            finishes = bool(split) and (step.spec.fragment, step.spec.vnodes[0]) in split
            if step.phase == StepPhase.PENDING and op.cancel_requested and not finishes:
                step.enter(StepPhase.CANCELLED)
            if step.returning and step.return_epoch is not None and step.return_epoch < epoch:
                step.enter(StepPhase.CANCELLED)  # its return committed (a crash kept us from
                # recording it)
            if (
                op.cancel_requested
                and not finishes
                and step.phase in STEP_HOLDING
                and step.acquire_epoch is None
                and step.return_epoch is None
            ):
                # Held and not yet acquired: the source takes its vnodes back in this epoch
                # (unseals them and applies the hold queue before the epoch's records) rather
                # than waiting for an export that may never finish (a full disk).
                step.return_epoch = epoch
            if (
                step.phase in (StepPhase.ACQUIRING, StepPhase.ACQUIRED, StepPhase.DROPPING)
                and step.drop_epoch is not None
                and step.drop_epoch < epoch
            ):  # its drop epoch has committed (a crash may have kept committed() from saying so)
                if step.phase == StepPhase.ACQUIRING:
                    self._moved(step)
                step.enter(StepPhase.DONE)
            if (
                step.phase in (StepPhase.ACQUIRING, StepPhase.ACQUIRED)
                and step.acquire_epoch is not None
                and step.acquire_epoch < epoch
                and step.drop_epoch is None  # recorded by a release that dropped a barrier later
            ):
                step.drop_epoch = epoch
                step.enter(StepPhase.DROPPING)
            if (
                step.phase == StepPhase.EXPORTED
                and step.return_epoch is None
                and step.collect_epoch is not None
                and (step.collect_epoch < epoch)
            ):
                # the source drops its sealed copy in the epoch the target acquires the vnodes:
                # the verified exports, kept until the operation is settled, are the copy a
                # re-run of this epoch ingests again (docs/rescale.md, "Acquire and drop")
                step.acquire_epoch = step.drop_epoch = epoch
                step.enter(StepPhase.ACQUIRING)
        for step in op.startable():
            step.collect_epoch = epoch
            step.enter(StepPhase.COLLECTING)
        changed |= before != moment()
        if not op.in_flight() and all(s.phase in STEP_ENDED for s in op.steps.values()):
            if op.cancel_requested:
                op.status, op.finished_epoch = OperationStatus.CANCELLED, epoch
                changed = True
            elif op.finish_requested:
                op.status, op.finished_epoch = OperationStatus.COMPLETED, epoch
                changed = True
        if changed:
            self.ledger.save(op)

    def apply_placement(self, op: OperationState) -> None:
        """The placements as the operation's recorded acquire epochs say (idempotent): the PUs it
        adds join while it runs, and once it is final the PUs it frees are released."""
        for name, change in op.fragments.items():
            placement = self.ledger.placements[name]
            pus = list(placement.parallel_units)
            mapping = list(placement.mapping)
            if not op.final:
                pus += [pu for pu in change.added_parallel_units if pu not in pus]
            ranges: dict[int, int] = defaultdict(int)  # cut vnode -> its ranges acquired
            for step in op.steps.values():
                if step.spec.fragment == name and step.acquire_epoch is not None:
                    kr = step.spec.key_range
                    if kr is not None:
                        # a cut vnode changes owner once its every key range is acquired;
                        # until then the epoch's actions route its moved ranges (``cut``)
                        ranges[step.spec.vnodes[0]] += 1
                        if ranges[step.spec.vnodes[0]] < kr.count:
                            continue
                    for vnode in step.spec.vnodes:
                        mapping[vnode] = step.spec.target_pu
            if op.final:
                pus = self._release(op, name, pus, mapping)
            self.ledger.set_placement(name, pus, mapping)

    def _release(
        self, op: OperationState, name: str, pus: list[int], mapping: list[int]
    ) -> list[int]:
        """Drop from the fragment the PUs this operation removed (or, cancelled, added) that no
        longer own anything; a PU that still owns a vnode stays: the mapping says so."""
        change = op.fragments[name]
        candidates = (
            change.removed_parallel_units
            if op.status == OperationStatus.COMPLETED
            else change.added_parallel_units
        )
        owning = set(mapping)
        busy = {
            pu
            for other in self.ledger.running()
            if name in other.fragments
            for pu in other.fragments[name].added_parallel_units
        }
        return [pu for pu in pus if not (pu in candidates and pu not in owning and pu not in busy)]

    def actions(self, epoch: int) -> dict[str, FragmentActions]:
        """What every fragment does in ``epoch``: the held vnodes, the cut vnodes' key ranges,
        and each PU's actions."""
        held: dict[str, dict[int, int]] = defaultdict(dict)
        cuts: dict[str, dict[int, CutVnode]] = defaultdict(dict)
        slots: dict[str, dict[int, dict[str, Any]]] = defaultdict(lambda: defaultdict(dict))
        for op in self.ledger.running():
            if op.strategy != Strategy.LIVE:
                continue
            op_id = op.operation_id
            dropped: dict[tuple[str, int], int] | None = None  # counted once a range drops
            for step in op.steps.values():
                spec = step.spec
                frag = spec.fragment
                c, a, d = step.collect_epoch, step.acquire_epoch, step.drop_epoch
                r = step.return_epoch
                kr = spec.key_range
                ranges = [(v, kr.index, kr.count) for v in spec.vnodes] if kr else []
                if step.holds(epoch):
                    if kr is None:
                        for vnode in spec.vnodes:
                            held[frag][vnode] = spec.target_pu
                    else:
                        _cut(cuts[frag], spec.vnodes[0], kr.count, spec.target_pu, held=kr.index)
                    slots[frag][spec.target_pu]["hold_path"] = transfer.hold_path(
                        frag, spec.target_pu, epoch
                    )
                elif kr is not None and a is not None and a <= epoch:
                    _cut(cuts[frag], spec.vnodes[0], kr.count, spec.target_pu, moved=kr.index)
                if c == epoch:
                    source = slots[frag][spec.source_pu]
                    if kr is None:
                        source.setdefault("seal", []).extend(spec.vnodes)
                    else:
                        source.setdefault("seal_ranges", []).extend(ranges)
                if a == epoch and c is not None:
                    target = slots[frag][spec.target_pu]
                    target.setdefault("ingest", []).extend(
                        transfer.export_path(op_id, frag, v, kr) for v in spec.vnodes
                    )
                    target.setdefault("replay_files", []).extend(
                        transfer.hold_path(frag, spec.target_pu, x) for x in range(c, a)
                    )
                    target.setdefault("replay_vnodes", []).extend(spec.vnodes)
                if d == epoch:
                    source = slots[frag][spec.source_pu]
                    if kr is not None and dropped is None:
                        dropped = _ranges_dropped(op, epoch)
                    if kr is None:
                        source.setdefault("drop", []).extend(spec.vnodes)
                    elif dropped is not None and dropped[(frag, spec.vnodes[0])] == kr.count:
                        # its last range: what is left of the vnode on the source goes, with
                        # the seals of its ranges (each range stays sealed there till then)
                        source.setdefault("drop", []).extend(spec.vnodes)
                    else:
                        source.setdefault("drop_ranges", []).extend(ranges)
                if r == epoch and c is not None and a is None:
                    # returned: the source unseals its copy (never dropped) and applies what
                    # the target's hold queue kept of these vnodes, then the epoch's records
                    source = slots[frag][spec.source_pu]
                    if kr is None:
                        source.setdefault("unseal", []).extend(spec.vnodes)
                    else:
                        source.setdefault("unseal_ranges", []).extend(ranges)
                    source.setdefault("replay_files", []).extend(
                        transfer.hold_path(frag, spec.target_pu, x) for x in range(c, r)
                    )
                    source.setdefault("replay_vnodes", []).extend(spec.vnodes)
        return {
            frag: FragmentActions(
                held=dict(held.get(frag, {})),
                slots={
                    pu: SlotActions(
                        seal=tuple(sorted(a.get("seal", []))),
                        unseal=tuple(sorted(a.get("unseal", []))),
                        drop=tuple(sorted(a.get("drop", []))),
                        # by vnode, whatever the steps' order (``hot_vnodes``): a new PU's
                        # store then appends them (``_replace_vnode``) instead of searching
                        ingest=tuple(sorted(a.get("ingest", []))),
                        replay_files=tuple(dict.fromkeys(a.get("replay_files", []))),
                        replay_vnodes=tuple(sorted(a.get("replay_vnodes", []))),
                        hold_path=a.get("hold_path"),
                        seal_ranges=tuple(sorted(a.get("seal_ranges", []))),
                        unseal_ranges=tuple(sorted(a.get("unseal_ranges", []))),
                        drop_ranges=tuple(sorted(a.get("drop_ranges", []))),
                    )
                    for pu, a in slots.get(frag, {}).items()
                },
                cut=dict(cuts.get(frag, {})),
            )
            for frag in self.ledger.placements
        }

    def committed(self, epoch: int, stats: list[dict[str, Any]]) -> None:
        """After an epoch's job: record held rows, acquisitions and drops that it made durable."""
        held: dict[tuple[str, int], int] = {}
        held_bytes: dict[tuple[str, int], int] = {}
        for stat in stats:
            for vnode, rows in stat.get("held", {}).items():
                held[(stat["fragment"], int(vnode))] = rows
            for vnode, size in stat.get("held_bytes", {}).items():
                held_bytes[(stat["fragment"], int(vnode))] = size
        with self.ledger.lock:
            for op in self.ledger.running():
                changed = False
                for step in op.steps.values():
                    frag = step.spec.fragment
                    for vnode in step.spec.vnodes:
                        rows = held.get((frag, vnode))
                        if rows is not None and step.phase in (
                            StepPhase.COLLECTING,
                            StepPhase.EXPORTED,
                        ):
                            step.hold_rows[vnode] = step.hold_rows.get(vnode, 0) + rows
                            step.hold_bytes[vnode] = step.hold_bytes.get(vnode, 0) + held_bytes.get(
                                (frag, vnode), 0
                            )
                            changed = True
                    if step.returning and step.return_epoch == epoch:
                        step.enter(StepPhase.CANCELLED)  # back on its source, hold queue applied
                        changed = True
                        continue
                    if step.phase == StepPhase.ACQUIRING and step.acquire_epoch == epoch:
                        self._moved(step)
                        step.enter(StepPhase.ACQUIRED)
                        changed = True
                    if (
                        step.phase in (StepPhase.ACQUIRED, StepPhase.DROPPING)
                        and step.drop_epoch == epoch
                    ):
                        step.enter(StepPhase.DONE)
                        changed = True
                if changed:
                    self.ledger.save(op)

    def over_bound(self, step_bytes: int, pu_bytes: int) -> list[tuple[OperationState, StepState]]:
        """The collecting steps whose hold queue holds ``step_bytes`` or more, or whose target
        PU's hold queues (every holding step's, of any operation) hold ``pu_bytes`` or more.

        Exported steps are not among them: the next barrier acquires them, which empties their
        hold queues; a collecting one holds its vnodes until its export is verified.
        """
        holding = [
            (op, step)
            for op in self.ledger.running()
            if op.strategy == Strategy.LIVE
            for step in op.steps.values()
            if step.phase in STEP_HOLDING
        ]
        per_pu: dict[tuple[str, int], int] = defaultdict(int)
        for _, step in holding:
            per_pu[(step.spec.fragment, step.spec.target_pu)] += sum(step.hold_bytes.values())
        return [
            (op, step)
            for op, step in holding
            if step.phase == StepPhase.COLLECTING
            # a cancelled operation's held steps go back to their source at this barrier
            and not op.cancel_requested
            and (
                sum(step.hold_bytes.values()) >= step_bytes
                or per_pu[(step.spec.fragment, step.spec.target_pu)] >= pu_bytes
            )
        ]

    @staticmethod
    def _moved(step: StepState) -> None:
        step.keys_moved = sum(m["keys"] for m in step.exports.values())
        step.bytes_moved = sum(m["bytes"] for m in step.exports.values())

    def clean_up(self, op: OperationState) -> None:
        """Exports and hold queues of a settled operation are spent: its state file stays as the
        record of what it did. One operation per fragment at a time, so every hold queue file of
        its fragments up to its last epoch is its own."""
        at = self.ledger.durable
        at.delete_dir(f"{transfer.operation_prefix(op.operation_id)}/exports")
        last = op.finished_epoch if op.finished_epoch is not None else -1
        for name in op.fragments:
            for path in at.files(f"{transfer.RESCALE}/holdq/{name}"):
                if transfer.hold_epoch(path) <= last:
                    at.delete(path)


def _cut(
    cuts: dict[int, CutVnode],
    vnode: int,
    count: int,
    target: int,
    *,
    moved: int | None = None,
    held: int | None = None,
) -> None:
    """Add a key range, moved or held, to the cut vnode's routing."""
    cut = cuts.get(vnode, CutVnode(count, target))
    cuts[vnode] = CutVnode(
        count,
        target,
        tuple(sorted({*cut.moved, *([moved] if moved is not None else [])})),
        tuple(sorted({*cut.held, *([held] if held is not None else [])})),
    )


def _ranges_dropped(op: OperationState, epoch: int) -> dict[tuple[str, int], int]:
    """(fragment, vnode) -> how many key ranges of the cut vnode are dropped at or before
    ``epoch``: its last range's drop epoch is the one at which this reaches its count."""
    dropped: dict[tuple[str, int], int] = defaultdict(int)
    for step in op.steps.values():
        d = step.drop_epoch
        if step.spec.key_range is not None and d is not None and d <= epoch:
            dropped[(step.spec.fragment, step.spec.vnodes[0])] += 1
    return dropped
