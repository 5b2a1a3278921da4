"""Rescale commands from the control plane: ``rescale.begin``, ``.step``, ``.cancel``, ``.finish``.

Every command is idempotent, so an orchestrator may re-send whatever was not acknowledged. A
command that does not fit the runner's state (an unknown fragment or PU, a busy fragment, a vnode
no longer on the step's source or already moving) is refused with the reason, before anything
changes.
"""

from __future__ import annotations

from typing import Any

from workers.control import Command
from workers.rescale.ledger import OperationLedger
from workers.rescale.operation import OperationState, StepState
from workers.rescale.planner import StepSpec


class CommandRefused(Exception):
    """A rescale command the runner will not carry out; the message says why."""


class CommandHandler:
    def __init__(self, ledger: OperationLedger, worker_pus: set[int]) -> None:
        self.ledger = ledger
        self.worker_pus = set(worker_pus)

    def handle(self, command: Command) -> str:
        """Apply a rescale command (idempotent); returns a detail line or raises CommandRefused."""
        payload = command.payload
        op_id = str(payload.get("operation", ""))
        if not op_id:
            raise CommandRefused(f"{command.kind}: payload has no 'operation'")
        with self.ledger.lock:
            if command.kind == "rescale.begin":
                return self._begin(op_id, payload)
            op = self.ledger.ops.get(op_id)
            if op is None:
                raise CommandRefused(f"operation {op_id} was never begun on this runner")
            if command.kind == "rescale.step":
                return self._add_step(op, StepSpec.from_json(payload["step"]))
            if command.kind == "rescale.cancel":
                if op.final:
                    return f"operation {op_id} already {op.status}"
                op.cancel_requested = True
                self.ledger.save(op)
                return "cancel requested: the steps in flight finish, no new step starts"
            if command.kind == "rescale.finish":
                if op.final:
                    return f"operation {op_id} already {op.status}"
                op.finish_requested = True
                self.ledger.save(op)
                return "finishing once every step is done"
        raise CommandRefused(f"unknown rescale command {command.kind!r}")

    def _begin(self, op_id: str, payload: dict[str, Any]) -> str:
        if op_id in self.ledger.ops:
            return f"operation {op_id} already begun"
        fragments: dict[str, dict[str, Any]] = payload["fragments"]
        placements = self.ledger.placements
        busy = self.ledger.busy_fragments()
        for name, change in fragments.items():
            if name not in placements:
                raise CommandRefused(f"no stateful fragment {name!r} on this runner")
            if name in busy:
                raise CommandRefused(f"fragment {name!r} is busy with operation {busy[name]}")
            unknown = set(change.get("added", [])) - self.worker_pus
            if unknown:
                raise CommandRefused(f"{name}: parallel units {sorted(unknown)} do not exist")
            if payload.get("strategy") == "stop_start":
                after = change.get("mapping_after")
                if not after or len(after) != placements[name].vnodes:
                    raise CommandRefused(f"{name}: stop_start needs a full mapping_after")
        op = OperationState(id=op_id, strategy=payload.get("strategy", "live"), fragments=fragments)
        self.ledger.ops[op_id] = op
        self.ledger.save(op)
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
        placement = self.ledger.placements[spec.fragment]
        moving = {
            v
            for other in self.ledger.running()
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
        self.ledger.save(op)
        return f"step {spec.id} issued"
