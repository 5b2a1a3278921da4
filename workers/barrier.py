"""The epoch barrier: where control commands take effect and an epoch's placement is decided.

Spark-free on purpose: the runner calls it at the start of every micro-batch, and the model tests
of the rescale protocol (tests/unit/workers) call the very same code with simulated epochs.

At the barrier of epoch *e*:

1. if *e* was planned already (Spark re-runs it after a crash), its recorded plan is returned
   untouched, so the re-run routes exactly as the first attempt did (I1);
2. otherwise the pending commands are applied in order (a stop, the rescale protocol's begin,
   step, cancel and finish), the executor moves operations forward and derives the epoch's
   per-PU actions, and the placements are saved;
3. the plan is written durably *before* any command is acknowledged: an acknowledged command's
   effect is always part of a recorded plan, whatever crashes afterwards.

:func:`route_slots` is the routing the epoch's job applies to every record: which PU task (Spark
partition, "slot") a vnode's records go to, held vnodes going to their step's target.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from workers.control import Command, ControlInterface
from workers.cycles import cycle_collection_paused
from workers.hashing import key_range_index, stable_hash64
from workers.membership import DecommissionRefused
from workers.pipeline.placement import (
    EpochClock,
    EpochPlan,
    FragmentActions,
    PlacementStore,
    VnodeMapping,
)
from workers.rescale.executor import CommandRefused, RescaleExecutor
from workers.rescale.protocol import OPERATION_COMMANDS, CommandKind

log = logging.getLogger("workers.barrier")


class BarrierError(Exception):
    """The checkpoint and the state directory disagree; the message says what to do."""


@dataclass(frozen=True)
class Ack:
    """A command's outcome, sent once the epoch's plan is durable."""

    command_id: int
    status: str  # "done" or "failed"
    detail: str


class Barrier:
    """Plans epochs for one pipeline's stateful fragments.

    ``placements`` is shared with the executor (it updates it in place); ``on_stop`` is called
    when a stop command is applied, ``on_placements_changed`` when an epoch's plan changes a
    fragment's PUs or mapping version (the runner re-registers its topology then, before any
    operation reports its end).
    """

    def __init__(
        self,
        pipeline: str,
        control: ControlInterface,
        executor: RescaleExecutor,
        placements: dict[str, VnodeMapping],
        store: PlacementStore,
        *,
        on_stop: Callable[[], None] = lambda: None,
        on_placements_changed: Callable[[], None] = lambda: None,
        on_barrier: Callable[[int], None] = lambda epoch: None,
        on_decommission: Callable[[Command], str] | None = None,
        on_snapshot: Callable[[Command], str] | None = None,
        clock: Callable[[int], EpochClock] = lambda epoch: EpochClock(),
    ) -> None:
        self.pipeline = pipeline
        self.control = control
        self.executor = executor
        self.placements = placements
        self.store = store
        self._on_stop = on_stop
        self._on_placements_changed = on_placements_changed
        self._on_barrier = on_barrier
        self._on_decommission = on_decommission
        self._on_snapshot = on_snapshot
        self._clock = clock

    def plan(self, epoch: int) -> EpochPlan:
        """The placements and actions of ``epoch``: the recorded plan if it is a re-run."""
        last = self.store.last_plan()
        if last is not None and last.epoch == epoch:
            log.warning("epoch %d is a re-run: reusing its recorded placement", epoch)
            # an executor lost in its first run (why it re-runs, often): its PUs' new homes
            self._on_barrier(epoch)
            return last
        if last is not None and epoch < last.epoch:
            raise BarrierError(
                f"Spark asks for epoch {epoch} but epoch {last.epoch} was already planned: the "
                f"checkpoint is older than the state directory {self.store.dir}"
            )
        # workers that joined are bootstrapped before any command of this barrier is read: a
        # change may use their PUs from this epoch on, never in one that has already begun
        self._on_barrier(epoch)
        applied: dict[int, Ack] = {}

        def new_commands() -> list[Command]:
            return [c for c in self.control.poll_commands(self.pipeline) if c.id not in applied]

        with cycle_collection_paused():  # a wave of step commands (see workers.cycles)
            for command in new_commands():
                applied[command.id] = self.apply(command, epoch)
        # A step whose hold queue is full keeps this barrier waiting for its export; a command
        # arriving meanwhile (a cancel, when the export cannot finish) is applied, then it waits
        # again if anything is still to be waited for (docs/rescale.md, "Bounded hold queues").
        while not self.executor.bound_hold_queues(interrupt=lambda: bool(new_commands())):
            for command in new_commands():
                applied[command.id] = self.apply(command, epoch)
        acks = list(applied.values())
        before = {n: (p.version, p.parallel_units) for n, p in self.placements.items()}
        with cycle_collection_paused():  # every step one phase on, and their report
            actions = self.executor.plan(epoch, hold_queues_waited=True)
        self.store.save(self.placements)
        if before != {n: (p.version, p.parallel_units) for n, p in self.placements.items()}:
            self._on_placements_changed()
        self.executor.placements_saved()
        plan = EpochPlan(epoch, dict(self.placements), actions, self._clock(epoch))
        self.store.save_plan(plan)
        if acks:
            self.control.ack_commands([(a.command_id, a.status, a.detail) for a in acks])
        return plan

    def apply(self, command: Command, epoch: int) -> Ack:
        """Apply one command at the barrier of ``epoch``; a refusal is an ack, never a raise."""
        if command.kind == CommandKind.STOP:
            self._on_stop()
            return Ack(command.id, "done", f"stopping after epoch {epoch - 1}")
        if command.kind in OPERATION_COMMANDS:
            try:
                return Ack(command.id, "done", self.executor.handle(command))
            except CommandRefused as exc:
                return Ack(command.id, "failed", str(exc))
            except (KeyError, TypeError, ValueError) as exc:
                return Ack(command.id, "failed", f"malformed {command.kind} command: {exc!r}")
        if command.kind == CommandKind.WORKER_DECOMMISSION and self._on_decommission:
            try:
                return Ack(command.id, "done", self._on_decommission(command))
            except DecommissionRefused as exc:
                return Ack(command.id, "failed", str(exc))
        if command.kind == CommandKind.SNAPSHOT and self._on_snapshot:
            return Ack(command.id, "done", self._on_snapshot(command))
        return Ack(
            command.id,
            "failed",
            f"unknown command {command.kind!r}; this runner knows: {', '.join(CommandKind)}",
        )


def route_slots(placement: VnodeMapping, actions: FragmentActions) -> list[int]:
    """For each vnode, the slot (Spark partition = PU task) its records go to this epoch: its
    owner's, or for a held vnode its step's target's, whose task appends them to the hold queue."""
    slot_of = {pu: i for i, pu in enumerate(placement.parallel_units)}
    slots = placement.slot_of_vnode()
    for vnode, target in actions.held.items():
        slots[vnode] = slot_of[target]
    return slots


def route_record(
    placement: VnodeMapping, actions: FragmentActions, slots: list[int], key: str, vnode: int
) -> tuple[int, bool]:
    """(slot, held) of one record, as the epoch's job routes it in Spark SQL: ``slots`` from
    :func:`route_slots`, except for a cut vnode's key ranges in flight or moved, which go to
    the cut's target (held for the range in flight)."""
    cut = actions.cut.get(vnode)
    if cut is not None:
        index = key_range_index(stable_hash64(key), cut.count)
        if index in cut.held or index in cut.moved:
            return placement.parallel_units.index(cut.target), index in cut.held
    return slots[vnode], vnode in actions.held


def owned_vnodes(placement: VnodeMapping, actions: FragmentActions) -> tuple[tuple[int, ...], ...]:
    """For each PU (in slot order), the vnodes whose records its task applies this epoch: those
    it owns that are not held, and a cut vnode's on its target once a key range of it moved
    there (on its source too: its other ranges stay there)."""
    owned = []
    for pu in placement.parallel_units:
        vnodes = [v for v in placement.vnodes_of(pu) if v not in actions.held]
        mine = set(vnodes)
        vnodes += [v for v, cut in actions.cut.items() if cut.target == pu and v not in mine]
        owned.append(tuple(sorted(vnodes)))
    return tuple(owned)
