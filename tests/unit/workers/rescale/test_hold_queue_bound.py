"""Bounded hold queues (docs/rescale.md, "Bounded hold queues"): once a collecting step's hold
queue, or a target PU's hold queues together, reach their bound in bytes, the next barrier waits
for the step's export before the epoch reads its records. The records stay in the source
meanwhile, so nothing is dropped and no hold queue grows past its bound by more than the epoch
that crossed it; the operation says which steps it waits for.

The runner is the simulation of its own loop (``rescale_sim``) with exports that never run
between epochs unless a barrier waits for them: as a long export on a busy stream would.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from tests.unit.workers.rescale_sim import FRAGMENT
from tests.unit.workers.test_rescale_protocol import Channel, Harness, check_final, make_plan
from workers.rescale import exports as exports_module
from workers.rescale.executor import HoldQueueBounds
from workers.rescale.exports import ExportWaitStopped
from workers.rescale.orchestrator import Orchestrator
from workers.rescale.protocol import OperationProgress, StepPhase

VNODES = 64
KEYS = [f"key{i}" for i in range(400)]
PER_EPOCH = 200


def started(root: Path, bounds: HoldQueueBounds | None) -> Harness:
    h = Harness(
        root,
        initial=[0, 1],
        vnodes=VNODES,
        keys=KEYS,
        per_epoch=PER_EPOCH,
        hold_queue_bounds=bounds,
    )
    for _ in range(2):
        h.run_epoch()
    return h


def drive(h: Harness, granularity: dict[str, Any], *, epochs: int) -> tuple[Any, list[dict]]:
    """Run a 2→4 scale-out for at most ``epochs`` epochs with exports only where a barrier
    waits for them; returns the plan and every progress report the runner sent."""
    reports: list[dict[str, Any]] = []
    plan = make_plan(h.sim, "scale_out", {"granularity": granularity})
    orch = Orchestrator(Channel(h.sim), "op1", plan)
    for _ in range(epochs):
        ledger = h.sim.executor.ledger
        if not getattr(ledger, "_spied", False):
            send = ledger._report
            ledger._report = lambda p, send=send: (reports.append(p), send(p))[1]  # type: ignore[method-assign]
            ledger._spied = True  # type: ignore[attr-defined]
        orch.channel = Channel(h.sim)
        if orch.tick().ended:
            break
        h.run_epoch()
    return plan, reports


def test_a_full_hold_queue_makes_the_next_barrier_wait_for_the_export(tmp_path: Path) -> None:
    # one byte: every step that held anything is full at the next barrier
    h = started(tmp_path, HoldQueueBounds(step_bytes=1, pu_bytes=1 << 40))
    plan, reports = drive(h, {"vnodes_per_step": 4, "steps_in_flight": 2}, epochs=200)
    h.run_epoch()
    h.run_epoch()
    progress = check_final(h, plan, "op1")  # the oracle: nothing lost, duplicated or reordered
    assert progress["status"] == "completed"
    steps = h.sim.executor.ops["op1"].steps.values()
    held = [s for s in steps if sum(s.hold_rows.values())]
    assert held, "no step held records: the test feeds too little"
    for step in held:
        # held one epoch: the barrier after it waited for the export, then acquired
        assert step.acquire_epoch - step.collect_epoch == 1, step
        assert sum(step.hold_bytes.values()) > 0
    waited = {step for r in reports for step in r.get("hold_queue_full", [])}
    assert waited == {s.spec.step for s in held}, "every waited-for step is reported"
    assert not reports[-1]["hold_queue_full"], "the wait is over once the exports are verified"


def test_without_a_bound_a_late_export_keeps_its_records_held(tmp_path: Path) -> None:
    h = started(tmp_path, None)
    drive(h, {"vnodes_per_step": 4, "steps_in_flight": 2}, epochs=6)
    steps = h.sim.executor.ops["op1"].steps.values()
    # nothing exported the collecting steps: they hold their vnodes, epoch after epoch
    collecting = [s for s in steps if s.phase == StepPhase.COLLECTING]
    assert collecting and all(s.collect_epoch is not None for s in collecting)
    assert max(sum(s.hold_rows.values()) for s in collecting) > PER_EPOCH // VNODES * 4
    h.sim.executor.run_exports()  # let it finish, exact
    plan = h.sim.executor.ops["op1"]
    assert plan.hold_queue_full == ()


def test_a_target_pus_hold_queues_are_bounded_together(tmp_path: Path) -> None:
    h = started(tmp_path, None)
    drive(h, {"vnodes_per_step": 2, "steps_in_flight": 4}, epochs=3)
    live = h.sim.executor.live
    holding = [
        s for s in h.sim.executor.ops["op1"].steps.values() if s.phase == StepPhase.COLLECTING
    ]
    by_pu: dict[int, int] = {}
    for s in holding:
        by_pu[s.spec.target_pu] = by_pu.get(s.spec.target_pu, 0) + sum(s.hold_bytes.values())
    pu, total = max(by_pu.items(), key=lambda kv: kv[1])
    largest = max(sum(s.hold_bytes.values()) for s in holding)
    assert total > largest, "the test needs two steps holding on one target PU"
    # no step alone reaches the step bound, the PU's together reach the PU bound
    full = live.over_bound(step_bytes=largest + 1, pu_bytes=total)
    assert {s.spec.step for _, s in full} == {
        s.spec.step for s in holding if s.spec.target_pu == pu
    }
    assert live.over_bound(step_bytes=largest + 1, pu_bytes=total + 1) == []
    assert {s.spec.step for _, s in live.over_bound(step_bytes=largest, pu_bytes=1 << 40)} == {
        s.spec.step for s in holding if sum(s.hold_bytes.values()) >= largest
    }


def test_an_exported_step_is_not_waited_for(tmp_path: Path) -> None:
    h = started(tmp_path, None)
    drive(h, {"vnodes_per_step": 4, "steps_in_flight": 2}, epochs=3)
    h.sim.executor.run_exports()
    assert h.sim.executor.live.over_bound(step_bytes=1, pu_bytes=1) == []


def test_a_failed_export_is_started_again_while_the_barrier_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = started(tmp_path, HoldQueueBounds(step_bytes=1, pu_bytes=1 << 40))
    monkeypatch.setattr(exports_module, "RETRY_AFTER_S", (0.01, 0.02))
    real = exports_module.export_pu
    failures = {"left": 2}

    def flaky(task: exports_module.ExportTask) -> dict[str, Any]:
        if failures["left"]:
            failures["left"] -= 1
            raise OSError("No space left on device")
        return real(task)

    monkeypatch.setattr(exports_module, "export_pu", flaky)
    plan, _ = drive(h, {"vnodes_per_step": 4, "steps_in_flight": 2}, epochs=200)
    h.run_epoch()
    h.run_epoch()
    assert failures["left"] == 0
    assert check_final(h, plan, "op1")["status"] == "completed"


def test_a_stop_ends_the_wait_and_the_epoch_does_not_run(tmp_path: Path) -> None:
    h = started(tmp_path, HoldQueueBounds(step_bytes=1, pu_bytes=1 << 40))
    drive(h, {"vnodes_per_step": 4, "steps_in_flight": 2}, epochs=2)
    executor = h.sim.executor
    full = executor.live.over_bound(step_bytes=1, pu_bytes=1 << 40)
    assert full, "a step holds records and is not exported"
    executor.exports._background = True  # the export job is "running" elsewhere and never ends
    for op, step in full:
        executor.exports._exporting.add((op.operation_id, step.spec.step))
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    executor._should_stop = stop.is_set
    with pytest.raises(ExportWaitStopped):
        executor.plan(h.epoch)
    # nothing moved on: the steps still collect, and no longer say they wait
    assert all(step.phase == StepPhase.COLLECTING for _, step in full)
    assert executor.ops["op1"].hold_queue_full == ()


def test_progress_carries_the_waited_for_steps() -> None:
    data = {
        "operation_id": "op",
        "strategy": "live",
        "fragments": [FRAGMENT],
        "status": "running",
        "phase": "begun",
        "hold_queue_full": [3, 4],
    }
    progress = OperationProgress.from_json(data)
    assert progress.hold_queue_full == (3, 4)
    assert progress.to_json()["hold_queue_full"] == [3, 4]
    assert progress.summary_json()["hold_queue_full"] == [3, 4], "stored as the JSON it is"
