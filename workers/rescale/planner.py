"""Which vnodes move where, cut into steps, with the balance before and after and a time estimate.

The planner moves as few vnodes as it can while leaving every PU within one vnode of the mean:
with V vnodes on n PUs each PU gets ``V // n`` or one more, the extra ones going to the PUs that
already hold the most, so that the fewest vnodes have to leave. Asked to weigh by measured load,
it keeps the same counts but chooses *which* vnodes leave and where they land so that bytes per PU
even out too (a skewed key distribution is cured by placement, not by more vnodes).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from typing import Any

from workers.rescale.request import (
    ClusterView,
    FragmentChange,
    FragmentView,
    Granularity,
    RescheduleRequest,
)

# used for estimates when nothing has been measured yet
DEFAULT_TRANSFER_BYTES_PER_S = 40e6
DEFAULT_EPOCH_S = 1.0
EPOCHS_PER_STEP = 2  # collect at one barrier, acquire at the next, drop at the one after


@dataclass(frozen=True)
class Move:
    fragment: str
    vnode: int
    source: int
    target: int
    keys: int
    bytes: int


@dataclass(frozen=True)
class StepSpec:
    """One unit of a live migration: vnodes going from one PU to another."""

    id: int
    fragment: str
    source: int
    target: int
    vnodes: tuple[int, ...]
    keys: int
    bytes: int

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "vnodes": list(self.vnodes)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StepSpec:
        return cls(
            id=data["id"],
            fragment=data["fragment"],
            source=data["source"],
            target=data["target"],
            vnodes=tuple(data["vnodes"]),
            keys=data["keys"],
            bytes=data["bytes"],
        )


@dataclass(frozen=True)
class FragmentPlan:
    fragment: str
    kind: str  # scale_out, scale_in, migrate
    pus_before: tuple[int, ...]
    pus_after: tuple[int, ...]
    mapping_before: tuple[int, ...]
    mapping_after: tuple[int, ...]
    moves: tuple[Move, ...]
    load: dict[int, tuple[int, int]]  # vnode -> (keys, bytes) as measured

    def balance(self, mapping: tuple[int, ...], pus: tuple[int, ...]) -> dict[str, Any]:
        counts = {pu: 0 for pu in pus}
        size = {pu: 0 for pu in pus}
        for vnode, pu in enumerate(mapping):
            counts[pu] = counts.get(pu, 0) + 1
            size[pu] = size.get(pu, 0) + self.load.get(vnode, (0, 0))[1]
        mean_bytes = sum(size.values()) / max(len(pus), 1)
        return {
            "vnodes_per_pu": {str(pu): n for pu, n in sorted(counts.items())},
            "bytes_per_pu": {str(pu): b for pu, b in sorted(size.items())},
            "max_vnodes_minus_min": max(counts.values()) - min(counts.values()),
            "max_bytes_over_mean": round(max(size.values()) / mean_bytes, 3)
            if mean_bytes
            else None,
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "fragment": self.fragment,
            "kind": self.kind,
            "parallel_units_before": list(self.pus_before),
            "parallel_units_after": list(self.pus_after),
            "moves": [asdict(m) for m in self.moves],
            "vnodes_moved": len(self.moves),
            "keys_moved": sum(m.keys for m in self.moves),
            "bytes_moved": sum(m.bytes for m in self.moves),
            "balance_before": self.balance(self.mapping_before, self.pus_before),
            "balance_after": self.balance(self.mapping_after, self.pus_after),
            "mapping_before": list(self.mapping_before),
            "mapping_after": list(self.mapping_after),
            "load": {str(v): list(kb) for v, kb in self.load.items()},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FragmentPlan:
        return cls(
            fragment=data["fragment"],
            kind=data["kind"],
            pus_before=tuple(data["parallel_units_before"]),
            pus_after=tuple(data["parallel_units_after"]),
            mapping_before=tuple(data["mapping_before"]),
            mapping_after=tuple(data["mapping_after"]),
            moves=tuple(Move(**m) for m in data["moves"]),
            load={int(v): (kb[0], kb[1]) for v, kb in data.get("load", {}).items()},
        )


@dataclass(frozen=True)
class Plan:
    request: RescheduleRequest
    fragments: dict[str, FragmentPlan]
    steps: tuple[StepSpec, ...]
    estimate_s: float

    def to_json(self) -> dict[str, Any]:
        return {
            "strategy": self.request.strategy,
            "granularity": self.request.granularity.to_json(),
            "fragments": {n: p.to_json() for n, p in self.fragments.items()},
            "steps": [s.to_json() for s in self.steps],
            "estimated_duration_s": round(self.estimate_s, 3),
        }

    @classmethod
    def from_json(cls, request: RescheduleRequest, data: dict[str, Any]) -> Plan:
        """The plan as ``to_json`` stored it (the request is stored beside it)."""
        return cls(
            request=request,
            fragments={n: FragmentPlan.from_json(f) for n, f in data["fragments"].items()},
            steps=tuple(StepSpec.from_json(s) for s in data["steps"]),
            estimate_s=data["estimated_duration_s"],
        )


def target_counts(current: dict[int, int], pus_after: list[int], vnodes: int) -> dict[int, int]:
    """Vnodes each PU should hold: V // n, plus one for the V % n PUs holding the most now."""
    n = len(pus_after)
    base, extra = divmod(vnodes, n)
    by_holding = sorted(pus_after, key=lambda pu: (-current.get(pu, 0), pu))
    return {pu: base + (1 if i < extra else 0) for i, pu in enumerate(by_holding)}


def _keep_near(owned: list[int], slots: int, size: dict[int, int], target: float) -> list[int]:
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


def plan_fragment(
    view: FragmentView, change: FragmentChange, *, weighted: bool = False
) -> FragmentPlan:
    mapping = list(view.mapping)
    vnodes = len(mapping)
    pus_after = [pu for pu in view.pus if pu not in change.removed] + list(change.added)
    held: dict[int, list[int]] = defaultdict(list)
    for vnode, pu in enumerate(mapping):
        held[pu].append(vnode)
    quota = target_counts({pu: len(v) for pu, v in held.items()}, pus_after, vnodes)
    size = {v: view.vnode_load.get(v, (0, 0))[1] for v in range(vnodes)}
    load = {pu: sum(size[v] for v in held.get(pu, [])) for pu in pus_after}
    mean_load = sum(size.values()) / len(pus_after)

    leaving: list[tuple[int, int]] = []  # (vnode, source)
    for pu, owned in held.items():
        if pu not in quota:
            leaving += [(v, pu) for v in owned]
            continue
        excess = len(owned) - quota[pu]
        if excess <= 0:
            continue
        if weighted:
            kept = set(_keep_near(owned, quota[pu], size, mean_load))
            chosen = [v for v in owned if v not in kept]
        else:
            chosen = owned[-excess:]  # the tail of its range: ranges stay contiguous
        leaving += [(v, pu) for v in chosen]
        for v in chosen:
            load[pu] -= size[v]

    leaving_from = Counter(source for _, source in leaving)
    room = {pu: quota[pu] - len(held.get(pu, [])) + leaving_from[pu] for pu in pus_after}
    if weighted:
        leaving.sort(key=lambda vs: (-size[vs[0]], vs[0]))
    else:
        leaving.sort()
    new_mapping = list(mapping)
    moves: list[Move] = []
    for vnode, source in leaving:
        candidates = [pu for pu in pus_after if room[pu] > 0]
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
        pus_before=tuple(view.pus),
        pus_after=tuple(pus_after),
        mapping_before=tuple(mapping),
        mapping_after=tuple(new_mapping),
        moves=tuple(sorted(moves, key=lambda m: m.vnode)),
        load=dict(view.vnode_load),
    )


def _chunks(group: list[Move], granularity: Granularity) -> list[list[Move]]:
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


def split_steps(moves: list[Move], granularity: Granularity, first_id: int = 1) -> list[StepSpec]:
    """Cut moves into steps of one (source, target) pair each, within the granularity's caps.

    Steps of different PU pairs are interleaved so that steps in flight spread over PUs.
    """
    groups: dict[tuple[str, int, int], list[Move]] = defaultdict(list)
    for move in moves:
        groups[(move.fragment, move.source, move.target)].append(move)
    per_group = [_chunks(group, granularity) for _, group in sorted(groups.items())]
    ordered: list[StepSpec] = []
    for i in range(max((len(chunks) for chunks in per_group), default=0)):
        for chunks in per_group:
            if i < len(chunks):
                batch = chunks[i]
                first = batch[0]
                ordered.append(
                    StepSpec(
                        id=first_id + len(ordered),
                        fragment=first.fragment,
                        source=first.source,
                        target=first.target,
                        vnodes=tuple(m.vnode for m in batch),
                        keys=sum(m.keys for m in batch),
                        bytes=sum(m.bytes for m in batch),
                    )
                )
    return ordered


def estimate_seconds(
    steps: list[StepSpec],
    granularity: Granularity,
    *,
    bytes_per_s: float = DEFAULT_TRANSFER_BYTES_PER_S,
    epoch_s: float = DEFAULT_EPOCH_S,
) -> float:
    """Transfer time at the measured rate (or the cap), plus each wave of steps' barriers."""
    total_bytes = sum(s.bytes for s in steps)
    rate = min(bytes_per_s, granularity.bytes_per_second or math.inf)
    waves = math.ceil(len(steps) / granularity.steps_in_flight) if steps else 0
    return total_bytes / rate + waves * EPOCHS_PER_STEP * epoch_s


def plan_request(
    request: RescheduleRequest,
    cluster: ClusterView,
    *,
    bytes_per_s: float = DEFAULT_TRANSFER_BYTES_PER_S,
    epoch_s: float = DEFAULT_EPOCH_S,
) -> Plan:
    """The whole plan of a validated request (see ``request.validate``)."""
    fragments = {
        name: plan_fragment(cluster.fragments[name], change, weighted=request.weighted)
        for name, change in request.changes.items()
    }
    moves = [m for plan in fragments.values() for m in plan.moves]
    steps = split_steps(moves, request.granularity)
    estimate = estimate_seconds(
        steps, request.granularity, bytes_per_s=bytes_per_s, epoch_s=epoch_s
    )
    return Plan(request, fragments, tuple(steps), estimate)
