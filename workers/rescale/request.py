"""The reschedule request (one shape for scale-out, scale-in and migration) and its validation.

``{"reschedules": {"<fragment>": {"added_parallel_units": [...], "removed_parallel_units": [...]}},
   "strategy": "live" | "stop_start", "granularity": {...}, "dry_run": false}``

Everything is checked before anything moves; the first problem found is raised with a reason a
person can act on and a stable ``code`` an automation can branch on.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from workers.rescale import errors

STRATEGIES = ("live", "stop_start")


@dataclass(frozen=True)
class Granularity:
    """How an operation is cut into steps and paced (Megaphone's knob).

    ``vnodes_per_step`` 1 is *fluid*: flat latency, longest total time; a step as large as the
    whole move is *all at once*: fastest, with a spike. Keys and bytes caps cut a step earlier.
    """

    vnodes_per_step: int = 1
    max_keys_per_step: int | None = None
    max_bytes_per_step: int | None = None
    steps_in_flight: int = 1
    bytes_per_second: float | None = None

    def __post_init__(self) -> None:
        if self.vnodes_per_step < 1:
            raise errors.MalformedRequest("granularity.vnodes_per_step must be at least 1")
        if self.steps_in_flight < 1:
            raise errors.MalformedRequest("granularity.steps_in_flight must be at least 1")
        for name in ("max_keys_per_step", "max_bytes_per_step"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise errors.MalformedRequest(f"granularity.{name} must be positive when given")
        # below one byte per second an operation would never finish (and its estimate overflows)
        if self.bytes_per_second is not None and not 1 <= self.bytes_per_second < float("inf"):
            raise errors.MalformedRequest(
                "granularity.bytes_per_second must be at least 1 (bytes per second) when given"
            )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def parse(cls, data: Any) -> Granularity:
        if data is None:
            return cls()
        if isinstance(data, str):
            if data not in PRESETS:
                raise errors.MalformedRequest(
                    f"granularity preset {data!r} unknown; use one of {sorted(PRESETS)} or an object"
                )
            return PRESETS[data]
        if not isinstance(data, dict):
            raise errors.MalformedRequest("granularity must be an object or a preset name")
        allowed: dict[str, type | tuple[type, ...]] = {
            "vnodes_per_step": int,
            "max_keys_per_step": int,
            "max_bytes_per_step": int,
            "steps_in_flight": int,
            "bytes_per_second": (int, float),
        }
        unknown = set(data) - set(allowed)
        if unknown:
            raise errors.MalformedRequest(
                f"unknown granularity field(s) {sorted(unknown)}; allowed: {sorted(allowed)}"
            )
        optional = {"max_keys_per_step", "max_bytes_per_step", "bytes_per_second"}
        for name, value in data.items():
            if value is None and name in optional:
                continue
            if isinstance(value, bool) or not isinstance(value, allowed[name]):
                raise errors.MalformedRequest(f"granularity.{name} must be a number, not {value!r}")
        return cls(**data)


PRESETS = {
    "fluid": Granularity(vnodes_per_step=1, steps_in_flight=1),
    "batched": Granularity(vnodes_per_step=8, steps_in_flight=2),
    "all_at_once": Granularity(vnodes_per_step=1 << 16, steps_in_flight=1 << 16),
}


@dataclass(frozen=True)
class FragmentChange:
    added: tuple[int, ...] = ()
    removed: tuple[int, ...] = ()

    @property
    def kind(self) -> str:
        if self.added and not self.removed:
            return "scale_out"
        if self.removed and not self.added:
            return "scale_in"
        return "migrate"

    def to_json(self) -> dict[str, list[int]]:
        return {
            "added_parallel_units": list(self.added),
            "removed_parallel_units": list(self.removed),
        }


@dataclass(frozen=True)
class RescheduleRequest:
    changes: dict[str, FragmentChange]
    strategy: str = "live"
    granularity: Granularity = field(default_factory=Granularity)
    dry_run: bool = False
    weighted: bool = False  # balance measured bytes, not just vnode counts

    def to_json(self) -> dict[str, Any]:
        return {
            "reschedules": {name: c.to_json() for name, c in self.changes.items()},
            "strategy": self.strategy,
            "granularity": self.granularity.to_json(),
            "dry_run": self.dry_run,
            "weighted": self.weighted,
        }

    @classmethod
    def parse(cls, data: Any) -> RescheduleRequest:
        """Parse a request body, refusing anything malformed with the exact reason."""
        if not isinstance(data, dict):
            raise errors.MalformedRequest("the request body must be a JSON object")
        allowed = {"reschedules", "strategy", "granularity", "dry_run", "weighted"}
        unknown = set(data) - allowed
        if unknown:
            raise errors.MalformedRequest(
                f"unknown field(s) {sorted(unknown)}; allowed: {sorted(allowed)}"
            )
        reschedules = data.get("reschedules")
        if not isinstance(reschedules, dict) or not reschedules:
            raise errors.MalformedRequest(
                "'reschedules' must be a non-empty object: {fragment: {added_parallel_units: [...], "
                "removed_parallel_units: [...]}}"
            )
        changes = {str(name): _parse_change(str(name), body) for name, body in reschedules.items()}
        strategy = data.get("strategy", "live")
        if strategy not in STRATEGIES:
            raise errors.MalformedRequest(
                f"'strategy' must be one of {list(STRATEGIES)}, not {strategy!r}"
            )
        for flag in ("dry_run", "weighted"):
            if not isinstance(data.get(flag, False), bool):
                raise errors.MalformedRequest(f"'{flag}' must be true or false")
        return cls(
            changes=changes,
            strategy=strategy,
            granularity=Granularity.parse(data.get("granularity")),
            dry_run=data.get("dry_run", False),
            weighted=data.get("weighted", False),
        )


def _parse_units(fragment: str, name: str, value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or any(
        isinstance(v, bool) or not isinstance(v, int) for v in value
    ):
        raise errors.MalformedRequest(
            f"reschedules.{fragment}.{name} must be a list of parallel unit ids (integers)"
        )
    if len(set(value)) != len(value):
        raise errors.MalformedRequest(f"reschedules.{fragment}.{name} lists a unit twice")
    return tuple(value)


def _parse_change(fragment: str, body: Any) -> FragmentChange:
    if not isinstance(body, dict):
        raise errors.MalformedRequest(f"reschedules.{fragment} must be an object")
    allowed = {"added_parallel_units", "removed_parallel_units"}
    unknown = set(body) - allowed
    if unknown:
        raise errors.MalformedRequest(
            f"reschedules.{fragment}: unknown field(s) {sorted(unknown)}; allowed: {sorted(allowed)}"
        )
    added = _parse_units(fragment, "added_parallel_units", body.get("added_parallel_units"))
    removed = _parse_units(fragment, "removed_parallel_units", body.get("removed_parallel_units"))
    if not added and not removed:
        raise errors.NothingToDo(f"reschedules.{fragment} adds and removes nothing")
    both = set(added) & set(removed)
    if both:
        raise errors.AddedAndRemoved(
            f"{fragment}: parallel unit(s) {sorted(both)} are both added and removed"
        )
    return FragmentChange(added, removed)


@dataclass(frozen=True)
class FragmentView:
    """What validation and planning need to know of one fragment."""

    name: str
    stateful: bool
    pus: tuple[int, ...]
    mapping: tuple[int, ...] = ()  # vnode -> PU
    vnode_load: dict[int, tuple[int, int]] = field(default_factory=dict)  # vnode -> (keys, bytes)
    busy_with: str | None = None  # the id of the operation in progress on it


@dataclass(frozen=True)
class ClusterView:
    """The cluster as validation sees it: PUs, their workers' liveness, fragments."""

    pu_worker: dict[int, str]
    worker_alive: dict[str, bool]
    fragments: dict[str, FragmentView]


def validate(request: RescheduleRequest, cluster: ClusterView) -> None:
    """Raise the first reason the request cannot be carried out; return if it can."""
    for name, change in request.changes.items():
        frag = cluster.fragments.get(name)
        if frag is None:
            known = ", ".join(sorted(n for n, f in cluster.fragments.items() if f.stateful))
            raise errors.UnknownFragment(f"no fragment {name!r}; stateful fragments: {known}")
        if not frag.stateful:
            raise errors.NotStateful(f"fragment {name!r} has no keyed state to place")
        for pu in (*change.added, *change.removed):
            if pu not in cluster.pu_worker:
                raise errors.UnknownParallelUnit(
                    f"{name}: parallel unit {pu} does not exist; known: {sorted(cluster.pu_worker)}"
                )
        for pu in change.added:
            worker = cluster.pu_worker[pu]
            if not cluster.worker_alive.get(worker, False):
                raise errors.DeadWorker(
                    f"{name}: parallel unit {pu} is on worker {worker!r}, which is not alive"
                )
            if pu in frag.pus:
                raise errors.AlreadyInFragment(f"{name}: parallel unit {pu} already runs it")
        for pu in change.removed:
            if pu not in frag.pus:
                raise errors.NotInFragment(
                    f"{name}: parallel unit {pu} does not run it (it runs on {list(frag.pus)})"
                )
        remaining = (set(frag.pus) - set(change.removed)) | set(change.added)
        if not remaining:
            raise errors.RemovesEveryUnit(
                f"{name}: the request removes every parallel unit; at least one must remain"
            )
        if frag.busy_with is not None:
            raise errors.FragmentBusy(
                f"{name}: operation {frag.busy_with} is still in progress on this fragment; "
                f"wait for it or cancel it"
            )
