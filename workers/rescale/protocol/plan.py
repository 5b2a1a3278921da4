"""A planned operation: each fragment's plan (its moves, mappings and load) and the whole plan
(its fragments, steps and estimate), with their JSON forms. The moves and steps themselves are
:mod:`workers.rescale.protocol.moves`."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from workers.hashing import KeyRange
from workers.rescale.protocol.moves import Move, StepSpec
from workers.rescale.protocol.operation_request import ChangeKind, Granularity, OperationRequest


@dataclass(frozen=True)
class FragmentPlan:
    fragment: str
    kind: ChangeKind
    parallel_units_before: tuple[int, ...]
    parallel_units_after: tuple[int, ...]
    mapping_before: tuple[int, ...]
    mapping_after: tuple[int, ...]
    moves: tuple[Move, ...]
    load: dict[int, tuple[int, int]]  # vnode -> (keys, bytes) as measured

    def balance(self, mapping: tuple[int, ...], parallel_units: tuple[int, ...]) -> dict[str, Any]:
        # counted by Counter and summed over the loaded vnodes only, not vnode by vnode with a
        # lookup each (two balances of 32,768 vnodes were 50 ms of a dry run)
        counts = dict.fromkeys(parallel_units, 0)
        counts.update(Counter(mapping))
        size = dict.fromkeys(counts, 0)
        vnodes = len(mapping)
        for vnode, (_, nbytes) in self.load.items():
            if 0 <= vnode < vnodes:
                size[mapping[vnode]] += nbytes
        mean_bytes = sum(size.values()) / max(len(parallel_units), 1)
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
            "parallel_units_before": list(self.parallel_units_before),
            "parallel_units_after": list(self.parallel_units_after),
            "moves": [m.to_json() for m in self.moves],
            "vnodes_moved": len(self.moves),
            "keys_moved": sum(m.keys for m in self.moves),
            "bytes_moved": sum(m.bytes for m in self.moves),
            "balance_before": self.balance(self.mapping_before, self.parallel_units_before),
            "balance_after": self.balance(self.mapping_after, self.parallel_units_after),
            "mapping_before": list(self.mapping_before),
            "mapping_after": list(self.mapping_after),
            "load": {str(v): list(kb) for v, kb in self.load.items()},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FragmentPlan:
        return cls(
            fragment=data["fragment"],
            kind=ChangeKind(data["kind"]),
            parallel_units_before=tuple(data["parallel_units_before"]),
            parallel_units_after=tuple(data["parallel_units_after"]),
            mapping_before=tuple(data["mapping_before"]),
            mapping_after=tuple(data["mapping_after"]),
            moves=tuple(Move.from_json(m) for m in data["moves"]),
            load={int(v): (kb[0], kb[1]) for v, kb in data.get("load", {}).items()},
        )

    def summary_json(self) -> dict[str, Any]:
        """What a dry run answers of it: the figures and balances, and the moves summed per
        source PU (``sources``: what leaves it) and per target PU (``targets``: what it
        takes), so that the answer grows with the PUs, never with the vnodes moved (per
        (source, target) pair it would: a weighted plan spreads a source's vnodes over many
        targets). ``compact_json`` keeps the whole plan."""
        sources: dict[int, list[int]] = {}
        targets: dict[int, list[int]] = {}
        keys = nbytes = 0
        for move in self.moves:
            for per_pu, pu in ((sources, move.source_pu), (targets, move.target_pu)):
                figures = per_pu.get(pu)
                if figures is None:
                    figures = per_pu[pu] = [0, 0, 0]
                figures[0] += 1
                figures[1] += move.keys
                figures[2] += move.bytes
            keys += move.keys
            nbytes += move.bytes
        return {
            "fragment": self.fragment,
            "kind": self.kind,
            "parallel_units_before": list(self.parallel_units_before),
            "parallel_units_after": list(self.parallel_units_after),
            "vnodes_moved": len(self.moves),
            "keys_moved": keys,
            "bytes_moved": nbytes,
            "balance_before": self.balance(self.mapping_before, self.parallel_units_before),
            "balance_after": self.balance(self.mapping_after, self.parallel_units_after),
            "sources": _per_pu(sources),
            "targets": _per_pu(targets),
        }

    def compact_json(self) -> dict[str, Any]:
        """All of it, as columns of numbers rather than an object per move and per vnode (half
        the JSON, a fraction of the time to write and read): ``from_compact`` gives it back
        equal."""
        for move in self.moves:
            if move.fragment != self.fragment:
                raise ValueError(f"a move of {move.fragment!r} in the plan of {self.fragment!r}")
        return {
            "fragment": self.fragment,
            "kind": self.kind,
            "parallel_units_before": list(self.parallel_units_before),
            "parallel_units_after": list(self.parallel_units_after),
            "mapping_before": list(self.mapping_before),
            "mapping_after": list(self.mapping_after),
            "moves": {
                "vnode": [m.vnode for m in self.moves],
                "source_pu": [m.source_pu for m in self.moves],
                "target_pu": [m.target_pu for m in self.moves],
                "keys": [m.keys for m in self.moves],
                "bytes": [m.bytes for m in self.moves],
            },
            "load": {
                "vnode": list(self.load),
                "keys": [kb[0] for kb in self.load.values()],
                "bytes": [kb[1] for kb in self.load.values()],
            },
        }

    @classmethod
    def from_compact(cls, data: dict[str, Any]) -> FragmentPlan:
        name, moves, load = data["fragment"], data["moves"], data["load"]
        columns = (moves["vnode"], moves["source_pu"], moves["target_pu"], moves["keys"])
        return cls(
            fragment=name,
            kind=ChangeKind(data["kind"]),
            parallel_units_before=tuple(data["parallel_units_before"]),
            parallel_units_after=tuple(data["parallel_units_after"]),
            mapping_before=tuple(data["mapping_before"]),
            mapping_after=tuple(data["mapping_after"]),
            moves=tuple(
                Move(name, v, s, t, k, b)
                for v, s, t, k, b in zip(*columns, moves["bytes"], strict=True)
            ),
            load=dict(
                zip(load["vnode"], zip(load["keys"], load["bytes"], strict=True), strict=True)
            ),
        )


def _per_pu(figures: dict[int, list[int]]) -> list[dict[str, int]]:
    return [
        {"parallel_unit": pu, "vnodes": n, "keys": k, "bytes": b}
        for pu, (n, k, b) in sorted(figures.items())
    ]


@dataclass(frozen=True)
class Plan:
    """What an operation will do. ``to_json`` is the dry run's answer; a stored operation keeps
    only ``stored_json`` (fragments and estimate) beside its own columns and step rows, and
    ``from_stored`` puts the record back together, so nothing is stored twice."""

    request: OperationRequest
    fragments: dict[str, FragmentPlan]
    steps: tuple[StepSpec, ...]
    estimate_s: float
    # the granularity the steps were cut by: the request's, with what it left out chosen from
    # the plan's size (``workers.rescale.pacing``), and why ("" when the request set it all)
    granularity: Granularity = field(default_factory=Granularity)
    granularity_reason: str = ""

    def __post_init__(self) -> None:
        if not self.granularity.chosen:  # a plan's granularity is whole: the request's, if so
            if not self.request.granularity.chosen:
                raise ValueError("a plan needs its granularity chosen (workers.rescale.pacing)")
            object.__setattr__(self, "granularity", self.request.granularity)

    def _granularity_json(self) -> dict[str, Any]:
        return {
            "granularity": self.granularity.to_json(),
            "granularity_reason": self.granularity_reason,
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "strategy": self.request.strategy,
            **self._granularity_json(),
            "fragments": {n: p.to_json() for n, p in self.fragments.items()},
            "steps": [s.to_json() for s in self.steps],
            "estimated_duration_s": round(self.estimate_s, 3),
        }

    def stored_json(self) -> dict[str, Any]:
        """The part of the plan no column or step row of the operation holds."""
        return {
            "fragments": {n: p.to_json() for n, p in self.fragments.items()},
            "estimated_duration_s": round(self.estimate_s, 3),
            # the operation's own granularity column holds the figures
            "granularity_reason": self.granularity_reason,
        }

    def summary_json(self) -> dict[str, Any]:
        """A dry run's answer: each fragment's ``summary_json``, the number of steps and the
        estimate; its size does not grow with the moves (the plan is kept by ``compact_json``)."""
        cut: dict[str, Counter[str]] = {name: Counter() for name in self.fragments}
        for step in self.steps:
            if step.key_range is not None and step.fragment in cut:
                cut[step.fragment]["key_range_steps"] += 1
                cut[step.fragment]["vnodes_cut"] += step.key_range.index == 0
        return {
            "strategy": self.request.strategy,
            **self._granularity_json(),
            "fragments": {
                n: {
                    **p.summary_json(),
                    "vnodes_cut": cut[n]["vnodes_cut"],
                    "key_range_steps": cut[n]["key_range_steps"],
                }
                for n, p in self.fragments.items()
            },
            "steps_total": len(self.steps),
            "estimated_duration_s": round(self.estimate_s, 3),
        }

    def compact_json(self) -> dict[str, Any]:
        """The whole plan but its request, in columns (``FragmentPlan.compact_json``):
        ``from_compact`` with the request gives it back equal (the estimate as ``to_json``
        rounds it)."""
        steps = self.steps
        return {
            **self._granularity_json(),
            "fragments": {n: p.compact_json() for n, p in self.fragments.items()},
            "steps": {
                "step": [s.step for s in steps],
                "fragment": [s.fragment for s in steps],
                "source_pu": [s.source_pu for s in steps],
                "target_pu": [s.target_pu for s in steps],
                # one flat list and a count per step (most steps have one vnode)
                "vnodes": [v for s in steps for v in s.vnodes],
                "vnode_counts": [len(s.vnodes) for s in steps],
                "keys": [s.keys for s in steps],
                "bytes": [s.bytes for s in steps],
                # (step index, range index, range count) of the few steps that carry a key range
                "key_ranges": [
                    [i, s.key_range.index, s.key_range.count]
                    for i, s in enumerate(steps)
                    if s.key_range is not None
                ],
            },
            "estimated_duration_s": round(self.estimate_s, 3),
        }

    @classmethod
    def from_compact(cls, request: OperationRequest, data: dict[str, Any]) -> Plan:
        steps = data["steps"]
        flat, at = steps["vnodes"], 0
        vnodes = []
        for count in steps["vnode_counts"]:
            vnodes.append(tuple(flat[at : at + count]))
            at += count
        if at != len(flat):
            raise ValueError(f"the steps count {at} vnodes, the plan has {len(flat)}")
        columns = (
            steps["step"], steps["fragment"], steps["source_pu"], steps["target_pu"],
            vnodes, steps["keys"], steps["bytes"],
        )  # fmt: skip
        ranges = {i: KeyRange(index, count) for i, index, count in steps.get("key_ranges", ())}
        return cls(
            request=request,
            fragments={n: FragmentPlan.from_compact(f) for n, f in data["fragments"].items()},
            steps=tuple(
                StepSpec(n, f, s, t, v, k, b, ranges.get(i))
                for i, (n, f, s, t, v, k, b) in enumerate(zip(*columns, strict=True))
            ),
            estimate_s=data["estimated_duration_s"],
            # a plan kept before the planner chose granularities: the request's
            granularity=Granularity.parse(data.get("granularity", request.granularity.to_json())),
            granularity_reason=data.get("granularity_reason", ""),
        )

    @classmethod
    def from_stored(
        cls, request: OperationRequest, stored: dict[str, Any], steps: list[StepSpec]
    ) -> Plan:
        return cls(
            request=request,
            fragments={n: FragmentPlan.from_json(f) for n, f in stored["fragments"].items()},
            steps=tuple(steps),
            estimate_s=stored["estimated_duration_s"],
            # an operation's own column holds the figures (its request's); a dry run's plan
            # kept whole, the plan's
            granularity=Granularity.parse(stored.get("granularity", request.granularity.to_json())),
            granularity_reason=stored.get("granularity_reason", ""),
        )
