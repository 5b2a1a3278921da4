"""An operation's durable state on the runner's side: its steps and the epoch of each phase.

A step's phases, in order (DESIGN §3):

``pending``    issued, not started: it waits for a barrier with a free slot (fewer than the
               granularity's ``steps_in_flight`` steps of the operation collecting or exported);
``collecting`` held from ``collect_epoch``: its records go to the hold queue, the source's copy is
               sealed and being exported;
``exported``   every vnode's export is written and verified (key count and checksum);
``acquiring``  the target ingests the exports and replays the hold queue at ``acquire_epoch``,
               from which the vnodes route to the target (the mapping version moves forward);
``acquired``   that epoch has committed;
``dropping``   the source deletes the vnodes' ranges at ``drop_epoch``;
``done``       that epoch has committed;
``cancelled``  never started (the operation was cancelled first), or returned to its source: a
               cancel found it held and not yet acquired, so at ``return_epoch`` the source
               unsealed its vnodes and applied the hold queue (docs/rescale.md, "Cancel").

The epochs are what makes this safe to repeat: the plan of an epoch is a pure function of them,
so a re-run of an epoch after a crash acts exactly as the first run did.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workers.pipeline.placement import write_json_atomic
from workers.rescale.protocol import (
    FINAL,
    STEP_HOLDING,
    STEP_IN_FLIGHT,
    FragmentBegin,
    Granularity,
    OperationProgress,
    OperationStatus,
    StepPhase,
    StepProgress,
    StepSpec,
    StopStartPhase,
    Strategy,
    shallow_fields,
)


@dataclass
class StepState:
    spec: StepSpec
    phase: StepPhase = StepPhase.PENDING
    collect_epoch: int | None = None
    acquire_epoch: int | None = None
    drop_epoch: int | None = None
    return_epoch: int | None = None  # a cancelled held step: the source takes its vnodes back
    exports: dict[int, dict[str, Any]] = field(default_factory=dict)  # vnode -> manifest
    hold_rows: dict[int, int] = field(default_factory=dict)  # vnode -> records held
    hold_bytes: dict[int, int] = field(default_factory=dict)  # vnode -> bytes held
    keys_moved: int = 0
    bytes_moved: int = 0
    timings: dict[str, float] = field(default_factory=dict)  # phase -> unix time entered
    error: str = ""

    def enter(self, phase: StepPhase) -> None:
        self.phase = phase
        self.timings[phase] = time.time()

    def holds(self, epoch: int) -> bool:
        """Whether the step's vnodes are held in ``epoch``: routed to the target's hold queue,
        sealed at the source (``collect_epoch <= epoch < acquire_epoch``, or ``return_epoch``)."""
        c = self.collect_epoch
        end = self.acquire_epoch if self.acquire_epoch is not None else self.return_epoch
        return c is not None and c <= epoch and (end is None or epoch < end)

    @property
    def returning(self) -> bool:
        """Held, cancelled, and given back to its source at ``return_epoch`` (not yet
        committed): nothing exports or acquires it any more."""
        return self.return_epoch is not None and self.phase != StepPhase.CANCELLED

    def to_json(self) -> dict[str, Any]:
        data = shallow_fields(self)
        data["spec"] = self.spec.to_json()
        data["exports"] = {str(v): dict(m) for v, m in self.exports.items()}
        data["hold_rows"] = {str(v): n for v, n in self.hold_rows.items()}
        data["hold_bytes"] = {str(v): n for v, n in self.hold_bytes.items()}
        data["timings"] = dict(self.timings)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StepState:
        data = dict(data)
        data["spec"] = StepSpec.from_json(data["spec"])
        data["phase"] = StepPhase(data["phase"])
        data["exports"] = {int(v): m for v, m in data.get("exports", {}).items()}
        data["hold_rows"] = {int(v): n for v, n in data.get("hold_rows", {}).items()}
        data["hold_bytes"] = {int(v): n for v, n in data.get("hold_bytes", {}).items()}
        return cls(**data)

    def progress(self) -> StepProgress:
        """What the control plane shows of this step."""
        return StepProgress(
            step=self.spec.step,
            fragment=self.spec.fragment,
            source_pu=self.spec.source_pu,
            target_pu=self.spec.target_pu,
            vnodes=self.spec.vnodes,
            phase=self.phase,
            collect_epoch=self.collect_epoch,
            acquire_epoch=self.acquire_epoch,
            drop_epoch=self.drop_epoch,
            keys_moved=self.keys_moved,
            bytes_moved=self.bytes_moved,
            hold_queue=sum(self.hold_rows.values()),
            hold_bytes=sum(self.hold_bytes.values()),
            per_vnode={
                str(v): {
                    "keys": self.exports.get(v, {}).get("keys"),
                    "bytes": self.exports.get(v, {}).get("bytes"),
                    "hold_queue": self.hold_rows.get(v, 0),
                    "hold_bytes": self.hold_bytes.get(v, 0),
                }
                for v in self.spec.vnodes
            },
            timings=dict(self.timings),
            error=self.error,
            key_range=self.spec.key_range,
        )


@dataclass
class OperationState:
    """One rescale operation as the runner executes it."""

    operation_id: str
    strategy: Strategy
    fragments: dict[str, FragmentBegin]
    # from the begin payload; None (an older control plane): no bound on the steps held at once
    granularity: Granularity | None = None
    status: OperationStatus = OperationStatus.RUNNING  # then one of FINAL
    steps: dict[int, StepState] = field(default_factory=dict)
    cancel_requested: bool = False
    finish_requested: bool = False
    begun_epoch: int | None = None
    finished_epoch: int | None = None
    phase: StopStartPhase = StopStartPhase.BEGUN  # a live operation stays begun
    # stop-start: what the restore really moved (vnodes whose owner changed, their keys, bytes);
    # a live operation counts its steps instead
    restored_moves: tuple[int, int, int] = (0, 0, 0)
    # stop-start: the Spark executors its snapshot, clear and restore tasks ran on
    executors: tuple[str, ...] = ()
    error: str = ""
    created_at: float = field(default_factory=time.time)
    # the steps whose hold queue reached its bound: the barrier waits for their exports, and the
    # stream with it (docs/rescale.md, "Bounded hold queues"); empty when nothing waits
    hold_queue_full: tuple[int, ...] = ()

    @property
    def final(self) -> bool:
        return self.status in FINAL

    def in_flight(self) -> list[StepState]:
        return [s for s in self.steps.values() if s.phase in STEP_IN_FLIGHT]

    def split_vnodes(self) -> set[tuple[str, int]]:
        """(fragment, vnode) of the cut vnodes of which a key range has been acquired: part of
        the vnode is on its target already. A cancel finishes their other ranges rather than
        giving them back: a mapping names one owner per vnode (I5)."""
        return {
            (s.spec.fragment, s.spec.vnodes[0])
            for s in self.steps.values()
            if s.spec.key_range is not None and s.acquire_epoch is not None
        }

    def startable(self) -> list[StepState]:
        """The pending steps a barrier may collect now, in step order: as many as there are free
        slots, a slot being one of ``steps_in_flight`` steps holding their vnodes. A step acquired
        at a barrier frees its slot at that barrier, so call this after moving steps forward.

        The key ranges of a cut vnode move one after the other: a range is collected once the
        one before it is acquired, so the vnode's records in a hold queue are one range's. Once
        a cancel is requested, only the ranges of split vnodes still start."""
        if self.final:
            return []
        pending = sorted(
            (s for s in self.steps.values() if s.phase == StepPhase.PENDING),
            key=lambda s: s.spec.step,
        )
        if self.cancel_requested:
            split = self.split_vnodes()
            pending = [s for s in pending if (s.spec.fragment, s.spec.vnodes[0]) in split]
        # one pass: the steps holding, and the cut vnodes of which a range is held
        holding = [s for s in self.steps.values() if s.phase in STEP_HOLDING]
        free = len(pending)
        if self.granularity is not None:
            free = max(self.granularity.window - len(holding), 0)
        busy = {(s.spec.fragment, s.spec.vnodes[0]) for s in holding if s.spec.key_range}
        chosen: list[StepState] = []
        for step in pending:
            if len(chosen) >= free:
                break
            if step.spec.key_range is not None:
                cut = (step.spec.fragment, step.spec.vnodes[0])
                if cut in busy:
                    continue
                busy.add(cut)
            chosen.append(step)
        return chosen

    def to_json(self) -> dict[str, Any]:
        data = shallow_fields(self)
        data["steps"] = {str(i): s.to_json() for i, s in self.steps.items()}
        data["fragments"] = {n: f.to_json() for n, f in self.fragments.items()}
        data["granularity"] = None if self.granularity is None else self.granularity.to_json()
        data["restored_moves"] = tuple(self.restored_moves)
        data["executors"] = list(self.executors)
        data["hold_queue_full"] = list(self.hold_queue_full)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> OperationState:
        data = dict(data)
        data["steps"] = {int(i): StepState.from_json(s) for i, s in data.get("steps", {}).items()}
        data["fragments"] = {n: FragmentBegin.from_json(f) for n, f in data["fragments"].items()}
        granularity = data.get("granularity")
        data["granularity"] = None if granularity is None else Granularity.parse(granularity)
        data["strategy"] = Strategy(data["strategy"])
        data["status"] = OperationStatus(data["status"])
        data["phase"] = StopStartPhase(data["phase"])
        data["restored_moves"] = tuple(data.get("restored_moves", (0, 0, 0)))
        data["executors"] = tuple(data.get("executors", ()))
        data["hold_queue_full"] = tuple(data.get("hold_queue_full", ()))
        return cls(**data)

    def progress(self, *, steps: bool = True) -> OperationProgress:
        """The operation as reported, with every step (``steps``) or none (the figures alone:
        a report's steps are chosen by ``workers.rescale.reports``)."""
        ordered = sorted(self.steps.values(), key=lambda s: s.spec.step) if steps else []
        every = self.steps.values()
        if self.strategy == Strategy.STOP_START:
            vnodes, keys, moved_bytes = self.restored_moves
        else:
            vnodes = sum(len(s.spec.completes_vnodes) for s in every if s.phase == StepPhase.DONE)
            keys = sum(s.keys_moved for s in every)
            moved_bytes = sum(s.bytes_moved for s in every)
        return OperationProgress(
            operation_id=self.operation_id,
            strategy=self.strategy,
            fragments=tuple(sorted(self.fragments)),
            status=self.status,
            phase=self.phase,
            cancel_requested=self.cancel_requested,
            begun_epoch=self.begun_epoch,
            finished_epoch=self.finished_epoch,
            steps=tuple(s.progress() for s in ordered),
            vnodes_moved=vnodes,
            keys_moved=keys,
            bytes_moved=moved_bytes,
            error=self.error,
            executors=self.executors,
            hold_queue_full=self.hold_queue_full,
        )


class OperationStore:
    """``<pipeline>/rescale/op-<operation_id>/state.json`` per operation."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root) / "rescale"

    def op_dir(self, operation_id: str) -> Path:
        return self.root / f"op-{operation_id}"

    def save(self, op: OperationState) -> None:
        write_json_atomic(self.op_dir(op.operation_id) / "state.json", op.to_json())

    def load_all(self) -> dict[str, OperationState]:
        ops: dict[str, OperationState] = {}
        if not self.root.is_dir():
            return ops
        for path in sorted(self.root.glob("op-*/state.json")):
            op = OperationState.from_json(json.loads(path.read_text("utf-8")))
            ops[op.operation_id] = op
        return ops
