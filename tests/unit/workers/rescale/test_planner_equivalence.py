"""The planner's output is the same as before it was made fast (issue 23, 1,024 PUs x 32,768
vnodes): the algorithm as it was, scanning every PU for each move (O(V*P)), is kept below as the
reference, and random fragments, changes, loads, closed PUs and granularities must give the very
same fragment plans, steps and whole plans."""

from __future__ import annotations

import math
from collections import Counter, defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workers.hashing import MAX_KEY_RANGES, KeyRange
from workers.rescale.planner import (
    closed_quota,
    estimate_seconds,
    plan_fragment,
    plan_request,
    split_steps,
)
from workers.rescale.protocol import (
    FragmentChange,
    FragmentPlan,
    Granularity,
    Move,
    OperationRequest,
    Plan,
    StepSpec,
    Strategy,
)
from workers.rescale.request import ClusterView, FragmentView


# -- the reference: the planner before issue 23, verbatim ------------------------------------------
def old_keep_near(owned: list[int], slots: int, size: dict[int, int], target: float) -> list[int]:
    """``slots`` of the owned vnodes whose bytes add up close to ``target``: largest first, each
    kept only if the smallest vnodes can still fill the other free slots within the target."""
    order = sorted(owned, key=lambda v: (-size[v], v))
    # smallest[k]: bytes of the k smallest vnodes (the tail of ``order``)
    smallest = [0]
    for vnode in reversed(order):
        smallest.append(smallest[-1] + size[vnode])
    kept: list[int] = []
    total = 0
    for i, vnode in enumerate(order):
        free = slots - len(kept)
        if free == 0:
            break
        fill = smallest[min(free - 1, len(order) - i - 1)]
        if len(order) - i == free or total + size[vnode] + fill <= target:
            kept.append(vnode)
            total += size[vnode]
    return kept


def old_plan_fragment(
    view: FragmentView,
    change: FragmentChange,
    *,
    weighted: bool = False,
    closed: frozenset[int] = frozenset(),
) -> FragmentPlan:
    """Move as few vnodes as it takes to balance the PUs after the change; ``closed`` PUs may
    stay in the fragment but take no vnode the planner would choose for them."""
    mapping = list(view.mapping)
    vnodes = len(mapping)
    after = [pu for pu in view.parallel_units if pu not in change.removed_parallel_units] + list(
        change.added_parallel_units
    )
    held: dict[int, list[int]] = defaultdict(list)
    for vnode, pu in enumerate(mapping):
        held[pu].append(vnode)
    quota = closed_quota({pu: len(v) for pu, v in held.items()}, after, vnodes, closed)
    size = {v: view.vnode_load.get(v, (0, 0))[1] for v in range(vnodes)}
    load = {pu: sum(size[v] for v in held.get(pu, [])) for pu in after}
    mean_load = sum(size.values()) / len(after)

    leaving: list[tuple[int, int]] = []  # (vnode, source)
    for pu, owned in held.items():
        if pu not in quota:
            leaving += [(v, pu) for v in owned]
            continue
        excess = len(owned) - quota[pu]
        if excess <= 0:
            continue
        if weighted:
            kept = set(old_keep_near(owned, quota[pu], size, mean_load))
            chosen = [v for v in owned if v not in kept]
        else:
            chosen = owned[-excess:]  # the tail of its range: ranges stay contiguous
        leaving += [(v, pu) for v in chosen]
        for v in chosen:
            load[pu] -= size[v]

    leaving_from = Counter(source for _, source in leaving)
    room = {pu: quota[pu] - len(held.get(pu, [])) + leaving_from[pu] for pu in after}
    if weighted:
        leaving.sort(key=lambda vs: (-size[vs[0]], vs[0]))
    else:
        leaving.sort()
    new_mapping = list(mapping)
    moves: list[Move] = []
    for vnode, source in leaving:
        candidates = [pu for pu in after if room[pu] > 0]
        # weighted: the least loaded target (largest vnodes first: LPT); else fill in order
        target = min(candidates, key=lambda pu: (load[pu], pu)) if weighted else candidates[0]
        room[target] -= 1
        load[target] = load.get(target, 0) + size[vnode]
        new_mapping[vnode] = target
        keys, nbytes = view.vnode_load.get(vnode, (0, 0))
        moves.append(Move(view.name, vnode, source, target, keys, nbytes))
    return FragmentPlan(
        fragment=view.name,
        kind=change.kind,
        parallel_units_before=tuple(view.parallel_units),
        parallel_units_after=tuple(after),
        mapping_before=tuple(mapping),
        mapping_after=tuple(new_mapping),
        moves=tuple(sorted(moves, key=lambda m: m.vnode)),
        load=dict(view.vnode_load),
    )


def old_chunks(group: list[Move], granularity: Granularity) -> list[list[Move]]:
    """Consecutive moves cut at the vnode, key and byte caps (one vnode always fits alone)."""
    chunks: list[list[Move]] = []
    batch: list[Move] = []
    keys = size = 0
    for move in group:
        full = len(batch) >= granularity.vnodes_per_step
        over_keys = granularity.max_keys_per_step is not None and (
            keys + move.keys > granularity.max_keys_per_step
        )
        over_bytes = granularity.max_bytes_per_step is not None and (
            size + move.bytes > granularity.max_bytes_per_step
        )
        if batch and (full or over_keys or over_bytes):
            chunks.append(batch)
            batch, keys, size = [], 0, 0
        batch.append(move)
        keys += move.keys
        size += move.bytes
    if batch:
        chunks.append(batch)
    return chunks


def old_split_steps(
    moves: list[Move], granularity: Granularity, first_step: int = 1
) -> list[StepSpec]:
    """Cut moves into steps of one (source, target) pair each, within the granularity's caps.

    Steps of different PU pairs are interleaved so that steps in flight spread over PUs.
    """
    groups: dict[tuple[str, int, int], list[Move]] = defaultdict(list)
    for move in moves:
        groups[(move.fragment, move.source_pu, move.target_pu)].append(move)
    # steps ordered by load (hot_vnodes): the moves come in that order, and the pairs go in the
    # order of their first move
    pairs = list(groups.items()) if granularity.hot_vnodes is not None else sorted(groups.items())
    per_group = [old_chunks(group, granularity) for _, group in pairs]
    # which vnodes are cut: those over a cap, hottest first, while the ranges added stay within
    # max(moves, MAX_KEY_RANGES); at most MAX_KEY_RANGES ranges each
    wanted = {}
    for move in moves:
        ranges = 1
        for total, cap in (
            (move.keys, granularity.max_keys_per_step),
            (move.bytes, granularity.max_bytes_per_step),
        ):
            if cap is not None and total > cap:
                ranges = max(ranges, math.ceil(total / cap))
        if ranges > 1:
            wanted[(move.fragment, move.vnode)] = (min(ranges, MAX_KEY_RANGES), move)
    budget = max(len(moves), MAX_KEY_RANGES)
    cut = {}
    for key, (ranges, _move) in sorted(
        wanted.items(), key=lambda kv: (-kv[1][1].keys, -kv[1][1].bytes, kv[0])
    ):
        if ranges - 1 > budget:
            break
        cut[key] = ranges
        budget -= ranges - 1
    ordered: list[StepSpec] = []
    for i in range(max((len(chunks) for chunks in per_group), default=0)):
        for chunks in per_group:
            if i < len(chunks):
                batch = chunks[i]
                first = batch[0]
                keys = sum(m.keys for m in batch)
                size = sum(m.bytes for m in batch)
                # a vnode alone over a cap moves key range by key range: as many ranges as
                # keep each within the caps, its keys and bytes shared out
                ranges = cut.get((first.fragment, first.vnode), 1) if len(batch) == 1 else 1
                for r in range(ranges):
                    ordered.append(
                        StepSpec(
                            step=first_step + len(ordered),
                            fragment=first.fragment,
                            source_pu=first.source_pu,
                            target_pu=first.target_pu,
                            vnodes=tuple(m.vnode for m in batch),
                            keys=keys * (r + 1) // ranges - keys * r // ranges,
                            bytes=size * (r + 1) // ranges - size * r // ranges,
                            key_range=KeyRange(r, ranges) if ranges > 1 else None,
                        )
                    )
    return ordered


def old_order(moves: list[Move], views: dict[str, FragmentView], hot: str | None) -> list[Move]:
    """The moves by measured records per epoch, then keys, then bytes (stable)."""
    if hot is None:
        return moves
    return sorted(
        moves,
        key=lambda m: (views[m.fragment].vnode_records.get(m.vnode, 0.0), m.keys, m.bytes),
        reverse=hot == "first",
    )


# -- random inputs ----------------------------------------------------------------------------------
@st.composite
def cases(draw: st.DrawFn, max_units: int = 10, max_vnodes: int = 160) -> dict:
    """A fragment (its mapping over some of its PUs, any shape), a change of it that leaves at
    least one PU, measured loads with ties and gaps, closed PUs and a granularity."""
    units = draw(st.lists(st.integers(0, 40), min_size=1, max_size=max_units, unique=True))
    vnodes = draw(st.integers(1, max_vnodes))
    holders = draw(st.lists(st.sampled_from(units), min_size=1, max_size=len(units), unique=True))
    mapping = tuple(draw(st.lists(st.sampled_from(holders), min_size=vnodes, max_size=vnodes)))
    removed = draw(st.lists(st.sampled_from(units), max_size=len(units) - 1, unique=True))
    spare = [pu for pu in range(41, 60)]
    added = draw(st.lists(st.sampled_from(spare), max_size=max_units, unique=True))
    if not added and not removed:
        added = [spare[0]]
    sizes = st.one_of(st.integers(0, 4), st.integers(0, 10**6))  # small ones tie often
    measured = draw(
        st.lists(st.tuples(st.integers(0, 1000), sizes), min_size=vnodes, max_size=vnodes)
    )
    unmeasured = draw(st.sets(st.integers(0, vnodes - 1), max_size=vnodes // 4))
    load = {v: kb for v, kb in enumerate(measured) if v not in unmeasured}
    everyone = sorted({*units, *added})
    closed = frozenset(draw(st.lists(st.sampled_from(everyone), max_size=3, unique=True)))
    granularity = Granularity(
        vnodes_per_step=draw(st.integers(1, 6)),
        max_keys_per_step=draw(st.none() | st.integers(1, 3000)),
        max_bytes_per_step=draw(st.none() | st.integers(1, 2 * 10**6)),
        steps_in_flight=draw(st.integers(1, 4)),
        hot_vnodes=draw(st.sampled_from([None, "first", "last"])),
    )
    return {
        "view": FragmentView("f", True, tuple(sorted(units)), mapping, load),
        "change": FragmentChange(tuple(added), tuple(removed)),
        "weighted": draw(st.booleans()),
        "closed": closed,
        "granularity": granularity,
    }


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_the_fragment_plan_is_the_one_the_old_planner_made(case: dict) -> None:
    args = (case["view"], case["change"])
    options = {"weighted": case["weighted"], "closed": case["closed"]}
    assert plan_fragment(*args, **options) == old_plan_fragment(*args, **options)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_the_steps_are_the_ones_the_old_planner_cut(case: dict) -> None:
    plan = old_plan_fragment(case["view"], case["change"], weighted=case["weighted"])
    moves = list(plan.moves)
    for first in (1, 7):
        assert split_steps(moves, case["granularity"], first) == old_split_steps(
            moves, case["granularity"], first
        )


@settings(max_examples=15, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cases(max_units=64, max_vnodes=4096))
def test_large_fragments_plan_the_same(case: dict) -> None:
    """Many PUs and vnodes: the cursor and the heap over PUs meet long runs of full PUs."""
    args = (case["view"], case["change"])
    options = {"weighted": case["weighted"], "closed": case["closed"]}
    new = plan_fragment(*args, **options)
    assert new == old_plan_fragment(*args, **options)
    moves = list(new.moves)
    assert split_steps(moves, case["granularity"]) == old_split_steps(moves, case["granularity"])


def test_a_whole_request_plans_as_before_at_two_fragments() -> None:
    """``plan_request`` over a cluster (two fragments, a closed worker) against the reference
    put together the same way."""
    units = tuple(range(16))
    load = {v: (v % 7, (v * 7919) % 1000) for v in range(512)}
    records = {v: float(v * 31 % 11) for v in range(0, 512, 3)}  # ties, gaps, unmeasured ones
    fragments = {
        name: FragmentView(
            name, True, units, tuple(v * 16 // 512 for v in range(512)), load, None, records
        )
        for name in ("a", "b")
    }
    cluster = ClusterView(
        pu_worker={pu: f"w{pu // 4}" for pu in range(32)},
        worker_alive={f"w{i}": True for i in range(8)},
        fragments=fragments,
        worker_status={"w5": "cordoned"},
    )
    for weighted, hot in ((False, None), (True, None), (False, "first"), (True, "last")):
        granularity = Granularity(
            vnodes_per_step=3, max_keys_per_step=10, steps_in_flight=4, hot_vnodes=hot
        )
        request = OperationRequest(
            {
                "a": FragmentChange(tuple(range(16, 32))),
                "b": FragmentChange((16, 17), (0, 1, 2)),
            },
            granularity=granularity,
            weighted=weighted,
        )
        plan = plan_request(request, cluster)
        closed = cluster.closed_parallel_units()
        expected = {
            name: old_plan_fragment(fragments[name], change, weighted=weighted, closed=closed)
            for name, change in request.changes.items()
        }
        assert plan.fragments == expected
        moves = old_order([m for f in expected.values() for m in f.moves], fragments, hot)
        steps = old_split_steps(moves, request.granularity)
        assert list(plan.steps) == steps
        assert plan.estimate_s == estimate_seconds(steps, request.granularity)
        assert plan.request.strategy == Strategy.LIVE


def test_planning_leaves_the_cycle_collector_as_it_found_it() -> None:
    import gc

    request = OperationRequest({"a": FragmentChange((4,))})
    view = FragmentView("a", True, (0, 1), tuple(v % 2 for v in range(16)), {})
    cluster = ClusterView({pu: "w" for pu in range(5)}, {"w": True}, {"a": view})
    assert gc.isenabled()
    plan_request(request, cluster)
    assert gc.isenabled()
    gc.disable()
    try:
        plan_request(request, cluster)
        assert not gc.isenabled()
    finally:
        gc.enable()


# -- what a dry run keeps and answers (issue 23, "Control plane II") -------------------------------
def old_balance(
    plan: FragmentPlan, mapping: tuple[int, ...], parallel_units: tuple[int, ...]
) -> dict:
    """``FragmentPlan.balance`` before it counted with a Counter, verbatim."""
    counts = {pu: 0 for pu in parallel_units}
    size = {pu: 0 for pu in parallel_units}
    for vnode, pu in enumerate(mapping):
        counts[pu] = counts.get(pu, 0) + 1
        size[pu] = size.get(pu, 0) + plan.load.get(vnode, (0, 0))[1]
    mean_bytes = sum(size.values()) / max(len(parallel_units), 1)
    return {
        "vnodes_per_pu": {str(pu): n for pu, n in sorted(counts.items())},
        "bytes_per_pu": {str(pu): b for pu, b in sorted(size.items())},
        "max_vnodes_minus_min": max(counts.values()) - min(counts.values()),
        "max_bytes_over_mean": round(max(size.values()) / mean_bytes, 3) if mean_bytes else None,
    }


def _request(case: dict, strategy: Strategy) -> OperationRequest:
    return OperationRequest(
        {"f": case["change"]},
        strategy=strategy,
        granularity=case["granularity"],
        weighted=case["weighted"],
    )


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_the_plan_a_dry_run_keeps_comes_back_equal(case: dict) -> None:
    """``compact_json`` is what a plan_id starts: through JSON and back it is the same plan, its
    steps, moves, mappings and load (in their order) and its estimate as ``to_json`` says it."""
    import json

    cluster = ClusterView({pu: "w" for pu in range(60)}, {"w": True}, {"f": case["view"]})
    for strategy in (Strategy.LIVE, Strategy.STOP_START):
        plan = plan_request(_request(case, strategy=strategy), cluster)
        kept = Plan.from_compact(plan.request, json.loads(json.dumps(plan.compact_json())))
        assert kept.fragments == plan.fragments and kept.steps == plan.steps
        assert list(kept.fragments["f"].load) == list(plan.fragments["f"].load)
        assert kept.to_json() == plan.to_json()
        assert kept.summary_json() == plan.summary_json()


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_the_summary_is_the_plan_summed_and_the_balance_as_before(case: dict) -> None:
    plan = plan_fragment(case["view"], case["change"], weighted=case["weighted"])
    for mapping, units in (
        (plan.mapping_before, plan.parallel_units_before),
        (plan.mapping_after, plan.parallel_units_after),
    ):
        assert plan.balance(mapping, units) == old_balance(plan, mapping, units)
    summary, whole = plan.summary_json(), plan.to_json()
    per_pu = ("sources", "targets")
    assert {k: v for k, v in summary.items() if k not in per_pu} == {
        k: v for k, v in whole.items() if k in summary
    }
    for side, pu_of in (("sources", "source_pu"), ("targets", "target_pu")):
        figures: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0])
        for move in plan.moves:
            f = figures[getattr(move, pu_of)]
            f[0], f[1], f[2] = f[0] + 1, f[1] + move.keys, f[2] + move.bytes
        assert summary[side] == [
            {"parallel_unit": pu, "vnodes": n, "keys": k, "bytes": b}
            for pu, (n, k, b) in sorted(figures.items())
        ]
