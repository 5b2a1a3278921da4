"""Which vnodes move where, cut into steps, with the balance before and after and a time estimate.

The planner moves as few vnodes as it can while leaving every PU within one vnode of the mean:
with V vnodes on n PUs each PU gets ``V // n`` or one more, the extra ones going to the PUs that
already hold the most, so that the fewest vnodes have to leave. Asked to weigh by measured load,
it keeps the same counts but chooses *which* vnodes leave and where they land so that bytes per PU
even out too (a skewed key distribution is cured by placement, not by more vnodes).
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from itertools import accumulate

from workers.cycles import cycle_collection_paused
from workers.hashing import MAX_KEY_RANGES, KeyRange
from workers.rescale.pacing import chosen_granularity
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

# used for estimates when nothing has been measured yet
DEFAULT_TRANSFER_BYTES_PER_S = 40e6
DEFAULT_EPOCH_S = 1.0
# a wave of steps_in_flight steps is collected at one barrier and acquired at the next, which
# collects the next wave; after the last wave's acquire come its drop and the completion
EPOCHS_PER_WAVE = 1
EPOCHS_AFTER_LAST_WAVE = 1  # the last wave's acquire, whose epoch also drops the source copy


def target_counts(
    current: dict[int, int], parallel_units_after: list[int], vnodes: int
) -> dict[int, int]:
    """Vnodes each PU should hold: V // n, plus one for the V % n PUs holding the most now."""
    n = len(parallel_units_after)
    base, extra = divmod(vnodes, n)
    by_holding = sorted(parallel_units_after, key=lambda pu: (-current.get(pu, 0), pu))
    return {pu: base + (1 if i < extra else 0) for i, pu in enumerate(by_holding)}


def _keep_near(owned: list[int], slots: int, size: Sequence[int], target: float) -> list[int]:
    """``slots`` of the owned vnodes (in vnode order) whose bytes add up close to ``target``:
    largest first, each kept only if the smallest vnodes can still fill the other free slots
    within the target."""
    # by size, largest first, ties by vnode: ``owned`` is in vnode order, and a sort in reverse
    # keeps equal items in their order
    order = sorted(owned, key=size.__getitem__, reverse=True)
    count = len(order)
    # smallest[k]: bytes of the k smallest vnodes (the tail of ``order``)
    smallest = list(accumulate((size[v] for v in reversed(order)), initial=0))
    kept: list[int] = []
    total = 0
    for i, vnode in enumerate(order):
        free = slots - len(kept)
        if free == 0:
            break
        if count - i == free:  # as many left as free slots: every one of them is kept
            kept += order[i:]
            break
        nbytes = size[vnode]
        if total + nbytes + smallest[min(free - 1, count - i - 1)] <= target:
            kept.append(vnode)
            total += nbytes
    return kept


def closed_quota(
    current: dict[int, int], parallel_units_after: list[int], vnodes: int, closed: frozenset[int]
) -> dict[int, int]:
    """``target_counts``, except that a closed PU (``ClusterView.vnode_refusal``) is
    given no more than it holds: the vnodes it would have taken go to the open PUs. With no
    open PU left to take them, the plain quota (the request itself names no other way)."""
    quota = target_counts(current, parallel_units_after, vnodes)
    shut = [pu for pu in parallel_units_after if pu in closed]
    open_ = [pu for pu in parallel_units_after if pu not in closed]
    if not shut or not open_:
        return quota
    capped = {pu: min(quota[pu], current.get(pu, 0)) for pu in shut}
    return {**capped, **target_counts(current, open_, vnodes - sum(capped.values()))}


def plan_fragment(
    view: FragmentView,
    change: FragmentChange,
    *,
    weighted: bool = False,
    closed: frozenset[int] = frozenset(),
) -> FragmentPlan:
    """Move as few vnodes as it takes to balance the PUs after the change; ``closed`` PUs may
    stay in the fragment but take no vnode the planner would choose for them.

    O(V log V + P log P): each leaving vnode's target comes from a cursor over the PUs with
    room (in order) or, weighted, from a heap of them by load, not from a scan of every PU."""
    mapping = list(view.mapping)
    vnodes = len(mapping)
    removed = set(change.removed_parallel_units)
    after = [pu for pu in view.parallel_units if pu not in removed] + list(
        change.added_parallel_units
    )
    held: dict[int, list[int]] = defaultdict(list)
    for vnode, pu in enumerate(mapping):
        held[pu].append(vnode)
    quota = closed_quota({pu: len(v) for pu, v in held.items()}, after, vnodes, closed)
    vnode_load = view.vnode_load
    # bytes per vnode and per PU: what the weighted choice weighs (the plain one counts only)
    size = [0] * vnodes
    load: dict[int, int] = {}
    mean_load = 0.0
    if weighted:
        for vnode, (_, nbytes) in vnode_load.items():
            if 0 <= vnode < vnodes:
                size[vnode] = nbytes
        load = {pu: sum(map(size.__getitem__, held.get(pu, ()))) for pu in after}
        mean_load = sum(size) / len(after)

    leaving: list[tuple[int, int]] = []  # (vnode, source)
    leaving_from: Counter[int] = Counter()
    for pu, owned in held.items():
        if pu not in quota:
            leaving += [(v, pu) for v in owned]
            leaving_from[pu] += len(owned)
            continue
        excess = len(owned) - quota[pu]
        if excess <= 0:
            continue
        if weighted:
            kept = set(_keep_near(owned, quota[pu], size, mean_load))
            chosen = [v for v in owned if v not in kept]
            load[pu] -= sum(map(size.__getitem__, chosen))
        else:
            chosen = owned[-excess:]  # the tail of its range: ranges stay contiguous
        leaving += [(v, pu) for v in chosen]
        leaving_from[pu] += len(chosen)

    room = {pu: quota[pu] - len(held.get(pu, ())) + leaving_from[pu] for pu in after}
    leaving.sort()  # by vnode
    new_mapping = list(mapping)
    # the PUs that may still take a vnode: plain, in the order of ``after`` (the first one with
    # room takes it); weighted, by (load, PU) (the least loaded takes it: LPT)
    open_units = [pu for pu in after if room[pu] > 0]
    if weighted:
        # Orders of pairs as single ints, which compare in C where tuples compare item by item:
        # (-bytes, vnode) as -bytes * V + vnode (largest first, ties by vnode), and a target's
        # (load, PU) as load * P + PU (P above every PU number). Same orders, same plan.
        span = max(after, default=0) + 1
        by_load = [load[pu] * span + pu for pu in open_units]
        heapq.heapify(by_load)
        for order in sorted([-size[v] * vnodes + v for v, _ in leaving]):
            vnode = order % vnodes
            target_order = by_load[0]
            target = target_order % span
            room[target] -= 1
            if room[target] > 0:  # (load, PU) pairs are unique: one sift, the same order
                heapq.heapreplace(by_load, target_order + size[vnode] * span)
            else:
                heapq.heappop(by_load)
            new_mapping[vnode] = target
    else:
        cursor = 0
        for vnode, _ in leaving:
            while room[open_units[cursor]] == 0:
                cursor += 1
            target = open_units[cursor]
            room[target] -= 1
            new_mapping[vnode] = target
    # the moves by vnode, however their targets were chosen
    moves = [
        Move(view.name, vnode, source, new_mapping[vnode], *vnode_load.get(vnode, (0, 0)))
        for vnode, source in leaving
    ]
    return FragmentPlan(
        fragment=view.name,
        kind=change.kind,
        parallel_units_before=tuple(view.parallel_units),
        parallel_units_after=tuple(after),
        mapping_before=tuple(mapping),
        mapping_after=tuple(new_mapping),
        moves=tuple(moves),
        load=dict(vnode_load),
    )


def _chunks(group: list[Move], granularity: Granularity) -> list[list[Move]]:
    """Consecutive moves cut at the vnode, key and byte caps (one vnode always fits alone)."""
    if len(group) == 1:  # one move always fits alone (most groups of a weighted plan)
        return [group]
    most = granularity.step_vnodes
    max_keys, max_bytes = granularity.max_keys_per_step, granularity.max_bytes_per_step
    if max_keys is None and max_bytes is None:  # the vnode cap alone: slices of ``most``
        return [group[i : i + most] for i in range(0, len(group), most)]
    chunks: list[list[Move]] = []
    batch: list[Move] = []
    keys = size = 0
    for move in group:
        full = len(batch) >= most
        over_keys = max_keys is not None and keys + move.keys > max_keys
        over_bytes = max_bytes is not None and size + move.bytes > max_bytes
        if batch and (full or over_keys or over_bytes):
            chunks.append(batch)
            batch, keys, size = [], 0, 0
        batch.append(move)
        keys += move.keys
        size += move.bytes
    if batch:
        chunks.append(batch)
    return chunks


def _step(number: int, batch: list[Move]) -> StepSpec:
    """The step of several moves of one (source, target) pair."""
    first = batch[0]
    vnodes = tuple(m.vnode for m in batch)
    keys = sum(m.keys for m in batch)
    size = sum(m.bytes for m in batch)
    return StepSpec(number, first.fragment, first.source_pu, first.target_pu, vnodes, keys, size)


def split_steps(moves: list[Move], granularity: Granularity, first_step: int = 1) -> list[StepSpec]:
    """Cut moves into steps of one (source, target) pair each, within the granularity's caps.

    Steps of different PU pairs are interleaved so that steps in flight spread over PUs.
    """
    groups: dict[tuple[str, int, int], list[Move]] = defaultdict(list)
    for move in moves:
        groups[move.fragment, move.source_pu, move.target_pu].append(move)
    # ordered by load (``order_by_load``), the pairs go in the order of their first move, the
    # hottest's (or the coldest's) first; otherwise by pair
    pairs = list(groups) if granularity.hot_vnodes is not None else sorted(groups)
    per_group = [_chunks(groups[pair], granularity) for pair in pairs]
    batches: list[list[Move]] = []
    # round i takes the i-th chunk of every group that has one; a group leaves the rounds when
    # it runs out (each chunk visited once, however uneven the groups)
    i = 0
    while per_group:
        batches += [chunks[i] for chunks in per_group]
        i += 1
        per_group = [chunks for chunks in per_group if len(chunks) > i]
    cuts = _key_range_cuts(moves, granularity)
    steps: list[StepSpec] = []
    number = first_step
    for batch in batches:
        if len(batch) == 1:  # fluid, and most steps of a weighted plan: no call, no sums
            m = batch[0]
            ranges = cuts.get((m.fragment, m.vnode), 1) if cuts else 1
            if ranges > 1:
                cut = _cut(number, m, ranges)
                steps += cut
                number += len(cut)
                continue
            steps.append(
                StepSpec(number, m.fragment, m.source_pu, m.target_pu, (m.vnode,), m.keys, m.bytes)
            )
        else:
            steps.append(_step(number, batch))
        number += 1
    return steps


def order_by_load(
    moves: list[Move], fragments: dict[str, FragmentView], hot_vnodes: str | None
) -> list[Move]:
    """The moves by their vnodes' load (``Granularity.hot_vnodes``): records per epoch as the
    stream measured them, then keys, then bytes; ``"first"`` the hottest first, ``"last"`` the
    hottest last, None as given (the placement's order, by vnode). Ties keep the given order."""
    if hot_vnodes is None:
        return moves

    def load(move: Move) -> tuple[float, int, int]:
        records = fragments[move.fragment].vnode_records.get(move.vnode, 0.0)
        return (records, move.keys, move.bytes)

    # a reversed sort is still stable: ties keep the given order either way
    return sorted(moves, key=load, reverse=hot_vnodes == "first")


def _key_range_cuts(moves: list[Move], granularity: Granularity) -> dict[tuple[str, int], int]:
    """(fragment, vnode) -> key ranges, for the moves over the key or byte cap. The hottest
    vnodes (most keys, then bytes) are cut first; the ranges a plan adds are bounded by its moves
    (at least ``MAX_KEY_RANGES``), so an absurdly low cap cannot plan millions of steps: past the
    bound, a vnode moves whole."""
    if granularity.max_keys_per_step is None and granularity.max_bytes_per_step is None:
        return {}
    over = [(m, key_ranges_needed(m, granularity)) for m in moves]
    hot = sorted(
        ((m, n) for m, n in over if n > 1),
        key=lambda mn: (-mn[0].keys, -mn[0].bytes, mn[0].fragment, mn[0].vnode),
    )
    budget = max(len(moves), MAX_KEY_RANGES)
    cuts: dict[tuple[str, int], int] = {}
    for move, ranges in hot:
        if ranges - 1 > budget:
            break
        cuts[(move.fragment, move.vnode)] = ranges
        budget -= ranges - 1
    return cuts


def key_ranges_needed(move: Move, granularity: Granularity) -> int:
    """Into how many key ranges a vnode's move is cut so that each stays within the
    granularity's key and byte caps (1: it fits whole). Ranges are hash slices, so each holds
    about its share of the keys and bytes measured at plan time."""
    needed = 1
    if granularity.max_keys_per_step is not None and move.keys > granularity.max_keys_per_step:
        needed = -(-move.keys // granularity.max_keys_per_step)
    if granularity.max_bytes_per_step is not None and move.bytes > granularity.max_bytes_per_step:
        needed = max(needed, -(-move.bytes // granularity.max_bytes_per_step))
    return min(needed, MAX_KEY_RANGES)


def _cut(number: int, move: Move, count: int) -> list[StepSpec]:
    """A hot vnode's move as ``count`` steps of one key range each, in range order (the runner
    moves the ranges of one vnode one after the other), its keys and bytes shared out."""
    return [
        StepSpec(
            number + i,
            move.fragment,
            move.source_pu,
            move.target_pu,
            (move.vnode,),
            move.keys * (i + 1) // count - move.keys * i // count,
            move.bytes * (i + 1) // count - move.bytes * i // count,
            KeyRange(i, count),
        )
        for i in range(count)
    ]


def estimate_seconds(
    steps: list[StepSpec],
    granularity: Granularity,
    *,
    bytes_per_s: float = DEFAULT_TRANSFER_BYTES_PER_S,
    epoch_s: float = DEFAULT_EPOCH_S,
) -> float:
    """Transfer time at the measured rate (or the cap), plus the barriers: one per wave of
    steps, and one more for the last wave's acquire (its epoch also drops the source copy)."""
    total_bytes = sum(s.bytes for s in steps)
    rate = min(bytes_per_s, granularity.bytes_per_second or math.inf)
    waves = math.ceil(len(steps) / granularity.window) if steps else 0
    epochs = waves * EPOCHS_PER_WAVE + (EPOCHS_AFTER_LAST_WAVE if waves else 0)
    return total_bytes / rate + epochs * epoch_s


def plan_request(
    request: OperationRequest,
    cluster: ClusterView,
    *,
    bytes_per_s: float = DEFAULT_TRANSFER_BYTES_PER_S,
    epoch_s: float = DEFAULT_EPOCH_S,
) -> Plan:
    """The whole plan of a validated request (see ``request.validate``). A plan of 16,384 moves
    allocates some 150,000 objects: made with the cycle collector paused (``workers.cycles``),
    as in a control-plane process its full collections took two thirds of the planner's time
    (270 ms of 80 plain)."""
    with cycle_collection_paused():
        return _plan_request(request, cluster, bytes_per_s=bytes_per_s, epoch_s=epoch_s)


def _plan_request(
    request: OperationRequest,
    cluster: ClusterView,
    *,
    bytes_per_s: float,
    epoch_s: float,
) -> Plan:
    # the PUs named as added were validated open; the others of the fragment are the planner's
    # choice, and a closed one keeps what it holds
    closed = cluster.closed_parallel_units()
    fragments = {
        name: plan_fragment(
            cluster.fragments[name], change, weighted=request.weighted, closed=closed
        )
        for name, change in request.changes.items()
    }
    moves = [m for plan in fragments.values() for m in plan.moves]
    moves = order_by_load(moves, cluster.fragments, request.granularity.hot_vnodes)
    granularity, why = chosen_granularity(
        request.granularity, moves, fragments, bytes_per_s=bytes_per_s, epoch_s=epoch_s
    )
    steps = split_steps(moves, granularity)
    estimate = estimate_seconds(steps, granularity, bytes_per_s=bytes_per_s, epoch_s=epoch_s)
    if request.strategy == Strategy.STOP_START:
        # one barrier moves everything: there are no steps to issue, show or wait for
        steps = []
    return Plan(request, fragments, tuple(steps), estimate, granularity, why)
