"""The runner's epoch barrier (workers/barrier.py), the code the runner and the model tests share."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.barrier import Barrier, BarrierError, route_slots
from workers.control import LocalControl
from workers.pipeline.placement import FragmentActions, PlacementStore, VnodeMapping
from workers.rescale.executor import RescaleExecutor

FRAGMENT = "f"


class Recorder(LocalControl):
    """LocalControl that also records which acks were sent while which plan was on disk."""

    def __init__(self, directory: Path, store: PlacementStore) -> None:
        super().__init__(directory)
        self.store = store
        self.acked_with_plan: list[int | None] = []

    def ack_command(self, command_id: int, status: str, detail: str = "") -> None:
        plan = self.store.last_plan()
        self.acked_with_plan.append(plan.epoch if plan else None)
        super().ack_command(command_id, status, detail)


def make(tmp_path: Path) -> tuple[Barrier, Recorder, list[str]]:
    store = PlacementStore(tmp_path)
    placements = {FRAGMENT: VnodeMapping.initial(FRAGMENT, 8, [0, 1])}
    control = Recorder(tmp_path / "control", store)
    executor = RescaleExecutor(
        tmp_path, placements, backend="lmdb", worker_pus={0, 1, 2}, background_exports=False
    )
    events: list[str] = []
    barrier = Barrier(
        "p",
        control,
        executor,
        placements,
        store,
        on_stop=lambda: events.append("stop"),
        on_placements_changed=lambda: events.append("changed"),
    )
    return barrier, control, events


def test_commands_are_applied_and_acked_only_once_the_plan_is_durable(tmp_path: Path) -> None:
    barrier, control, events = make(tmp_path)
    stop = control.submit("stop")
    bogus = control.submit("reboot")
    malformed = control.submit("operation.step", {"operation_id": "nope"})
    plan = barrier.plan(0)
    assert plan.epoch == 0 and events == ["stop"]
    assert control.acked_with_plan == [0, 0, 0], "every ack follows the recorded plan"
    assert control.command_status(stop) == ("done", "stopping after epoch -1")
    status, detail = control.command_status(bogus) or ("", "")
    assert (
        status == "failed" and "unknown command 'reboot'" in detail and "operation.begin" in detail
    )
    status, detail = control.command_status(malformed) or ("", "")
    assert status == "failed" and "never begun" in detail
    assert control.poll_commands("p") == []


def test_a_re_run_epoch_gets_its_recorded_plan_and_an_older_one_is_refused(
    tmp_path: Path,
) -> None:
    barrier, control, _ = make(tmp_path)
    first = barrier.plan(3)
    control.submit("stop")  # arrives after epoch 3 was planned: not part of its re-run
    assert barrier.plan(3) == first
    assert control.poll_commands("p"), "a re-run applies no new command"
    with pytest.raises(BarrierError, match="checkpoint is older"):
        barrier.plan(2)


def test_a_placement_change_is_announced_before_the_plan_is_used(tmp_path: Path) -> None:
    barrier, control, events = make(tmp_path)
    mapping_after = [0, 0, 0, 1, 1, 1, 2, 2]
    control.submit(
        "operation.begin",
        {
            "operation_id": "op",
            "strategy": "stop_start",
            "fragments": {
                FRAGMENT: {
                    "added_parallel_units": [2],
                    "removed_parallel_units": [],
                    "parallel_units_after": [0, 1, 2],
                    "mapping_after": mapping_after,
                }
            },
        },
    )
    plan = barrier.plan(0)
    assert events == ["changed"]
    assert plan.placements[FRAGMENT].mapping == tuple(mapping_after)
    assert barrier.store.load() == plan.placements


def test_route_slots_sends_held_vnodes_to_their_target() -> None:
    placement = VnodeMapping(FRAGMENT, (4, 7, 9), (4, 4, 7, 7, 9, 9), 1)
    assert route_slots(placement, FragmentActions()) == [0, 0, 1, 1, 2, 2]
    held = FragmentActions(held={1: 9, 2: 4})
    assert route_slots(placement, held) == [0, 2, 0, 1, 2, 2]


def test_commands_and_the_executor_s_plan_run_with_the_cycle_collector_paused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The barrier's bookkeeping (a wave of step commands, every step one phase on and its
    report) is a burst of objects freed together: run with the collector off (workers.cycles),
    which the wait for full hold queues is not (it may last, and other threads allocate)."""
    import gc

    barrier, control, _ = make(tmp_path)
    seen: dict[str, bool] = {}

    def spy(name: str, owner: object, method: str) -> None:
        """``owner.method`` noting whether the collector was on when it was called."""
        real = getattr(owner, method)

        def called(*args: object, **kwargs: object) -> object:
            seen[name] = gc.isenabled()
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, method, called)

    spy("apply", barrier, "apply")
    spy("plan", barrier.executor, "plan")
    spy("wait", barrier.executor, "bound_hold_queues")
    control.submit("stop")
    barrier.plan(0)
    assert seen == {"apply": False, "plan": False, "wait": True}
    assert gc.isenabled()
