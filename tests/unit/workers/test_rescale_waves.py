"""Waves of steps in the live protocol: a step holds its vnodes only from its collect epoch to its
acquire epoch, the runner starts a pending step as soon as a slot of ``steps_in_flight`` frees up
(at the very barrier where an earlier step is acquired), and the orchestrator issues steps ahead
of the runner's slots, so a wave of steps costs one epoch when exports finish within an epoch.

The simulation is the runner's own loop without Spark (``rescale_sim``): exports run between
epochs, as a background export of a small vnode finishes within an epoch on a real runner.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import pytest

from tests.unit.workers.rescale_sim import FRAGMENT, Crash
from tests.unit.workers.test_rescale_protocol import Channel, Harness, check_final, make_plan
from workers.pipeline.placement import VnodeMapping
from workers.rescale.orchestrator import Orchestrator
from workers.rescale.planner import estimate_seconds, plan_request
from workers.rescale.protocol import (
    Granularity,
    OperationProgress,
    OperationRequest,
    OperationStatus,
    Plan,
    StepPhase,
    StepProgress,
    StopStartPhase,
    Strategy,
)
from workers.rescale.request import ClusterView, FragmentView

VNODES = 256
KEYS = [f"key{i}" for i in range(1000)]
PER_EPOCH = 80
FLUID_8 = {"vnodes_per_step": 1, "steps_in_flight": 8}


def started(root: Path) -> Harness:
    h = Harness(root, initial=[0, 1], vnodes=VNODES, keys=KEYS, per_epoch=PER_EPOCH)
    for _ in range(3):
        h.run_epoch()
    return h


def held_steps(h: Harness, epoch: int) -> int:
    """Steps of the operation whose vnodes were held in ``epoch`` (collect <= epoch < acquire)."""
    return sum(s.holds(epoch) for op in h.sim.executor.ops.values() for s in op.steps.values())


def crash_planning_once(h: Harness) -> None:
    """The runner dies at the barrier after moving its operations forward (their state files
    are saved) but before the epoch's plan is recorded: the re-run epoch plans again."""
    store = h.sim.barrier.store
    save_plan = store.save_plan

    def dying(plan: Any) -> None:
        store.save_plan = save_plan  # type: ignore[method-assign]
        raise Crash(f"crash before the plan of epoch {plan.epoch} is recorded")

    store.save_plan = dying  # type: ignore[method-assign]


def run_operation(
    h: Harness, granularity: dict[str, Any] | str, *, seed: int | None = None
) -> tuple[dict[str, Any], Plan, dict[str, int]]:
    """Drive a 2→4 scale-out to its end, one orchestrator tick and one export pass between
    epochs; with ``seed``, crash and restart the runner, replace the orchestrator and delay
    exports at random. Returns the final progress, the plan and what was injected."""
    plan = make_plan(h.sim, "scale_out", {"granularity": granularity})
    steps_in_flight = plan.request.granularity.steps_in_flight
    orch = Orchestrator(Channel(h.sim), "op1", plan)
    rng = random.Random(seed)
    injected = dict.fromkeys(
        ("orchestrators", "restarts", "planning_crashes", "crashes", "late_exports"), 0
    )
    for _ in range(400):
        if seed is not None and rng.random() < 0.15:
            orch = Orchestrator(Channel(h.sim), "op1", plan)  # a new Celery worker takes over
            injected["orchestrators"] += 1
        orch.channel = Channel(h.sim)
        if orch.tick().ended:
            break
        crash = None
        if seed is not None:
            roll = rng.random()
            if roll < 0.15:
                h.restart()  # between epochs
                injected["restarts"] += 1
            elif roll < 0.3:
                crash_planning_once(h)
                injected["planning_crashes"] += 1
            elif roll < 0.5:
                crash = rng.randrange(4)  # after 0 to 3 of the epoch's 4 tasks committed
                injected["crashes"] += 1
        h.run_epoch(crash_after=crash)
        assert held_steps(h, h.epoch - 1) <= steps_in_flight, (
            f"more than {steps_in_flight} steps held in epoch {h.epoch - 1}"
        )
        if seed is not None and rng.random() < 0.2:
            injected["late_exports"] += 1  # the export did not finish within this epoch
        else:
            h.sim.executor.run_exports()
    else:
        pytest.fail("the operation did not end in 400 epochs")
    h.run_epoch()
    h.run_epoch()
    progress = check_final(h, plan, "op1")
    assert progress["status"] == "completed"
    return progress, plan, injected


def epochs_of(progress: dict[str, Any]) -> int:
    """Epochs from the barrier that began the operation to the one that completed it."""
    return int(progress["finished_epoch"]) - int(progress["begun_epoch"])


@pytest.mark.parametrize(
    "granularity", ["batched", "all_at_once", {"vnodes_per_step": 5, "steps_in_flight": 3}]
)
def test_a_wave_of_steps_costs_one_epoch(tmp_path: Path, granularity: dict | str) -> None:
    h = started(tmp_path)
    progress, plan, _ = run_operation(h, granularity)
    waves = math.ceil(len(plan.steps) / plan.request.granularity.steps_in_flight)
    # one barrier per wave collects it (and acquires the wave before), then the last wave's
    # acquire (and the drop of the source copy, in the same epoch) and the completion: nothing
    # waits for the orchestrator
    assert epochs_of(progress) <= waves + 1, (
        f"{len(plan.steps)} steps in {waves} waves took {epochs_of(progress)} epochs"
    )
    steps = progress["steps"]
    assert all(s["acquire_epoch"] - s["collect_epoch"] == 1 for s in steps), (
        "each step holds its records for one epoch"
    )
    assert all(s["drop_epoch"] == s["acquire_epoch"] for s in steps)


def test_the_dry_run_estimate_counts_one_epoch_per_wave() -> None:
    plan = plan_of(FLUID_8)
    granularity = plan.request.granularity
    steps = list(plan.steps)
    assert estimate_seconds(steps, granularity, bytes_per_s=math.inf, epoch_s=1.0) == 128 / 8 + 1


def test_fluid_scale_out_of_256_vnodes_with_8_in_flight(tmp_path: Path) -> None:
    h = started(tmp_path)
    progress, plan, _ = run_operation(h, FLUID_8)
    assert len(plan.steps) == 128 and progress["vnodes_moved"] == 128
    assert epochs_of(progress) <= 256 // 8, "about 256 / 8 epochs, not 2 × 256 / 8"
    assert epochs_of(progress) <= 128 // 8 + 1
    collects: dict[int, int] = {}
    for s in progress["steps"]:
        collects[s["collect_epoch"]] = collects.get(s["collect_epoch"], 0) + 1
    assert set(collects.values()) == {8}, "every barrier collects a full wave of 8 steps"


@pytest.mark.parametrize("seed", [2, 3, 5])
def test_fluid_waves_survive_crashes_restarts_and_late_exports(tmp_path: Path, seed: int) -> None:
    h = started(tmp_path)
    progress, plan, injected = run_operation(h, FLUID_8, seed=seed)
    assert all(injected.values()), injected
    assert progress["vnodes_moved"] == 128
    # a crash re-runs the same epoch and a restart loses none: only a late export delays
    waves = math.ceil(len(plan.steps) / 8)
    assert epochs_of(progress) <= waves + 1 + injected["late_exports"]


# -- the orchestrator's side: issuing ahead, pacing and the stuck-step watchdog -----------------
class FakeChannel:
    """The runner as the orchestrator sees it: a progress report it is handed."""

    def __init__(self) -> None:
        self.submitted: list[tuple[str, dict[str, Any]]] = []
        self.report: dict[str, Any] | None = None

    def submit(self, kind: str, payload: dict[str, Any]) -> int:
        self.submitted.append((kind, payload))
        return len(self.submitted)

    def progress(self, operation_id: str) -> dict[str, Any] | None:
        return self.report

    def command_status(self, command_id: int) -> tuple[str, str] | None:
        return None

    def steps_sent(self) -> list[int]:
        return [p["step"]["step"] for k, p in self.submitted if k == "operation.step"]


def plan_of(granularity: dict[str, Any]) -> Plan:
    """A 2→4 scale-out of 256 vnodes holding 10 keys and 1000 bytes each."""
    mapping = VnodeMapping.initial(FRAGMENT, VNODES, [0, 1])
    cluster = ClusterView(
        pu_worker={pu: "w" for pu in range(4)},
        worker_alive={"w": True},
        fragments={
            FRAGMENT: FragmentView(
                FRAGMENT,
                True,
                mapping.parallel_units,
                mapping.mapping,
                {v: (10, 1000) for v in range(VNODES)},
            )
        },
    )
    request = OperationRequest.parse(
        {"changes": {FRAGMENT: {"added_parallel_units": [2, 3]}}, "granularity": granularity}
    )
    return plan_request(request, cluster)


def report(plan: Plan, phases: dict[int, tuple[StepPhase, dict[str, float]]]) -> dict[str, Any]:
    by_number = {s.step: s for s in plan.steps}
    return OperationProgress(
        operation_id="op1",
        strategy=Strategy.LIVE,
        fragments=tuple(plan.fragments),
        status=OperationStatus.RUNNING,
        phase=StopStartPhase.BEGUN,
        steps=tuple(
            StepProgress(
                step=n,
                fragment=by_number[n].fragment,
                source_pu=by_number[n].source_pu,
                target_pu=by_number[n].target_pu,
                vnodes=by_number[n].vnodes,
                phase=phase,
                timings=timings,
            )
            for n, (phase, timings) in sorted(phases.items())
        ),
    ).to_json()


def test_the_orchestrator_issues_a_bounded_window_ahead() -> None:
    plan = plan_of({"vnodes_per_step": 1, "steps_in_flight": 3})
    now = 1000.0
    channel = FakeChannel()
    orch = Orchestrator(channel, "op1", plan, wall=lambda: now)
    orch.tick()
    assert channel.steps_sent() == [1, 2, 3, 4, 5, 6], "two waves behind the begin"
    # the runner holds 1-3 and waits with 4-6 for a slot: nothing more to send
    channel.report = report(
        plan,
        {n: (StepPhase.COLLECTING if n <= 3 else StepPhase.PENDING, {}) for n in range(1, 7)},
    )
    orch.tick()
    assert channel.steps_sent() == [1, 2, 3, 4, 5, 6]
    # 1-3 acquired at a barrier that collected 4-6: one more wave may wait in the runner
    channel.report = report(
        plan,
        {
            n: (StepPhase.ACQUIRING if n <= 3 else StepPhase.COLLECTING, {"acquiring": now})
            for n in range(1, 7)
        },
    )
    assert orch.tick().error == ""
    assert channel.steps_sent() == list(range(1, 10))


def test_bytes_per_second_still_paces_issuing() -> None:
    plan = plan_of({"vnodes_per_step": 1, "steps_in_flight": 8, "bytes_per_second": 100})
    now = [0.0]
    channel = FakeChannel()
    orch = Orchestrator(channel, "op1", plan, clock=lambda: now[0])
    orch.tick()
    assert channel.steps_sent() == [1], "the first step goes at once, the rest when the rate allows"
    now[0] = 9.9
    orch.tick()
    assert channel.steps_sent() == [1], "step 1's 1000 bytes take 10 s at 100 bytes per second"
    now[0] = 10.0
    orch.tick()
    assert channel.steps_sent() == [1, 2]
    now[0] = 1000.0
    orch.tick()
    assert channel.steps_sent() == list(range(1, 17)), "and never more than the window ahead"


def test_a_step_waiting_for_a_slot_is_not_stuck() -> None:
    plan = plan_of({"vnodes_per_step": 1, "steps_in_flight": 1})
    now = 10_000.0
    channel = FakeChannel()
    orch = Orchestrator(channel, "op1", plan, step_timeout_s=60, wall=lambda: now)
    long_ago = {"pending": now - 600}
    # step 1 holds the only slot (recently): step 2 has waited long, but for the slot
    channel.report = report(
        plan,
        {
            1: (StepPhase.COLLECTING, {"collecting": now - 5}),
            2: (StepPhase.PENDING, long_ago),
        },
    )
    assert orch.tick().error == ""
    # the slot freed 5 s ago: step 2's clock starts then
    channel.report = report(
        plan,
        {
            1: (StepPhase.ACQUIRING, {"acquiring": now - 5}),
            2: (StepPhase.PENDING, long_ago),
        },
    )
    assert orch.tick().error == ""
    # the slot freed long ago and no barrier started step 2 since: stuck
    channel.report = report(
        plan,
        {
            1: (StepPhase.DONE, {"acquiring": now - 300, "done": now - 200}),
            2: (StepPhase.PENDING, long_ago),
        },
    )
    error = orch.tick().error
    assert "step 2 stuck in phase 'pending' for 300s" in error
    # and a step holding its slot too long is stuck as before
    channel.report = report(
        plan,
        {
            1: (StepPhase.COLLECTING, {"collecting": now - 120}),
            2: (StepPhase.PENDING, long_ago),
        },
    )
    assert "step 1 stuck in phase 'collecting'" in orch.tick().error


def test_the_runner_bounds_the_hold_window_from_the_begin_payload(tmp_path: Path) -> None:
    """Steps issued all at once still start ``steps_in_flight`` at a time."""
    h = started(tmp_path)
    granularity = {"vnodes_per_step": 1, "steps_in_flight": 2}
    plan = make_plan(h.sim, "scale_out", {"granularity": granularity})
    orch = Orchestrator(Channel(h.sim), "op1", plan, issue_ahead=len(plan.steps))
    orch.tick()
    h.run_epoch()
    op = h.sim.executor.ops["op1"]
    assert op.granularity == Granularity(**granularity)
    phases = [op.steps[n].phase for n in sorted(op.steps)]
    assert len(phases) == len(plan.steps) == 128
    assert phases[:2] == [StepPhase.COLLECTING] * 2
    assert set(phases[2:]) == {StepPhase.PENDING}
