"""The operation request parser, validation, and the planner's guarantees."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workers.hashing import MAX_KEY_RANGES
from workers.pipeline.placement import VnodeMapping
from workers.rescale import errors
from workers.rescale.planner import plan_fragment, plan_request, split_steps, target_counts
from workers.rescale.protocol import FragmentChange, Granularity, OperationRequest, Plan
from workers.rescale.request import ClusterView, FragmentView, validate


def view(
    pus: list[int], vnodes: int = 64, load: dict | None = None, busy: str | None = None
) -> FragmentView:
    p = VnodeMapping.initial("f", vnodes, pus)
    return FragmentView("f", True, p.parallel_units, p.mapping, load or {}, busy)


@pytest.mark.parametrize(
    ("body", "code", "text"),
    [
        ([], "malformed_request", "JSON object"),
        ({"changes": {}}, "malformed_request", "non-empty object"),
        (
            {"changes": {"f": {"added_parallel_units": [1]}}, "extra": 1},
            "malformed_request",
            "unknown field",
        ),
        ({"changes": {"f": {"add": [1]}}}, "malformed_request", "unknown field"),
        (
            {"changes": {"f": {"added_parallel_units": "1"}}},
            "malformed_request",
            "list of parallel unit ids",
        ),
        ({"changes": {"f": {"added_parallel_units": [True]}}}, "malformed_request", "integers"),
        ({"changes": {"f": {"added_parallel_units": [1, 1]}}}, "malformed_request", "twice"),
        ({"changes": {"f": {}}}, "nothing_to_do", "adds and removes nothing"),
        (
            {"changes": {"f": {"added_parallel_units": [1], "removed_parallel_units": [1]}}},
            "parallel_unit_added_and_removed",
            "both added and removed",
        ),
        (
            {"changes": {"f": {"added_parallel_units": [1]}}, "strategy": "fast"},
            "malformed_request",
            "strategy",
        ),
        (
            {"changes": {"f": {"added_parallel_units": [1]}}, "dry_run": "yes"},
            "malformed_request",
            "true or false",
        ),
        (
            {"changes": {"f": {"added_parallel_units": [1]}}, "granularity": "slow"},
            "malformed_request",
            "preset",
        ),
        (
            {
                "changes": {"f": {"added_parallel_units": [1]}},
                "granularity": {"vnodes_per_step": 0},
            },
            "malformed_request",
            "at least 1",
        ),
        (
            {
                "changes": {"f": {"added_parallel_units": [1]}},
                "granularity": {"vnodes_per_step": "2"},
            },
            "malformed_request",
            "must be a number",
        ),
    ],
)
def test_malformed_requests_are_refused_with_a_code_and_reason(
    body: object, code: str, text: str
) -> None:
    with pytest.raises(errors.RescaleError) as info:
        OperationRequest.parse(body)
    assert info.value.code == code
    assert text in str(info.value)


def test_request_round_trips_through_json() -> None:
    body = {
        "changes": {"f": {"added_parallel_units": [2], "removed_parallel_units": [0]}},
        "strategy": "stop_start",
        "granularity": {"vnodes_per_step": 4, "bytes_per_second": 1e6},
        "dry_run": True,
    }
    request = OperationRequest.parse(body)
    assert OperationRequest.parse(request.to_json()) == request
    assert request.changes["f"].kind == "migrate"
    assert Granularity.parse("all_at_once").vnodes_per_step == 1 << 16


def _cluster(frag: FragmentView, alive: bool = True) -> ClusterView:
    return ClusterView({0: "a", 1: "a", 2: "b", 3: "b"}, {"a": True, "b": alive}, {"f": frag})


@pytest.mark.parametrize(
    ("change", "cluster_kwargs", "error"),
    [
        ({"added_parallel_units": [9]}, {}, errors.UnknownParallelUnit),
        ({"added_parallel_units": [2]}, {"alive": False}, errors.DeadWorker),
        ({"added_parallel_units": [0]}, {}, errors.AlreadyInFragment),
        ({"removed_parallel_units": [3]}, {}, errors.NotInFragment),
        ({"removed_parallel_units": [0, 1]}, {}, errors.RemovesEveryUnit),
    ],
)
def test_validation_refusals(change: dict, cluster_kwargs: dict, error: type) -> None:
    request = OperationRequest.parse({"changes": {"f": change}})
    with pytest.raises(error):
        validate(request, _cluster(view([0, 1]), **cluster_kwargs))


def test_busy_fragment_and_unknown_fragment_are_refused() -> None:
    with pytest.raises(errors.FragmentBusy, match="op7"):
        validate(
            OperationRequest.parse({"changes": {"f": {"added_parallel_units": [2]}}}),
            _cluster(view([0, 1], busy="op7")),
        )
    with pytest.raises(errors.UnknownFragment, match="stateful fragments: f"):
        validate(
            OperationRequest.parse({"changes": {"g": {"added_parallel_units": [2]}}}),
            _cluster(view([0, 1])),
        )


@given(
    vnodes=st.integers(1, 300),
    before=st.lists(st.integers(0, 7), min_size=1, max_size=6, unique=True),
    added=st.lists(st.integers(8, 12), max_size=4, unique=True),
    remove_count=st.integers(0, 5),
)
def test_plans_move_the_fewest_vnodes_and_balance_within_one(
    vnodes: int, before: list[int], added: list[int], remove_count: int
) -> None:
    removed = before[: min(remove_count, len(before) - (0 if added else 1))]
    if not added and not removed:
        return
    frag = view(before, vnodes)
    plan = plan_fragment(frag, FragmentChange(tuple(added), tuple(removed)))
    counts = Counter(plan.mapping_after)
    after = [pu for pu in before if pu not in removed] + added
    assert set(counts) <= set(after)
    sizes = [counts.get(pu, 0) for pu in after]
    assert max(sizes) - min(sizes) <= 1, "every PU within one vnode of the mean"
    # the minimum: every vnode of a removed PU, plus each kept PU's excess over its quota
    quota = target_counts(Counter(frag.mapping), after, vnodes)
    held = Counter(frag.mapping)
    minimum = sum(held[pu] for pu in removed) + sum(max(0, held[pu] - quota[pu]) for pu in after)
    assert len(plan.moves) == minimum
    for move in plan.moves:
        assert (
            frag.mapping[move.vnode] == move.source_pu
            and plan.mapping_after[move.vnode] == move.target_pu
        )


def test_weighted_plan_evens_out_bytes_with_the_same_number_of_moves() -> None:
    load = {v: (1, 1000 if v < 8 else 10) for v in range(64)}  # hot keys in one range
    frag = view([0, 1], 64, load)
    plain = plan_fragment(frag, FragmentChange(added_parallel_units=(2, 3)))
    weighted = plan_fragment(frag, FragmentChange(added_parallel_units=(2, 3)), weighted=True)
    assert len(plain.moves) == len(weighted.moves)
    spread = lambda p: p.balance(p.mapping_after, p.parallel_units_after)["max_bytes_over_mean"]  # noqa: E731
    assert spread(weighted) < spread(plain)


def test_steps_respect_vnode_key_and_byte_caps() -> None:
    frag = view([0], 32, {v: (100, 1000) for v in range(32)})
    moves = list(plan_fragment(frag, FragmentChange(added_parallel_units=(1, 2))).moves)
    for granularity, most in [
        (Granularity(vnodes_per_step=4), 4),
        (Granularity(vnodes_per_step=100, max_keys_per_step=250), 2),
        (Granularity(vnodes_per_step=100, max_bytes_per_step=999), 1),
    ]:
        steps = split_steps(moves, granularity)
        assert all(len(s.vnodes) <= most for s in steps)
        assert sorted(v for s in steps for v in s.completes_vnodes) == sorted(
            m.vnode for m in moves
        )
        assert len({(s.source_pu, s.target_pu) for s in steps[:3]}) == 2, "pairs interleave"


def test_a_vnode_over_the_key_or_byte_cap_is_cut_into_key_ranges() -> None:
    load = {v: (100, 1000) for v in range(32)}
    load[20] = (1000, 10_000)  # hot
    frag = view([0], 32, load)
    moves = list(plan_fragment(frag, FragmentChange(added_parallel_units=(1,))).moves)
    assert 20 in {m.vnode for m in moves}
    for granularity, ranges in [
        (Granularity(vnodes_per_step=8, max_keys_per_step=300), 4),
        (Granularity(vnodes_per_step=8, max_bytes_per_step=2500), 4),
        (Granularity(vnodes_per_step=8, max_keys_per_step=300, max_bytes_per_step=1000), 10),
    ]:
        steps = split_steps(moves, granularity)
        cut = [s for s in steps if s.key_range is not None]
        assert [s.vnodes for s in cut] == [(20,)] * ranges
        assert [(s.key_range.index, s.key_range.count) for s in cut] == [
            (i, ranges) for i in range(ranges)
        ]
        # consecutive steps, their keys and bytes the vnode's shared out
        assert [s.step for s in cut] == list(range(cut[0].step, cut[0].step + ranges))
        assert sum(s.keys for s in cut) == 1000 and sum(s.bytes for s in cut) == 10_000
        assert all(s.keys <= (granularity.max_keys_per_step or 1000) for s in cut)
        assert sorted(v for s in steps for v in s.completes_vnodes) == sorted(
            m.vnode for m in moves
        )
    # without a key or byte cap, a vnode is never cut
    assert all(s.key_range is None for s in split_steps(moves, Granularity(vnodes_per_step=1)))


def test_plan_json_round_trip_and_estimate() -> None:
    frag = view([0, 1], 16, {v: (10, 10_000) for v in range(16)})
    request = OperationRequest.parse(
        {
            "changes": {"f": {"added_parallel_units": [2]}},
            "granularity": {"bytes_per_second": 1000},
        }
    )
    plan = plan_request(request, _cluster(frag), bytes_per_s=1e9, epoch_s=0.5)
    assert plan.estimate_s >= 50_000 / 1000, "the rate cap bounds the estimate"
    # an operation keeps the plan's granularity as its own (``RescaleOperation.granularity``)
    kept = dataclasses.replace(request, granularity=plan.granularity)
    stored = Plan.from_stored(kept, plan.stored_json(), list(plan.steps))
    assert stored.to_json() == plan.to_json()


@pytest.mark.parametrize(
    "granularity",
    [
        {"steps_in_flight": 0},
        {"vnodes_per_step": True},
        {"bytes_per_second": 5e-324},
        {"bytes_per_second": 0.5},
        {"bytes_per_second": float("inf")},
    ],
)
def test_granularity_gaps_found_by_the_api_fuzz_are_refused(granularity: dict) -> None:
    with pytest.raises(errors.MalformedRequest):
        OperationRequest.parse(
            {"changes": {"f": {"added_parallel_units": [1]}}, "granularity": granularity}
        )
    optional = {"max_keys_per_step": None, "max_bytes_per_step": None, "bytes_per_second": None}
    assert (
        OperationRequest.parse(
            {"changes": {"f": {"added_parallel_units": [1]}}, "granularity": optional}
        ).granularity
        == Granularity()
    )


def test_an_absurd_cap_cuts_the_hottest_vnodes_first_within_a_bound() -> None:
    """A cap of one key would cut every vnode into as many ranges as it has keys: a vnode takes
    at most MAX_KEY_RANGES, and a plan's ranges add at most max(moves, MAX_KEY_RANGES) steps,
    the hottest vnodes cut first; past the bound a vnode moves whole."""
    load = {v: (100 + v, 1000) for v in range(32)}
    frag = view([0], 32, load)
    moves = list(plan_fragment(frag, FragmentChange(added_parallel_units=(1,))).moves)
    steps = split_steps(moves, Granularity(vnodes_per_step=1, max_keys_per_step=1))
    assert len(steps) <= len(moves) + max(len(moves), MAX_KEY_RANGES)
    cut = {s.vnodes[0]: s.key_range.count for s in steps if s.key_range is not None}
    assert set(cut.values()) == {MAX_KEY_RANGES}
    whole = [s.vnodes[0] for s in steps if s.key_range is None]
    assert whole and min(load[v][0] for v in cut) > max(load[v][0] for v in whole), "hottest"
    assert sorted(v for s in steps for v in s.completes_vnodes) == sorted(m.vnode for m in moves)


def _hot_cluster(records: dict[int, float]) -> tuple[ClusterView, dict[int, tuple[int, int]]]:
    """16 vnodes on PUs 0 and 1 (two PUs added), keys growing with the vnode, and the measured
    records per epoch given: the order by load must follow the records, not the keys."""
    load = {v: (100 + v, 1000 + v) for v in range(16)}
    p = VnodeMapping.initial("f", 16, [0, 1])
    frag = FragmentView("f", True, p.parallel_units, p.mapping, load, vnode_records=records)
    return _cluster(frag), load


@pytest.mark.parametrize("order", ["first", "last"])
def test_hot_vnodes_orders_the_steps_by_measured_records_then_keys(order: str) -> None:
    records = {3: 900.0, 12: 500.0, 6: 40.0}  # the rest measured nothing: ordered by keys
    cluster, load = _hot_cluster(records)
    body = {
        "changes": {"f": {"added_parallel_units": [2, 3]}},
        "granularity": {"vnodes_per_step": 1, "steps_in_flight": 2, "hot_vnodes": order},
    }
    plan = plan_request(OperationRequest.parse(body), cluster)
    moved = [s.vnodes[0] for s in plan.steps]
    assert sorted(moved) == sorted(m.vnode for m in plan.fragments["f"].moves)

    def weight(v: int) -> tuple[float, int]:
        return (records.get(v, 0.0), load[v][0])

    hot = sorted(moved, key=weight, reverse=True)
    if order == "last":
        hot = hot[::-1]
    # steps alternate between the (source, target) pairs, round by round, each pair's moves in
    # load order, and the pairs in the order of their first move: the first step is the
    # hottest (coldest) of all, and within a pair the order is exactly the load's
    assert moved[0] == hot[0]
    for pair in {(s.source_pu, s.target_pu) for s in plan.steps}:
        mine = [s.vnodes[0] for s in plan.steps if (s.source_pu, s.target_pu) == pair]
        assert mine == [v for v in hot if v in mine]
    # hot_vnodes null: the placement's order (each pair's moves by vnode)
    body["granularity"]["hot_vnodes"] = None  # type: ignore[index]
    plain = plan_request(OperationRequest.parse(body), cluster).steps
    assert sorted(s.vnodes[0] for s in plain) == sorted(moved)
    assert [s.vnodes[0] for s in plain] != moved
    for pair in {(s.source_pu, s.target_pu) for s in plain}:
        mine = [s.vnodes[0] for s in plain if (s.source_pu, s.target_pu) == pair]
        assert mine == sorted(mine)
    # absent: the hottest first, the default
    del body["granularity"]["hot_vnodes"]  # type: ignore[attr-defined]
    default = [s.vnodes[0] for s in plan_request(OperationRequest.parse(body), cluster).steps]
    assert (default == moved) == (order == "first")


def test_hot_vnodes_first_cuts_hot_vnodes_into_ranges_kept_in_order() -> None:
    records = {v: float(v) for v in range(16)}
    cluster, _ = _hot_cluster(records)
    body = {
        "changes": {"f": {"added_parallel_units": [2, 3]}},
        "granularity": {"max_keys_per_step": 60, "hot_vnodes": "first"},
    }
    steps = plan_request(OperationRequest.parse(body), cluster).steps
    assert all(s.key_range is not None and s.key_range.count == 2 for s in steps)
    for first, second in zip(steps[::2], steps[1::2], strict=True):  # a vnode's ranges in order
        assert first.vnodes == second.vnodes
        assert (first.key_range.index, second.key_range.index) == (0, 1)  # type: ignore[union-attr]
    order = [s.vnodes[0] for s in steps[::2]]
    assert records[order[0]] == max(records[v] for v in order)


@pytest.mark.parametrize("value", ["hottest", "", 1, True, ["first"], {"first": 1}])
def test_an_unknown_hot_vnodes_order_is_refused(value: object) -> None:
    body = {"changes": {"f": {"added_parallel_units": [1]}}, "granularity": {"hot_vnodes": value}}
    with pytest.raises(errors.MalformedRequest, match="hot_vnodes must be one of"):
        OperationRequest.parse(body)
    for ok in ("first", "last", None):
        body["granularity"] = {"hot_vnodes": ok}
        assert OperationRequest.parse(body).granularity.hot_vnodes == ok
