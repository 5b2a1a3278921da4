"""Model tests of the live protocol: random interleavings of epochs, exports, steps, cancels and
crashes (mid-epoch and between epochs), checking invariants I1–I6 against an oracle."""

from __future__ import annotations

import itertools
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.workers.rescale_sim import FRAGMENT, Crash, SimRunner, oracle
from workers.hashing import key_range_index, stable_hash64, vnode_of
from workers.layout import pu_store
from workers.pipeline.placement import CutVnode
from workers.rescale.executor import HoldQueueBounds
from workers.rescale.orchestrator import Orchestrator
from workers.rescale.planner import plan_request
from workers.rescale.protocol import CommandKind, OperationRequest
from workers.rescale.request import ClusterView, FragmentView
from workers.state import open_store

VNODES = 16
KEYS = [f"k{i}" for i in range(120)]
CHANGES = {
    "scale_out": {"added_parallel_units": [2, 3]},
    "scale_in": {"removed_parallel_units": [1]},
    "migrate": {"added_parallel_units": [2], "removed_parallel_units": [0]},
}


def epoch_records(epoch: int, per_epoch: int = 40, keys: list[str] = KEYS) -> list[tuple[str, int]]:
    """The source: deterministic per epoch, so a re-run epoch reads the same records."""
    rng = random.Random(epoch)
    return [(rng.choice(keys), epoch * 1000 + i) for i in range(per_epoch)]


class Channel:
    def __init__(self, sim: SimRunner) -> None:
        self.sim = sim

    def submit(self, kind: CommandKind, payload: dict[str, Any]) -> int:
        return self.sim.control.submit(kind, payload)

    def progress(self, operation_id: str) -> dict[str, Any] | None:
        return self.sim.control.progress(operation_id)

    def command_status(self, command_id: int) -> tuple[str, str] | None:
        return self.sim.control.command_status(command_id)


def make_plan(sim: SimRunner, change: str, request_extra: dict[str, Any]):
    placement = sim.placements[FRAGMENT]
    load = {}
    for rows in sim.state_by_store().values():
        for vnode, _ in rows.values():
            keys, size = load.get(vnode, (0, 0))
            load[vnode] = (keys + 1, size + 10)
    cluster = ClusterView(
        pu_worker={pu: "w" for pu in range(4)},
        worker_alive={"w": True},
        fragments={
            FRAGMENT: FragmentView(
                FRAGMENT,
                True,
                placement.parallel_units,
                placement.mapping,
                load,
                # a measured load in neither the vnodes' nor their keys' order
                vnode_records={v: float(k * (v * 7 % 5 + 1)) for v, (k, _) in load.items()},
            )
        },
    )
    request = OperationRequest.parse({"changes": {FRAGMENT: CHANGES[change]}, **request_extra})
    return plan_request(request, cluster)


class Harness:
    """Feeds epochs, checks I4 after each, and restarts the runner on demand."""

    def __init__(
        self,
        root: Path,
        initial: list[int],
        *,
        vnodes: int = VNODES,
        keys: list[str] = KEYS,
        per_epoch: int = 40,
        hold_queue_bounds: HoldQueueBounds | None = None,
    ) -> None:
        self.root = root
        self.hold_queue_bounds = hold_queue_bounds
        self.initial = initial
        self.vnodes = vnodes
        self.keys = keys
        self.per_epoch = per_epoch
        self.sim = self._sim()
        self.epoch = 0
        self.fed: list[tuple[str, int]] = []
        self.rng = random.Random(7)

    def _sim(self) -> SimRunner:
        return SimRunner(
            self.root,
            vnodes=self.vnodes,
            pu_count=4,
            initial=self.initial,
            hold_queue_bounds=self.hold_queue_bounds,
        )

    def restart(self) -> None:
        self.sim = self._sim()

    def run_epoch(self, crash_after: int | None = None) -> None:
        records = epoch_records(self.epoch, self.per_epoch, self.keys)
        try:
            result = self.sim.run_epoch(self.epoch, records, crash_after=crash_after, rng=self.rng)
        except Crash:
            self.restart()  # the runner died mid-epoch; Spark re-runs the same epoch
            result = self.sim.run_epoch(self.epoch, records, rng=self.rng)
        self.fed += records
        self.epoch += 1
        self.check_isolation(result.plan)

    def check_isolation(self, plan) -> None:
        """I4: every key of a vnode not held this epoch is up to date right after the epoch."""
        expected = oracle(self.fed)
        held = set(plan.fragment_actions(FRAGMENT).held)
        held |= {
            v
            for op in self.sim.executor.ops.values()
            for s in op.steps.values()
            if s.acquire_epoch is not None
            and s.acquire_epoch > self.epoch - 1
            and s.collect_epoch is not None
            and s.collect_epoch <= self.epoch - 1
            for v in s.spec.vnodes
        }
        # read each key where the mapping says it lives: between Acquire and Drop the source
        # still holds a sealed, no longer writable copy (I1 is about writable state)
        mapping = plan.placements[FRAGMENT].mapping
        cut = plan.fragment_actions(FRAGMENT).cut
        stores = self.sim.state_by_store()
        for key, value in expected.items():
            vnode = vnode_of(key, self.vnodes)
            ranges = cut.get(vnode)
            if ranges is not None and key_range_index(stable_hash64(key), ranges.count) in (
                ranges.held
            ):
                continue  # its key range is in flight: held
            if vnode not in held:
                actual = stores.get(home(key, vnode, mapping, cut), {}).get(key, (None, None))[1]
                assert actual == value, f"I4: {key} lags after epoch {self.epoch - 1}"


def home(key: str, vnode: int, mapping: tuple[int, ...], cut: dict[int, CutVnode]) -> int:
    """Where a key's writable state is: its vnode's owner, or the cut's target once the key's
    range has moved there."""
    ranges = cut.get(vnode)
    if ranges is not None and key_range_index(stable_hash64(key), ranges.count) in ranges.moved:
        return ranges.target
    return mapping[vnode]


def check_final(h: Harness, plan, operation_id: str) -> dict[str, Any]:
    sim = h.sim
    progress = sim.control.progress(operation_id)
    assert progress is not None and progress["status"] in ("completed", "cancelled"), progress
    # the runner reported deltas (full reports after each restart): the control's view of every
    # step, merged from them, is the runner's own
    runner_steps = sim.executor.ops[operation_id].progress().to_json()["steps"]
    assert progress["steps"] == runner_steps, "a step's progress was lost on the way"
    placement = sim.placements[FRAGMENT]
    stores = sim.state_by_store()
    seen: dict[str, int] = {}
    vnode_home: dict[int, int] = {}
    for pu, rows in stores.items():
        for key, (vnode, _) in rows.items():
            assert key not in seen, f"I1: {key} in stores of PU {seen[key]} and PU {pu}"
            seen[key] = pu
            assert vnode_home.setdefault(vnode, pu) == pu, f"I1: vnode {vnode} in two stores"
            assert placement.mapping[vnode] == pu, (
                f"I1/I5: vnode {vnode} on PU {pu}, mapping says {placement.mapping[vnode]}"
            )
    assert set(placement.mapping) <= set(placement.parallel_units)
    for pu in stores:  # a cut vnode ends whole on one PU, its ranges' seals gone with it
        with open_store(sim.backend, pu_store(sim.root, FRAGMENT, pu), readonly=True) as store:
            assert store.sealed_key_ranges() == {}, f"PU {pu} keeps sealed key ranges"
    actual = {k: v for rows in stores.values() for k, (_, v) in rows.items()}
    assert actual == oracle(h.fed), "I2/I3: final state differs from the oracle"
    fp = plan.fragments[FRAGMENT]
    if progress["status"] == "completed":
        assert placement.mapping == fp.mapping_after
        assert placement.parallel_units == fp.parallel_units_after
    else:  # I5: completed moves stay, and the audit (progress) says which
        moved = {v for s in progress["steps"] if s["phase"] == "done" for v in s["vnodes"]}
        for vnode in range(len(placement.mapping)):
            expected = fp.mapping_after[vnode] if vnode in moved else fp.mapping_before[vnode]
            assert placement.mapping[vnode] == expected
    return progress


def drive(h: Harness, orch: Orchestrator, script: list[str]) -> None:
    for action in script:
        if action == "epoch":
            h.run_epoch()
        elif action.startswith("crash"):
            h.run_epoch(crash_after=int(action[5:]))
        elif action == "export":
            h.sim.executor.run_exports()
        elif action == "tick":
            orch.channel = Channel(h.sim)
            orch.tick()
        elif action == "cancel":
            orch.cancel()
        elif action == "restart":
            h.restart()
    for _ in range(200):  # then let it run to its end
        orch.channel = Channel(h.sim)
        if orch.tick().status in ("completed", "cancelled"):
            break
        h.sim.executor.run_exports()
        h.run_epoch()
    h.run_epoch()
    h.run_epoch()


ACTIONS = st.sampled_from(
    ["epoch", "epoch", "export", "tick", "tick", "restart", "crash0", "crash1", "crash2", "cancel"]
)


@settings(
    max_examples=int(os.environ.get("RESCALER_MODEL_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    change=st.sampled_from(sorted(CHANGES)),
    vnodes_per_step=st.integers(1, 16),
    in_flight=st.integers(1, 4),
    # a cap below a vnode's keys (about 7 here) cuts it into key ranges
    max_keys=st.none() | st.integers(2, 8),
    hot_vnodes=st.sampled_from([None, "first", "last"]),
    script=st.lists(ACTIONS, max_size=30),
)
def test_any_interleaving_keeps_every_invariant(
    change: str,
    vnodes_per_step: int,
    in_flight: int,
    max_keys: int | None,
    hot_vnodes: str | None,
    script: list[str],
) -> None:
    root = Path(tempfile.mkdtemp(prefix="rescale-model-"))
    try:
        h = Harness(root, initial=[0, 1])
        for _ in range(3):
            h.run_epoch()
        granularity: dict[str, Any] = {
            "vnodes_per_step": vnodes_per_step,
            "steps_in_flight": in_flight,
            "max_keys_per_step": max_keys,
            "hot_vnodes": hot_vnodes,  # the steps in any order the planner issues them
        }
        plan = make_plan(h.sim, change, {"granularity": granularity})
        orch = Orchestrator(Channel(h.sim), "op1", plan)
        orch.start()
        drive(h, orch, script)
        check_final(h, plan, "op1")
        steps = h.sim.executor.ops["op1"].steps.values()
        for epoch in range(h.epoch):
            held = [s.spec.step for s in steps if s.holds(epoch)]
            assert len(held) <= in_flight, f"steps {held} all held in epoch {epoch}"
            cut = [s.spec.vnodes[0] for s in steps if s.spec.key_range and s.holds(epoch)]
            assert len(cut) == len(set(cut)), f"two key ranges of one vnode held in {epoch}"
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_uninterrupted_operation_completes_with_the_planned_mapping(
    tmp_path: Path, change: str
) -> None:
    h = Harness(tmp_path, initial=[0, 1])
    for _ in range(3):
        h.run_epoch()
    plan = make_plan(h.sim, change, {"granularity": "fluid"})
    orch = Orchestrator(Channel(h.sim), "op1", plan)
    drive(h, orch, [])
    progress = check_final(h, plan, "op1")
    assert progress["status"] == "completed"
    assert progress["vnodes_moved"] == len(plan.fragments[FRAGMENT].moves) > 0
    delays = [s["acquire_epoch"] - s["collect_epoch"] for s in progress["steps"]]
    assert max(delays) <= 2, f"fluid steps must hold their keys at most 2 epochs, held {delays}"


def test_cancel_keeps_completed_moves_and_ends_every_step(tmp_path: Path) -> None:
    h = Harness(tmp_path, initial=[0, 1])
    for _ in range(3):
        h.run_epoch()
    plan = make_plan(h.sim, "scale_out", {"granularity": "fluid"})
    orch = Orchestrator(Channel(h.sim), "op1", plan)
    drive(
        h, orch, ["tick", "epoch", "export", "epoch", "tick", "epoch", "epoch", "cancel", "epoch"]
    )
    progress = check_final(h, plan, "op1")
    assert progress["status"] == "cancelled"
    done = [s for s in progress["steps"] if s["phase"] == "done"]
    assert 0 < len(done) < len(plan.steps)
    assert all(s["phase"] in ("done", "cancelled") for s in progress["steps"])


def test_stop_start_restores_every_key_to_its_new_owner(tmp_path: Path) -> None:
    h = Harness(tmp_path, initial=[0, 1])
    for _ in range(4):
        h.run_epoch()
    plan = make_plan(h.sim, "scale_out", {"strategy": "stop_start"})
    orch = Orchestrator(Channel(h.sim), "op1", plan)
    drive(h, orch, ["tick", "crash1"])
    progress = check_final(h, plan, "op1")
    assert progress["status"] == "completed" and progress["phase"] == "restored"
    assert plan.steps == (), "one barrier moves everything: a stop-start has no steps"
    moved = [
        (name, v)
        for name, fp in plan.fragments.items()
        for v, (old, new) in enumerate(zip(fp.mapping_before, fp.mapping_after))
        if old != new
    ]
    assert progress["vnodes_moved"] == len(moved) > 0, "history shows what it really moved"
    stored = {pu: rows for pu, rows in h.sim.state_by_store().items()}
    keys_moved = sum(
        1
        for rows in stored.values()
        for vnode, _ in rows.values()
        if any(v == vnode for _, v in moved)
    )
    # keys only ever arrive: at least those measured when planning, at most those there now
    planned = sum(plan.fragments[name].load.get(v, (0, 0))[0] for name, v in moved)
    assert 0 < planned <= progress["keys_moved"] <= keys_moved
    assert progress["bytes_moved"] > 0


def _hot(tmp_path: Path, steps_in_flight: int) -> tuple[Harness, Any, Orchestrator]:
    """About 25 keys per vnode, and a scale-out whose key cap of 8 cuts every moving vnode."""
    keys = [f"k{i}" for i in range(400)]
    h = Harness(tmp_path, initial=[0, 1], keys=keys, per_epoch=120)
    for _ in range(3):
        h.run_epoch()
    granularity = {"vnodes_per_step": 1, "steps_in_flight": steps_in_flight, "max_keys_per_step": 8}
    plan = make_plan(h.sim, "scale_out", {"granularity": granularity})
    assert any(s.key_range is not None for s in plan.steps), "the cap cut no vnode"
    return h, plan, Orchestrator(Channel(h.sim), "op1", plan)


def test_a_hot_vnode_moves_key_range_by_key_range_holding_one_range_at_a_time(
    tmp_path: Path,
) -> None:
    h, plan, orch = _hot(tmp_path, steps_in_flight=2)
    drive(h, orch, ["tick", "epoch", "export", "epoch", "crash1", "export", "epoch", "restart"])
    progress = check_final(h, plan, "op1")
    assert progress["status"] == "completed", progress["error"]
    assert progress["vnodes_moved"] == len(plan.fragments[FRAGMENT].moves)
    steps = sorted(h.sim.executor.ops["op1"].steps.values(), key=lambda s: s.spec.step)
    cut = [s for s in steps if s.spec.key_range is not None]
    by_vnode: dict[int, list[Any]] = {}
    for step in cut:
        by_vnode.setdefault(step.spec.vnodes[0], []).append(step)
    for vnode, ranges in by_vnode.items():
        assert [s.spec.key_range.index for s in ranges] == list(range(len(ranges)))
        # one after the other: a range is collected once the one before it is acquired
        for before, after in itertools.pairwise(ranges):
            assert after.collect_epoch >= before.acquire_epoch
        for step in ranges:
            kr = step.spec.key_range
            # what the range's hold queue held: exactly the records of its keys fed while it
            # was in flight, none of the vnode's other ranges
            fed = [
                key
                for epoch in range(step.collect_epoch, step.acquire_epoch)
                for key, _ in epoch_records(epoch, h.per_epoch, h.keys)
                if vnode_of(key, h.vnodes) == vnode
                and key_range_index(stable_hash64(key), kr.count) == kr.index
            ]
            assert step.hold_rows.get(vnode, 0) == len(fed), (vnode, kr)


def test_a_cancel_finishes_a_cut_vnode_whose_first_range_moved(tmp_path: Path) -> None:
    h, plan, orch = _hot(tmp_path, steps_in_flight=1)
    # the first range is collected, exported and acquired; then the operation is cancelled
    drive(h, orch, ["tick", "epoch", "export", "epoch", "epoch", "cancel", "epoch", "export"])
    progress = check_final(h, plan, "op1")
    assert progress["status"] == "cancelled"
    first = plan.steps[0]
    assert first.key_range is not None and first.key_range.index == 0
    vnode = first.vnodes[0]
    ranges = [s for s in progress["steps"] if s["vnodes"] == [vnode] and s["key_range"]]
    assert len(ranges) == first.key_range.count
    assert all(s["phase"] == "done" for s in ranges), "a split vnode's ranges all finish"
    assert h.sim.placements[FRAGMENT].mapping[vnode] == first.target_pu
    assert progress["vnodes_moved"] >= 1
