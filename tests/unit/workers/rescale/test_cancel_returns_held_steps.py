"""A cancel gives held steps back to their source (docs/rescale.md, "Cancel").

A step collected and not yet acquired holds its vnodes: sealed at the source, their records in
the target's hold queue. If its export cannot finish (a full disk), waiting for it would keep the
operation, and with a bounded hold queue the whole stream, waiting for ever. So a cancel returns
such a step at the next barrier: the source unseals its copy (never dropped) and applies the hold
queue before the epoch's records, in one commit; nothing is lost, duplicated or reordered (the
oracle of ``check_final``), and the vnodes stay where the mapping always said they were.

The runner is the simulation of its own loop (``rescale_sim``) with the real epoch task and
stores; exports fail as a full disk makes them fail.
"""

from __future__ import annotations

import errno
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.unit.workers.rescale_sim import FRAGMENT
from tests.unit.workers.test_rescale_protocol import Channel, Harness, check_final, make_plan
from workers.layout import pu_store
from workers.rescale import exports as exports_module
from workers.rescale.executor import HoldQueueBounds
from workers.rescale.orchestrator import Orchestrator
from workers.rescale.protocol import StepPhase
from workers.state import open_store

VNODES = 64
KEYS = [f"key{i}" for i in range(400)]
PER_EPOCH = 200


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Every export fails with ENOSPC until ``calls["fail"]`` is set to False."""
    calls = {"failed": 0, "fail": True}
    real = exports_module.export_pu

    def export(task: exports_module.ExportTask) -> dict[str, Any]:
        if calls["fail"]:
            calls["failed"] += 1
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(task)

    monkeypatch.setattr(exports_module, "export_pu", export)
    monkeypatch.setattr(exports_module, "RETRY_AFTER_S", (0.01, 0.02))
    return calls


def started(root: Path, bounds: HoldQueueBounds | None = None) -> Harness:
    h = Harness(
        root, initial=[0, 1], vnodes=VNODES, keys=KEYS, per_epoch=PER_EPOCH,
        hold_queue_bounds=bounds,
    )  # fmt: skip
    for _ in range(2):
        h.run_epoch()
    return h


def begin(h: Harness, granularity: Any) -> tuple[Any, Orchestrator]:
    plan = make_plan(h.sim, "scale_out", {"granularity": granularity})
    orch = Orchestrator(Channel(h.sim), "op1", plan)
    orch.start()
    return plan, orch


def tick(h: Harness, orch: Orchestrator) -> Any:
    orch.channel = Channel(h.sim)
    return orch.tick()


def held_steps(h: Harness) -> list[Any]:
    return [
        s
        for s in h.sim.executor.ops["op1"].steps.values()
        if s.phase in (StepPhase.COLLECTING, StepPhase.EXPORTED)
    ]


def run_until_final(h: Harness, orch: Orchestrator, epochs: int = 20) -> None:
    for _ in range(epochs):
        if tick(h, orch).status in ("completed", "cancelled"):
            break
        h.sim.executor.run_exports()
        h.run_epoch()
    h.run_epoch()
    h.run_epoch()


def test_a_cancel_returns_the_steps_whose_export_cannot_finish(
    tmp_path: Path, full_disk: dict[str, int]
) -> None:
    h = started(tmp_path)
    plan, orch = begin(h, {"vnodes_per_step": 4, "steps_in_flight": 2})
    for _ in range(4):  # collected, held for epochs, every export failing
        tick(h, orch)
        h.sim.executor.run_exports()
        h.run_epoch()
    held = held_steps(h)
    assert held and all(s.phase == StepPhase.COLLECTING for s in held)
    assert all(sum(s.hold_rows.values()) for s in held), "the held steps held no records"
    assert full_disk["failed"] >= 3
    orch.cancel()
    run_until_final(h, orch)  # the disk is still full
    progress = check_final(h, plan, "op1")  # the oracle: nothing lost, duplicated or reordered
    assert progress["status"] == "cancelled"
    steps = h.sim.executor.ops["op1"].steps
    for s in held:
        step = steps[s.spec.step]
        assert step.phase == StepPhase.CANCELLED and step.acquire_epoch is None
        assert step.return_epoch is not None and step.return_epoch > step.collect_epoch
        assert step.keys_moved == 0
    # the sources' copies are writable again: nothing stays sealed
    for pu in h.sim.placements[FRAGMENT].parallel_units:
        path = pu_store(h.root, FRAGMENT, pu)
        if path.exists():
            with open_store("lmdb", path, readonly=True) as store:
                assert store.sealed_vnodes() == set(), f"PU {pu} keeps vnodes sealed"


def test_a_crash_in_the_return_epoch_replays_it_exactly_once(
    tmp_path: Path, full_disk: dict[str, int]
) -> None:
    h = started(tmp_path)
    plan, orch = begin(h, {"vnodes_per_step": 8, "steps_in_flight": 4})
    for _ in range(3):
        tick(h, orch)
        h.sim.executor.run_exports()
        h.run_epoch()
    assert held_steps(h)
    orch.cancel()
    h.run_epoch(crash_after=1)  # the return epoch: one task committed, then the runner died
    h.run_epoch(crash_after=0)  # and once more before anything of the next one
    run_until_final(h, orch)
    assert check_final(h, plan, "op1")["status"] == "cancelled"


def test_an_exported_step_is_returned_too_and_its_export_never_ingested(
    tmp_path: Path, full_disk: dict[str, int]
) -> None:
    h = started(tmp_path)
    plan, orch = begin(h, {"vnodes_per_step": 4, "steps_in_flight": 2})
    tick(h, orch)
    h.run_epoch()  # collected
    full_disk["fail"] = False
    h.sim.executor.run_exports()  # exported, not yet acquired
    exported = [s for s in held_steps(h) if s.phase == StepPhase.EXPORTED]
    assert exported
    orch.cancel()
    run_until_final(h, orch)
    assert check_final(h, plan, "op1")["status"] == "cancelled"
    for s in exported:
        step = h.sim.executor.ops["op1"].steps[s.spec.step]
        assert step.phase == StepPhase.CANCELLED and step.acquire_epoch is None


def test_a_cancel_ends_a_barrier_waiting_on_a_full_hold_queue(
    tmp_path: Path, full_disk: dict[str, int]
) -> None:
    # one byte: the barrier after a collect waits for the export, which cannot finish
    h = started(tmp_path, HoldQueueBounds(step_bytes=1, pu_bytes=1 << 40))
    plan, orch = begin(h, {"vnodes_per_step": 4, "steps_in_flight": 2})
    tick(h, orch)
    h.run_epoch()  # collected: its records are held, past the bound at the end of the epoch
    assert h.sim.executor.live.over_bound(step_bytes=1, pu_bytes=1 << 40)
    cancel = threading.Timer(0.3, orch.cancel)
    cancel.start()
    try:
        h.run_epoch()  # waits at its barrier until the cancel arrives, then returns the steps
    finally:
        cancel.cancel()
    assert full_disk["failed"] >= 2, "the barrier did not retry the export while it waited"
    collected = [s for s in h.sim.executor.ops["op1"].steps.values() if s.collect_epoch]
    assert collected and all(s.return_epoch == h.epoch - 1 for s in collected), collected
    assert all(s.phase == StepPhase.CANCELLED for s in collected)
    run_until_final(h, orch)
    progress = check_final(h, plan, "op1")
    assert progress["status"] == "cancelled"
    assert progress["hold_queue_full"] == []
