"""Where a step and an operation are: phases, statuses, strategies, and how a phase routes
its vnodes' records."""

from __future__ import annotations

import enum


# -- enums ---------------------------------------------------------------------------------------
class StepPhase(enum.StrEnum):
    """A step's phases, in order (DESIGN §3, docs/rescale.md "Live")."""

    PLANNED = "planned"  # control plane only: in the plan, not yet issued to the runner
    PENDING = "pending"  # issued, not started
    COLLECTING = "collecting"  # held from collect_epoch; the source's copy sealed and exporting
    EXPORTED = "exported"  # every vnode's export written and verified
    ACQUIRING = "acquiring"  # the target ingests and replays at acquire_epoch
    ACQUIRED = "acquired"  # that epoch has committed
    DROPPING = "dropping"  # the source deletes the vnodes' ranges at drop_epoch
    DONE = "done"  # that epoch has committed
    # never started, or returned to its source before it was acquired: the operation was cancelled
    CANCELLED = "cancelled"


# a step whose vnodes are in transit (it keeps the operation from completing)
STEP_IN_FLIGHT = frozenset(
    {
        StepPhase.COLLECTING,
        StepPhase.EXPORTED,
        StepPhase.ACQUIRING,
        StepPhase.ACQUIRED,
        StepPhase.DROPPING,
    }
)
# a step holds its vnodes (sealed at the source, their records in hold queues) from its
# collect epoch up to its acquire epoch: these are the steps counted against steps_in_flight.
# A pending step waits in the runner for a slot; at the barrier that acquires a step (it is then
# acquiring: its vnodes route to the target) the runner may collect the next one
STEP_HOLDING = frozenset({StepPhase.COLLECTING, StepPhase.EXPORTED})
STEP_ENDED = frozenset({StepPhase.DONE, StepPhase.CANCELLED})


class Routing(enum.StrEnum):
    """Where the records of a vnode go while a step moves it (docs/rescale.md, "Live")."""

    SOURCE = "source"
    HOLD_QUEUE = "hold_queue"
    TARGET = "target"


ROUTING_BY_PHASE: dict[StepPhase, Routing] = {
    StepPhase.PLANNED: Routing.SOURCE,
    StepPhase.PENDING: Routing.SOURCE,
    StepPhase.COLLECTING: Routing.HOLD_QUEUE,
    StepPhase.EXPORTED: Routing.HOLD_QUEUE,
    StepPhase.ACQUIRING: Routing.TARGET,
    StepPhase.ACQUIRED: Routing.TARGET,
    StepPhase.DROPPING: Routing.TARGET,
    StepPhase.DONE: Routing.TARGET,
    StepPhase.CANCELLED: Routing.SOURCE,
}


class OperationStatus(enum.StrEnum):
    """An operation's status. The control plane uses all of them; the runner only knows an
    operation once it has begun (running) and until it ends (a FINAL status)."""

    PENDING = "pending"  # accepted, waiting for an orchestrator
    RUNNING = "running"
    CANCELLING = "cancelling"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    FAILED = "failed"


FINAL = frozenset({OperationStatus.COMPLETED, OperationStatus.CANCELLED, OperationStatus.FAILED})


class TickStatus(enum.StrEnum):
    """What one orchestrator tick found: an operation status, or that the runner has not
    reported yet (starting), or that the orchestrator gave up waiting (timeout)."""

    STARTING = "starting"
    RUNNING = "running"
    CANCELLING = "cancelling"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    FAILED = "failed"
    TIMEOUT = "timeout"


class Strategy(enum.StrEnum):
    LIVE = "live"  # epoch-aligned ICADD, step by step
    STOP_START = "stop_start"  # one barrier: snapshot, clear, restore


class StopStartPhase(enum.StrEnum):
    """A stop-start operation's durable phases (a live operation stays ``begun``)."""

    BEGUN = "begun"
    SNAPSHOTTED = "snapshotted"
    CLEARED = "cleared"  # no longer entered (the restore clears): an older ledger may hold it
    RESTORED = "restored"
