"""Driving one operation from outside the runner: begin it, issue its steps paced by the
granularity, wait for their phases, time out a stuck step, honour cancel, finish.

Who paces what: the runner starts a pending step at a barrier only while fewer than
``steps_in_flight`` of the operation's steps hold their vnodes (from collect to acquire: the
begin payload carries the granularity), so the orchestrator is off the critical path. It issues
steps ahead, up to ``issue_ahead`` waves of ``steps_in_flight`` steps not yet acquired, and never
faster than ``bytes_per_second`` allows; the runner collects the next wave at the very barrier
that acquires the last one.

It talks to the runner only through an :class:`OperationChannel` (commands in, progress out), so
the same logic runs against the file-based control of the data plane (tests, the CLI) and against
Postgres in a Celery task. It keeps no state of its own that the runner's progress cannot rebuild:
an orchestrator that dies can be replaced by a new one for the same operation, which re-sends
(idempotently) whatever the runner has not acknowledged.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from workers.rescale.protocol import (
    STEP_ENDED,
    STEP_HOLDING,
    BeginPayload,
    CommandKind,
    Granularity,
    OperationProgress,
    OperationRef,
    Plan,
    StepPayload,
    StepPhase,
    StepProgress,
    StepSpec,
    Strategy,
    Tick,
    TickStatus,
)

# issued and not yet acquired: what the orchestrator's issue-ahead window counts
STEP_NOT_ACQUIRED = frozenset({StepPhase.PENDING, *STEP_HOLDING})


class OperationChannel(Protocol):
    """Commands out, the runner's progress in. A channel may also offer
    ``progress_since(operation_id, version) -> (progress | None, version)``: the progress with
    only the steps recorded after ``version`` (0: every one) and the version it read, so a tick
    reads what changed since the last one rather than every step."""

    def submit(self, kind: CommandKind, payload: dict[str, Any]) -> int: ...

    def progress(self, operation_id: str) -> dict[str, Any] | None: ...

    def command_status(self, command_id: int) -> tuple[str, str] | None: ...


@dataclass
class KnownSteps:
    """The steps the runner knows, as last read, and what a tick asks of them kept up to date
    as they change (a tick then costs what changed, not every step of a large operation)."""

    every: dict[int, StepProgress] = field(default_factory=dict)
    open: dict[int, StepProgress] = field(default_factory=dict)  # not ended
    # when a slot last freed: the latest time a step entered acquiring
    slot_freed: float = 0.0
    _acquiring: dict[int, float] = field(default_factory=dict)  # step -> when it entered it

    def update(self, steps: Iterable[StepProgress]) -> None:
        recount = False
        for step in steps:
            number = step.step
            self.every[number] = step
            if step.phase in STEP_ENDED:
                self.open.pop(number, None)
            else:
                self.open[number] = step
            before = self._acquiring.get(number)
            at = step.timings.get(StepPhase.ACQUIRING)
            if at is None:
                self._acquiring.pop(number, None)
            else:
                self._acquiring[number] = at
                self.slot_freed = max(self.slot_freed, at)
            # a time that went back (never, from a runner) makes the latest be looked for again
            recount |= before is not None and before == self.slot_freed and (at or 0.0) < before
        if recount:
            self.slot_freed = max(self._acquiring.values(), default=0.0)


@dataclass
class Orchestrator:
    channel: OperationChannel
    operation_id: str
    plan: Plan
    step_timeout_s: float = 300.0
    # steps issued and not yet acquired, in waves of steps_in_flight: one wave holds its vnodes
    # in the runner and the next waits there for its slots, so a barrier never finds the runner
    # without a step to start as long as the orchestrator polls once per epoch
    issue_ahead: int = 2
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time  # compared with the runner's phase-entry times
    _started: float | None = None
    _begin_command: int | None = None
    _finish_sent: bool = False
    _issued: set[int] = field(default_factory=set)  # steps this instance sent
    _known: KnownSteps = field(default_factory=KnownSteps)
    _seen: int = 0  # the channel's progress version last read (``progress_since``)
    _unseen: set[int] = field(default_factory=set)  # issued, not yet known to the runner
    _accounted: set[int] = field(default_factory=set)  # known or issued
    _accounted_bytes: int = 0  # their planned bytes
    _cursor: int = 0  # every plan step before it is known or issued
    _bytes_of_step: dict[int, int] | None = None  # the plan's, by step

    @property
    def granularity(self) -> Granularity:
        return self.plan.granularity

    def start(self) -> None:
        """Begin the operation (idempotent: the runner ignores a second begin)."""
        self._started = self.clock()
        self._begin_command = self.channel.submit(
            CommandKind.OPERATION_BEGIN,
            BeginPayload.of_plan(self.operation_id, self.plan).to_json(),
        )

    def cancel(self) -> None:
        self.channel.submit(CommandKind.OPERATION_CANCEL, OperationRef(self.operation_id).to_json())

    def tick(self) -> Tick:
        """Issue what may start now; returns what the runner's last progress says."""
        if self._started is None:
            self.start()
        assert self._started is not None
        if self._begin_command is not None:
            ack = self.channel.command_status(self._begin_command)
            if ack is not None and ack[0] == "failed" and "already begun" not in ack[1]:
                return Tick(TickStatus.FAILED, None, f"runner refused: {ack[1]}")
        progress = self._read()
        if progress is not None and progress.final:
            return Tick(TickStatus(progress.status), progress, progress.error)
        started = TickStatus.RUNNING if progress else TickStatus.STARTING
        if self.plan.request.strategy != Strategy.LIVE:
            return Tick(started, progress)
        steps = self._known
        stuck = self._stuck(steps)
        if stuck:
            if progress is not None and not progress.cancel_requested:
                self.cancel()
            return Tick(TickStatus.CANCELLING, progress, stuck)
        if progress is not None and progress.cancel_requested:
            return Tick(TickStatus.CANCELLING, progress)
        self._issue_ready(steps)
        return Tick(started, progress)

    def _read(self) -> OperationProgress | None:
        """The runner's last progress, its steps every step it knows (in the order first
        read); with a channel offering ``progress_since``, only the steps changed since the
        last read are read and merged into those kept."""
        since = getattr(self.channel, "progress_since", None)
        if since is None:
            raw = self.channel.progress(self.operation_id)
        else:
            raw, self._seen = since(self.operation_id, self._seen)
        progress = None if raw is None else OperationProgress.from_json(raw)
        if progress is None:
            return None
        self._known.update(progress.steps)
        for step in progress.steps:
            self._unseen.discard(step.step)
            self._account(step.step)
        if since is None:
            return progress
        return replace(progress, steps=tuple(self._known.every.values()), base_version=None)

    def _account(self, number: int) -> None:
        """Count a step known to the runner or issued (once) in the issue-ahead figures."""
        if number not in self._accounted:
            if self._bytes_of_step is None:
                self._bytes_of_step = {s.step: s.bytes for s in self.plan.steps}
            self._accounted.add(number)
            self._accounted_bytes += self._bytes_of_step.get(number, 0)

    def _issue_ready(self, steps: KnownSteps) -> None:
        """Issue the steps that may be issued now: up to ``issue_ahead`` waves of steps not yet
        acquired (pending in the runner, holding their vnodes, or sent and not yet seen), as fast
        as ``bytes_per_second`` allows. The runner starts them as its slots free up. The first
        waves go right behind the begin and the finish right behind the last step: the runner
        applies commands in order at one barrier and completes only when every step is done, so
        no epoch is spent waiting for replies."""
        window = self.granularity.window * max(self.issue_ahead, 1)
        # issued and not yet acquired: pending or holding in the runner, or not seen by it yet
        ahead = sum(1 for s in steps.open.values() if s.phase in STEP_NOT_ACQUIRED)
        ahead += len(self._unseen)
        issued_bytes = self._accounted_bytes
        plan = self.plan.steps
        while self._cursor < len(plan) and plan[self._cursor].step in self._accounted:
            self._cursor += 1
        due: list[StepSpec] = []
        for spec in plan[self._cursor :]:
            if spec.step in self._accounted:
                continue
            kr = spec.key_range
            # the key ranges of a cut vnode go together: once one is acquired a cancel finishes
            # the others, which the runner can only do if it has them
            sibling = (
                kr is not None
                and kr.index > 0
                and bool(due)
                and (due[-1].fragment, due[-1].vnodes) == (spec.fragment, spec.vnodes)
            )
            if not sibling and (ahead >= window or not self._rate_allows(issued_bytes)):
                break
            due.append(spec)
            ahead += 1
            issued_bytes += spec.bytes
        self._issue(due)
        while self._cursor < len(plan) and plan[self._cursor].step in self._accounted:
            self._cursor += 1
        all_issued = self._cursor == len(plan)
        if all_issued and not self._finish_sent:
            self.channel.submit(
                CommandKind.OPERATION_FINISH, OperationRef(self.operation_id).to_json()
            )
            self._finish_sent = True

    def _issue(self, specs: list[StepSpec]) -> None:
        """Send steps, in order: in one write where the channel offers ``submit_many`` (a
        wave of a large operation is hundreds of steps), else one command each."""
        if not specs:
            return
        payloads = [StepPayload(self.operation_id, spec).to_json() for spec in specs]
        submit_many = getattr(self.channel, "submit_many", None)
        if submit_many is not None:
            submit_many(CommandKind.OPERATION_STEP, payloads)
        else:
            for payload in payloads:
                self.channel.submit(CommandKind.OPERATION_STEP, payload)
        for spec in specs:
            self._issued.add(spec.step)
            if spec.step not in self._known.every:
                self._unseen.add(spec.step)
            self._account(spec.step)

    def _rate_allows(self, issued_bytes: int) -> bool:
        rate = self.granularity.bytes_per_second
        if rate is None or issued_bytes == 0:
            return True
        assert self._started is not None
        return issued_bytes <= rate * (self.clock() - self._started)

    def _stuck(self, steps: KnownSteps) -> str:
        """A step whose phase has not changed for longer than the time-out, by the runner's own
        record of when it entered the phase (so a replacement orchestrator sees it too).

        A pending step waits in the runner for a free slot, which no time-out hastens: while
        ``steps_in_flight`` steps hold their vnodes it is not timed out (their own clocks run),
        and once a slot is free its clock starts when the slot freed (the last step to leave
        the hold window entered ``acquiring`` then), or when it was issued if that is later.
        """
        now = self.wall()
        holding = sum(1 for s in steps.open.values() if s.phase in STEP_HOLDING)
        slot_freed = steps.slot_freed
        for number, step in sorted(steps.open.items()):
            phase = step.phase
            since = step.timings.get(phase)
            if phase in STEP_ENDED or since is None:
                continue
            if phase == StepPhase.PENDING:
                if holding >= self.granularity.window:
                    continue
                since = max(since, slot_freed)
            if now - since > self.step_timeout_s:
                return (
                    f"step {number} stuck in phase {str(phase)!r} for {now - since:.0f}s "
                    f"(timeout {self.step_timeout_s:.0f}s): cancelling the operation"
                )
        return ""

    def run(
        self,
        *,
        poll_s: float = 0.2,
        timeout_s: float = 3600.0,
        on_tick: Callable[[Tick], None] | None = None,
    ) -> Tick:
        """Tick until the operation ends; returns the last tick's result."""
        deadline = self.clock() + timeout_s
        while True:
            result = self.tick()
            if on_tick is not None:
                on_tick(result)
            if result.ended:
                return result
            if self.clock() > deadline:
                return Tick(TickStatus.TIMEOUT, result.progress, f"not finished after {timeout_s}s")
            time.sleep(poll_s)
