"""Where each vnode lives: a versioned vnode → PU mapping per stateful fragment, kept durably.

The runner plans every epoch before it runs it: which placement each fragment uses. The plan is
written (fsync, atomic rename) before the epoch's job starts, so when Spark re-runs an epoch
after a crash, the runner routes it exactly as the first attempt did: a vnode's records can
never land in two stores (invariant I1).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class EpochClock:
    """The times an epoch runs at, as Spark's ``TimerValues`` give them (milliseconds)."""

    batch_ms: int = 0  # processing time: the epoch's batch timestamp
    watermark_ms: int = 0  # event-time timers up to this fire (Spark's watermark for eviction)
    late_ms: int = 0  # rows at or below this event time are late (the previous epoch's watermark)

    def to_json(self) -> dict[str, int]:
        return {
            "batch_ms": self.batch_ms,
            "watermark_ms": self.watermark_ms,
            "late_ms": self.late_ms,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> EpochClock:
        data = data or {}
        return cls(
            int(data.get("batch_ms", 0)),
            int(data.get("watermark_ms", 0)),
            int(data.get("late_ms", 0)),
        )


@dataclass(frozen=True)
class VnodeMapping:
    """One version of a fragment's vnode → PU mapping, with its PUs (a Spark partition each, in
    this order). The control plane's ``rescaler.cluster.models.VnodeMapping`` stores the same."""

    fragment: str
    parallel_units: tuple[int, ...]
    mapping: tuple[int, ...]  # mapping[vnode] = PU id
    version: int = 1

    def __post_init__(self) -> None:
        if not self.parallel_units:
            raise ValueError(f"{self.fragment}: a fragment needs at least one parallel unit")
        if len(set(self.parallel_units)) != len(self.parallel_units):
            raise ValueError(f"{self.fragment}: duplicate parallel units {self.parallel_units}")
        stray = set(self.mapping) - set(self.parallel_units)
        if stray:
            raise ValueError(
                f"{self.fragment}: vnodes mapped to PUs {sorted(stray)} not in {self.parallel_units}"
            )

    @classmethod
    def initial(cls, fragment: str, vnodes: int, pus: list[int]) -> VnodeMapping:
        """Contiguous, equal vnode ranges over the PUs (sizes differ by at most one)."""
        mapping = tuple(pus[v * len(pus) // vnodes] for v in range(vnodes))
        return cls(fragment, tuple(pus), mapping, 1)

    @property
    def vnodes(self) -> int:
        return len(self.mapping)

    def slot_of_vnode(self) -> list[int]:
        """For each vnode, the Spark partition index of its PU (what routing needs)."""
        slot = {pu: i for i, pu in enumerate(self.parallel_units)}
        return [slot[pu] for pu in self.mapping]

    def vnodes_of(self, pu: int) -> list[int]:
        return [v for v, owner in enumerate(self.mapping) if owner == pu]

    def to_json(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "parallel_units": list(self.parallel_units),
            "mapping": list(self.mapping),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> VnodeMapping:
        return cls(
            data["fragment"],
            tuple(data["parallel_units"]),
            tuple(data["mapping"]),
            data["version"],
        )


def write_json_atomic(path: Path, data: Any) -> None:
    """Write, fsync and rename into place: a reader sees the old file or the new, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        # dumps, not dump: dump streams through Python's pure-Python encoder, several times slower
        fh.write(json.dumps(data, sort_keys=True))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


#: (vnode, range index, range count): one key range of a vnode in an epoch's actions
RangeRef = tuple[int, int, int]


@dataclass(frozen=True)
class SlotActions:
    """What one PU's task does at an epoch besides folding its records (all idempotent)."""

    seal: tuple[int, ...] = ()  # vnodes to seal (Collect starts)
    unseal: tuple[int, ...] = ()  # sealed vnodes a cancel gives back to this PU (their source)
    drop: tuple[int, ...] = ()  # vnodes whose range to delete (Drop)
    ingest: tuple[str, ...] = ()  # export files to verify and ingest (Acquire)
    replay_files: tuple[str, ...] = ()  # hold queue files to apply before the epoch's records
    replay_vnodes: tuple[int, ...] = ()  # ... only the rows of these vnodes
    hold_path: str | None = None  # where this epoch's held rows routed here are appended
    # the same for key ranges of hot vnodes moving range by range (a range's export file says
    # its range, so ``ingest`` covers both)
    seal_ranges: tuple[RangeRef, ...] = ()
    unseal_ranges: tuple[RangeRef, ...] = ()
    drop_ranges: tuple[RangeRef, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}
        for name in ("seal_ranges", "unseal_ranges", "drop_ranges"):
            if not data[name]:
                del data[name]  # the plan of an epoch without cut vnodes reads as before
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SlotActions:
        def ranges(name: str) -> tuple[RangeRef, ...]:
            return tuple((int(v), int(i), int(n)) for v, i, n in data.get(name, ()))

        return cls(
            seal=tuple(data.get("seal", ())),
            unseal=tuple(data.get("unseal", ())),
            drop=tuple(data.get("drop", ())),
            ingest=tuple(data.get("ingest", ())),
            replay_files=tuple(data.get("replay_files", ())),
            replay_vnodes=tuple(data.get("replay_vnodes", ())),
            hold_path=data.get("hold_path"),
            seal_ranges=ranges("seal_ranges"),
            unseal_ranges=ranges("unseal_ranges"),
            drop_ranges=ranges("drop_ranges"),
        )


@dataclass(frozen=True)
class CutVnode:
    """A hot vnode moving key range by key range, as it routes in one epoch: records of the
    ranges in ``moved`` go to ``target``'s task, of the range in ``held`` to ``target``'s hold
    queue, of every other range to the vnode's owner in the mapping."""

    count: int  # the vnode's key ranges (``workers.hashing.KeyRange``)
    target: int
    moved: tuple[int, ...] = ()
    held: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "target": self.target,
            "moved": list(self.moved),
            "held": list(self.held),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CutVnode:
        return cls(
            int(data["count"]),
            int(data["target"]),
            tuple(data.get("moved", ())),
            tuple(data.get("held", ())),
        )


@dataclass(frozen=True)
class FragmentActions:
    held: dict[int, int] = field(default_factory=dict)  # vnode -> the PU holding its records
    slots: dict[int, SlotActions] = field(default_factory=dict)  # PU -> its actions
    cut: dict[int, CutVnode] = field(default_factory=dict)  # vnode -> its key ranges' routing

    def slot(self, pu: int) -> SlotActions:
        return self.slots.get(pu, SlotActions())

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "held": {str(v): pu for v, pu in self.held.items()},
            "slots": {str(pu): a.to_json() for pu, a in self.slots.items()},
        }
        if self.cut:
            data["cut"] = {str(v): c.to_json() for v, c in self.cut.items()}
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FragmentActions:
        return cls(
            {int(v): pu for v, pu in data.get("held", {}).items()},
            {int(pu): SlotActions.from_json(a) for pu, a in data.get("slots", {}).items()},
            {int(v): CutVnode.from_json(c) for v, c in data.get("cut", {}).items()},
        )


@dataclass(frozen=True)
class EpochPlan:
    """The placements an epoch runs with, and what each PU does besides folding records."""

    epoch: int
    placements: dict[str, VnodeMapping]
    actions: dict[str, FragmentActions] = field(default_factory=dict)
    clock: EpochClock = field(
        default_factory=EpochClock
    )  # processing time and watermark, the same in a re-run
    # the snapshot whose store copies this epoch's tasks make (workers/recovery); not recorded:
    # a re-run after a crash makes none, and the snapshot is simply due again
    snapshot: str | None = None
    # not recorded either: the first epoch whose outputs the stores keep (a rebuild re-emits
    # them), and whether this is a re-run of a committed epoch for a rebuild
    outputs_from: int | None = None
    rebuilding: bool = False

    def fragment_actions(self, name: str) -> FragmentActions:
        return self.actions.get(name, FragmentActions())

    def to_json(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "placements": {name: p.to_json() for name, p in self.placements.items()},
            "actions": {name: a.to_json() for name, a in self.actions.items()},
            "clock": self.clock.to_json(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EpochPlan:
        return cls(
            data["epoch"],
            {n: VnodeMapping.from_json(p) for n, p in data["placements"].items()},
            {n: FragmentActions.from_json(a) for n, a in data.get("actions", {}).items()},
            EpochClock.from_json(data.get("clock")),
        )


class PlacementStore:
    """The runner's durable placement: ``placement.json`` (current) and ``epoch-plan.json``."""

    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)

    @property
    def _current(self) -> Path:
        return self.dir / "placement.json"

    @property
    def _plan(self) -> Path:
        return self.dir / "epoch-plan.json"

    def load(self) -> dict[str, VnodeMapping] | None:
        if not self._current.exists():
            return None
        data = json.loads(self._current.read_text("utf-8"))
        return {name: VnodeMapping.from_json(p) for name, p in data.items()}

    def save(self, placements: dict[str, VnodeMapping]) -> None:
        write_json_atomic(self._current, {n: p.to_json() for n, p in placements.items()})

    def last_plan(self) -> EpochPlan | None:
        if not self._plan.exists():
            return None
        return EpochPlan.from_json(json.loads(self._plan.read_text("utf-8")))

    def save_plan(self, plan: EpochPlan) -> None:
        write_json_atomic(self._plan, plan.to_json())
