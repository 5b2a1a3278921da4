"""The granularity a request leaves to the plan (``workers.rescale.pacing``): the fewest waves
that hold at most an eighth of a fragment's vnodes each and transfer within about one epoch,
steps as large as those waves allow, and what the request set kept as it is."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workers.pipeline.placement import VnodeMapping
from workers.rescale.pacing import WAVE_SHARE, chosen_granularity
from workers.rescale.planner import plan_request
from workers.rescale.protocol import PRESETS, FragmentChange, Granularity, OperationRequest, Plan
from workers.rescale.request import ClusterView, FragmentView

MB = 1_000_000


def _plan(
    vnodes: int,
    pus: list[int],
    change: FragmentChange,
    *,
    vnode_bytes: int = 1000,
    granularity: Granularity | None = None,
    bytes_per_s: float = 40 * MB,
    epoch_s: float = 1.0,
) -> Plan:
    placed = VnodeMapping.initial("f", vnodes, pus)
    load = {v: (10, vnode_bytes) for v in range(vnodes)}
    frag = FragmentView("f", True, placed.parallel_units, placed.mapping, load, None)
    request = OperationRequest(changes={"f": change}, granularity=granularity or Granularity())
    cluster = ClusterView({pu: "w" for pu in range(16)}, {"w": True}, {"f": frag})
    return plan_request(request, cluster, bytes_per_s=bytes_per_s, epoch_s=epoch_s)


def _waves(plan: Plan) -> int:
    return math.ceil(len(plan.steps) / plan.granularity.window)


def test_a_few_small_vnodes_move_at_once() -> None:
    # 256 vnodes on 8 PUs, one more: 28 move, under a wave's share of 32, of 28 KB
    plan = _plan(256, list(range(8)), FragmentChange(added_parallel_units=(8,)))
    assert _waves(plan) == 1
    assert plan.granularity.steps_in_flight == len(plan.steps)
    assert "in 1 wave (one wave)" in plan.granularity_reason


def test_a_wave_holds_at_most_an_eighth_of_the_fragment_s_vnodes() -> None:
    # 2 -> 4 PUs of 256 vnodes: 128 move, at most 32 a wave
    plan = _plan(256, [0, 1], FragmentChange(added_parallel_units=(2, 3)))
    assert _waves(plan) == 4
    # each old PU gives 64 to one new PU: 2 pairs of 64 moves, over 4 waves
    assert plan.granularity.vnodes_per_step == 16
    assert plan.granularity.steps_in_flight == 2
    assert "an eighth of a fragment's vnodes" in plan.granularity_reason
    # the orchestrator's window and the steps' sizes keep every wave within the share
    for wave in range(_waves(plan)):
        window = plan.steps[wave * 2 : (wave + 1) * 2]
        assert sum(len(s.vnodes) for s in window) <= 256 * WAVE_SHARE


def test_large_state_takes_as_many_waves_as_one_epoch_s_transfer_carries() -> None:
    # 28 vnodes of 10 MB move (280 MB): at 40 MB/s and 1 s epochs, 7 waves of 40 MB
    plan = _plan(
        256, list(range(8)), FragmentChange(added_parallel_units=(8,)), vnode_bytes=10 * MB
    )
    assert _waves(plan) == 7
    assert max(sum(s.bytes for s in plan.steps[i : i + plan.granularity.window])
               for i in range(0, len(plan.steps), plan.granularity.window)) <= 40 * MB  # fmt: skip
    assert "one epoch's transfer (40.0 MB)" in plan.granularity_reason
    # a request's own rate cap caps a wave too
    capped = _plan(
        256,
        list(range(8)),
        FragmentChange(added_parallel_units=(8,)),
        vnode_bytes=10 * MB,
        granularity=Granularity(bytes_per_second=20 * MB),
    )
    assert _waves(capped) == 14


def test_waves_never_outnumber_the_moves() -> None:
    plan = _plan(16, [0], FragmentChange(added_parallel_units=(1,)), vnode_bytes=10**12)
    assert len(plan.steps) == 8 and _waves(plan) == 8
    assert plan.granularity.vnodes_per_step == 1 and plan.granularity.steps_in_flight == 1


@pytest.mark.parametrize("preset", ["fluid", "batched", "all_at_once"])
def test_what_the_request_sets_is_kept_and_nothing_is_said_chosen(preset: str) -> None:
    plan = _plan(
        256, [0, 1], FragmentChange(added_parallel_units=(2, 3)), granularity=PRESETS[preset]
    )
    assert plan.granularity == PRESETS[preset]
    assert plan.granularity_reason == ""


def test_one_figure_set_the_other_is_chosen_around_it() -> None:
    plan = _plan(
        256,
        [0, 1],
        FragmentChange(added_parallel_units=(2, 3)),
        granularity=Granularity(vnodes_per_step=4),
    )
    # 2 pairs of 64 moves in steps of 4: 32 steps over the 4 waves the share asks
    assert plan.granularity.vnodes_per_step == 4 and plan.granularity.steps_in_flight == 8
    plan = _plan(
        256,
        [0, 1],
        FragmentChange(added_parallel_units=(2, 3)),
        granularity=Granularity(steps_in_flight=1),
    )
    assert plan.granularity.steps_in_flight == 1 and plan.granularity.vnodes_per_step == 16


def test_nothing_to_move_is_one_step_of_nothing() -> None:
    granularity, why = chosen_granularity(Granularity(), [], {}, bytes_per_s=40 * MB, epoch_s=1.0)
    assert granularity.chosen and why == "nothing moves"


@settings(max_examples=60, deadline=None)
@given(
    vnodes=st.sampled_from([8, 16, 64, 256, 1024]),
    before=st.integers(1, 6),
    added=st.integers(1, 6),
    vnode_bytes=st.sampled_from([0, 1000, MB, 50 * MB]),
    epoch_s=st.sampled_from([0.05, 1.0, 7.0]),
)
def test_the_chosen_waves_keep_both_bounds_wherever_the_moves_allow(
    vnodes: int, before: int, added: int, vnode_bytes: int, epoch_s: float
) -> None:
    if before > vnodes:
        return
    plan = _plan(
        vnodes,
        list(range(before)),
        FragmentChange(added_parallel_units=tuple(range(before, before + added))),
        vnode_bytes=vnode_bytes,
        epoch_s=epoch_s,
    )
    window = plan.granularity.window
    waves = [plan.steps[i : i + window] for i in range(0, len(plan.steps), window)]
    share = max(1, int(vnodes * WAVE_SHARE))
    budget = 40 * MB * epoch_s
    for wave in waves:
        held = sum(len(s.vnodes) for s in wave)
        # a wave over a bound only where one step of one vnode per pair is already over it
        pairs = Counter((s.source_pu, s.target_pu) for s in wave)
        assert held <= share or all(len(s.vnodes) == 1 for s in wave) or len(pairs) > share
        size = sum(s.bytes for s in wave)
        assert size <= budget or all(len(s.vnodes) == 1 for s in wave)
