"""Operation commands from the control plane: ``operation.begin``, ``.step``, ``.cancel``,
``.finish`` (``protocol.CommandKind``).

Every command is idempotent, so an orchestrator may re-send whatever was not acknowledged. A
command that does not fit the runner's state (an unknown fragment or PU, a busy fragment, a vnode
no longer on the step's source or already moving) is refused with the reason, before anything
changes; a refused step of a running operation also cancels that operation, with the reason.
"""

from __future__ import annotations

from workers.control import Command
from workers.rescale import errors
from workers.rescale.ledger import OperationLedger, settled_operations
from workers.rescale.operation import OperationState, StepState
from workers.rescale.protocol import (
    STEP_ENDED,
    BeginPayload,
    CommandKind,
    StepPayload,
    StepPhase,
    StepSpec,
    Strategy,
)


class CommandRefused(Exception):
    """A rescale command the runner will not carry out; the message says why."""


class CommandHandler:
    def __init__(self, ledger: OperationLedger, worker_pus: set[int]) -> None:
        self.ledger = ledger
        self.worker_pus = set(worker_pus)

    def handle(self, command: Command) -> str:
        """Apply a rescale command (idempotent); returns a detail line or raises CommandRefused.
        A command for an operation that has ended also sends its final report again."""
        try:
            return self._handle(command)
        finally:
            self._report_end_again(str(command.payload.get("operation_id", "")))

    def _report_end_again(self, operation_id: str) -> None:
        """The control plane sends commands for an operation only while it thinks it runs: one
        that has ended here (and is settled: its placement is durable) was never told so, or
        its final report was lost (the runner killed between settling it and sending it). Its
        whole final report goes again, so the control plane's view ends equal to the runner's."""
        op = self.ledger.ops.get(operation_id)
        if op is None or not op.final or operation_id not in settled_operations(self.ledger.dir):
            return
        with self.ledger.lock:
            progress = self.ledger.progress(op, full=True)
        self.ledger.send(progress)

    def _handle(self, command: Command) -> str:
        payload = command.payload
        operation_id = str(payload.get("operation_id", ""))
        if not operation_id:
            raise CommandRefused(f"{command.kind}: payload has no 'operation_id'")
        with self.ledger.lock:
            if command.kind == CommandKind.OPERATION_BEGIN:
                try:
                    begin = BeginPayload.from_json(payload)
                except errors.RescaleError as exc:  # e.g. a granularity out of range
                    raise CommandRefused(f"{command.kind}: {exc}") from exc
                return self._begin(begin)
            op = self.ledger.ops.get(operation_id)
            if op is None:
                raise CommandRefused(f"operation {operation_id} was never begun on this runner")
            if command.kind == CommandKind.OPERATION_STEP:
                try:
                    return self._add_step(op, StepPayload.from_json(payload).step)
                except CommandRefused as refused:
                    self._cancel_for(op, refused)
                    raise
            if command.kind == CommandKind.OPERATION_CANCEL:
                if op.final:
                    return f"operation {operation_id} already {op.status}"
                op.cancel_requested = True
                self.ledger.save(op)
                return (
                    "cancel requested: steps being acquired finish, held steps go back to "
                    "their source, no new step starts"
                )
            if command.kind == CommandKind.OPERATION_FINISH:
                if op.final:
                    return f"operation {operation_id} already {op.status}"
                op.finish_requested = True
                self.ledger.save(op)
                return "finishing once every step is done"
        raise CommandRefused(f"unknown operation command {command.kind!r}")

    def _begin(self, begin: BeginPayload) -> str:
        operation_id = begin.operation_id
        if operation_id in self.ledger.ops:
            return f"operation {operation_id} already begun"
        placements = self.ledger.placements
        busy = self.ledger.busy_fragments()
        for name, change in begin.fragments.items():
            if name not in placements:
                raise CommandRefused(f"no stateful fragment {name!r} on this runner")
            if name in busy:
                raise CommandRefused(f"fragment {name!r} is busy with operation {busy[name]}")
            unknown = set(change.added_parallel_units) - self.worker_pus
            if unknown:
                raise CommandRefused(
                    f"{name}: parallel units {sorted(unknown)} have no executor on this runner "
                    "(their worker was lost, or has not joined since the runner started); "
                    "request again once the cluster shows them alive"
                )
            if begin.strategy == Strategy.STOP_START:
                after = change.mapping_after
                if not after or len(after) != placements[name].vnodes:
                    raise CommandRefused(f"{name}: stop_start needs a full mapping_after")
        op = OperationState(
            operation_id=operation_id,
            strategy=begin.strategy,
            fragments=dict(begin.fragments),
            granularity=begin.granularity,
        )
        self.ledger.ops[operation_id] = op
        self.ledger.save(op)
        return f"operation {operation_id} begun"

    def _cancel_for(self, op: OperationState, refused: CommandRefused) -> None:
        """A step refused while its operation runs (its target PU's worker was lost since the
        begin, say) cancels the operation, with the reason: the orchestrator sends steps in
        waves without reading each one's ack, so it would wait for the refused step for ever.
        Cancelled, held steps go back, no new step starts and it ends, the reason its error."""
        if op.final or op.cancel_requested or op.strategy != Strategy.LIVE:
            return  # ending already, or a stop-start, which no step command is part of
        op.cancel_requested = True
        op.error = f"{refused}; the operation was cancelled: request it again"
        self.ledger.save(op)

    def _add_step(self, op: OperationState, spec: StepSpec) -> str:
        if spec.step in op.steps:
            return f"step {spec.step} already issued"
        if op.final or op.cancel_requested:
            raise CommandRefused(
                f"operation {op.operation_id} is {op.status}; no new step may start"
            )
        if op.strategy != Strategy.LIVE:
            raise CommandRefused(f"operation {op.operation_id} is {op.strategy}; it has no steps")
        if spec.fragment not in op.fragments:
            raise CommandRefused(
                f"step {spec.step}: fragment {spec.fragment!r} is not in operation {op.operation_id}"
            )
        placement = self.ledger.placements[spec.fragment]
        moving = {
            v
            for other in self.ledger.running()
            for s in other.steps.values()
            if s.spec.fragment == spec.fragment
            and s.phase not in STEP_ENDED
            # the other key ranges of a cut vnode, in this operation, are its own
            and not (
                other is op
                and spec.key_range is not None
                and s.spec.key_range is not None
                and s.spec.key_range.count == spec.key_range.count
                and s.spec.key_range != spec.key_range
            )
            for v in s.spec.vnodes
        }
        for vnode in spec.vnodes:
            if not 0 <= vnode < placement.vnodes:
                raise CommandRefused(f"step {spec.step}: vnode {vnode} out of range")
            if placement.mapping[vnode] != spec.source_pu:
                raise CommandRefused(
                    f"step {spec.step}: vnode {vnode} is on PU {placement.mapping[vnode]}, "
                    f"not on PU {spec.source_pu}"
                )
            if vnode in moving:
                raise CommandRefused(f"step {spec.step}: vnode {vnode} is already moving")
        if spec.target_pu not in self.worker_pus:
            raise CommandRefused(f"step {spec.step}: target PU {spec.target_pu} does not exist")
        if spec.target_pu == spec.source_pu:
            raise CommandRefused(
                f"step {spec.step}: source and target are both PU {spec.source_pu}"
            )
        step = StepState(spec)
        step.enter(StepPhase.PENDING)
        op.steps[spec.step] = step
        self.ledger.save(op)
        return f"step {spec.step} issued"
