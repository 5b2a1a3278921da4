"""An operation as a client asks for it: the changes per fragment, the granularity, the
strategy, and the limits the parser and the API schema share."""

from __future__ import annotations

import enum
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from workers.rescale import errors
from workers.rescale.protocol.phases import Strategy


class ChangeKind(enum.StrEnum):
    SCALE_OUT = "scale_out"  # only added
    SCALE_IN = "scale_in"  # only removed
    MIGRATE = "migrate"  # both


# -- the request ---------------------------------------------------------------------------------
# the range of each granularity field: the parser refuses anything outside it and the API schema
# publishes it, from these two tables (so the OpenAPI schema and the code cannot disagree)
GRANULARITY_MINIMUMS: dict[str, int] = {
    "vnodes_per_step": 1,
    "max_keys_per_step": 1,
    "max_bytes_per_step": 1,
    # below one byte per second an operation would never finish (and its estimate overflows)
    "bytes_per_second": 1,
    "steps_in_flight": 1,
}
# a fragment has at most this many vnodes (``workers.state.MAX_VNODES``, the store key's vnode
# prefix), so an operation has at most as many moves and steps: a larger step or window is the
# same as this one, and all_at_once is exactly it
_MOST_VNODES = 1 << 16
# the largest integer a double holds exactly (and JavaScript clients read exactly): keys, bytes
# and rates meet floats in the planner's estimate and the orchestrator's pacing, where a larger
# number loses precision or overflows; 2**53 bytes is 8 PiB, far beyond any fragment's state
_MOST_EXACT = 1 << 53
GRANULARITY_MAXIMUMS: dict[str, int] = {
    "vnodes_per_step": _MOST_VNODES,
    "max_keys_per_step": _MOST_EXACT,
    "max_bytes_per_step": _MOST_EXACT,
    "bytes_per_second": _MOST_EXACT,
    "steps_in_flight": _MOST_VNODES,
}
GRANULARITY_OPTIONAL = frozenset(
    {
        "vnodes_per_step",
        "steps_in_flight",
        "max_keys_per_step",
        "max_bytes_per_step",
        "bytes_per_second",
    }
)
# the two figures the planner chooses from the plan's size when a request leaves them out
# (``workers.rescale.pacing.chosen_granularity``)
GRANULARITY_CHOSEN = ("vnodes_per_step", "steps_in_flight")
GRANULARITY_TYPES: dict[str, type | tuple[type, ...]] = {
    "vnodes_per_step": int,
    "max_keys_per_step": int,
    "max_bytes_per_step": int,
    "steps_in_flight": int,
    "bytes_per_second": (int, float),
}
# the order of a live operation's steps by the vnodes' measured load (``Granularity.hot_vnodes``)
HOT_VNODES_ORDERS = ("first", "last")
# a PU number is stored in an integer column (``ParallelUnit.number``): the parser refuses what
# the database could not compare, rather than letting the query fail
PARALLEL_UNIT_MAX = (1 << 31) - 1
# a fragment name as the topology can declare it (``Fragment.name`` is 64 characters): ASCII
# letters, digits, ``_``, ``-`` and ``.``, so it is safe in a URL path, a log line, a CSV cell
# and a Postgres text column (no NUL, no surrogate, no control or look-alike character)
FRAGMENT_NAME_MAX_CHARS = 64
FRAGMENT_NAME_PATTERN = re.compile(rf"[A-Za-z0-9_.-]{{1,{FRAGMENT_NAME_MAX_CHARS}}}")


@dataclass(frozen=True)
class Granularity:
    """How an operation is cut into steps and paced (Megaphone's knob).

    ``vnodes_per_step`` 1 is *fluid*: flat latency, longest total time; a step as large as the
    whole move is *all at once*: fastest, with a spike. Left out (None, the default and the
    ``auto`` preset), ``vnodes_per_step`` and ``steps_in_flight`` are chosen by the planner from
    the plan's size (``workers.rescale.pacing``): a plan's own granularity always has both.
    Keys and bytes caps cut a step earlier. ``hot_vnodes`` orders the moves by the vnodes'
    measured load (records per epoch, then keys and bytes): ``"first"`` (the default: the moving
    load reaches its new PUs soonest, and no order was measurably kinder to the keys that stay,
    ``bench/results/rescale_hot_order*``) moves the hottest first, ``"last"`` last; None keeps
    the placement's order (by vnode).
    """

    vnodes_per_step: int | None = None
    max_keys_per_step: int | None = None
    max_bytes_per_step: int | None = None
    steps_in_flight: int | None = None
    bytes_per_second: float | None = None
    hot_vnodes: str | None = "first"

    @property
    def chosen(self) -> bool:
        """Whether both of the figures the planner may choose are set (a plan's are)."""
        return self.vnodes_per_step is not None and self.steps_in_flight is not None

    @property
    def step_vnodes(self) -> int:
        """``vnodes_per_step`` of a plan's granularity (a request's may be left to the plan)."""
        if self.vnodes_per_step is None:
            raise ValueError("vnodes_per_step is chosen when the request is planned")
        return self.vnodes_per_step

    @property
    def window(self) -> int:
        """``steps_in_flight`` of a plan's granularity (a request's may be left to the plan)."""
        if self.steps_in_flight is None:
            raise ValueError("steps_in_flight is chosen when the request is planned")
        return self.steps_in_flight

    def __post_init__(self) -> None:
        if self.hot_vnodes is not None and self.hot_vnodes not in HOT_VNODES_ORDERS:
            raise errors.MalformedRequest(
                f"granularity.hot_vnodes must be one of {list(HOT_VNODES_ORDERS)} or null, "
                f"not {self.hot_vnodes!r}"
            )
        for name, least in GRANULARITY_MINIMUMS.items():
            value = getattr(self, name)
            if value is None and name in GRANULARITY_OPTIONAL:
                continue
            most = GRANULARITY_MAXIMUMS[name]
            if not least <= value <= most:
                when = " when given" if name in GRANULARITY_OPTIONAL else ""
                raise errors.MalformedRequest(
                    f"granularity.{name} must be at least {least} and at most {most}{when}"
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
        allowed = {*GRANULARITY_TYPES, "hot_vnodes"}
        unknown = set(data) - allowed
        if unknown:
            raise errors.MalformedRequest(
                f"unknown granularity field(s) {sorted(unknown)}; allowed: {sorted(allowed)}"
            )
        for name, value in data.items():
            if name == "hot_vnodes" or (value is None and name in GRANULARITY_OPTIONAL):
                continue  # hot_vnodes: checked by the constructor, a str or None
            if isinstance(value, bool) or not isinstance(value, GRANULARITY_TYPES[name]):
                raise errors.MalformedRequest(f"granularity.{name} must be a number, not {value!r}")
        return cls(**data)


PRESETS = {
    "auto": Granularity(),  # chosen from the plan's size
    "fluid": Granularity(vnodes_per_step=1, steps_in_flight=1),
    "batched": Granularity(vnodes_per_step=8, steps_in_flight=2),
    "all_at_once": Granularity(vnodes_per_step=1 << 16, steps_in_flight=1 << 16),
}


@dataclass(frozen=True)
class FragmentChange:
    """One fragment's part of a request: the PUs to add and to remove."""

    added_parallel_units: tuple[int, ...] = ()
    removed_parallel_units: tuple[int, ...] = ()

    @property
    def kind(self) -> ChangeKind:
        if self.added_parallel_units and not self.removed_parallel_units:
            return ChangeKind.SCALE_OUT
        if self.removed_parallel_units and not self.added_parallel_units:
            return ChangeKind.SCALE_IN
        return ChangeKind.MIGRATE

    def to_json(self) -> dict[str, list[int]]:
        return {
            "added_parallel_units": list(self.added_parallel_units),
            "removed_parallel_units": list(self.removed_parallel_units),
        }

    @classmethod
    def parse(cls, fragment: str, body: Any) -> FragmentChange:
        if not isinstance(body, dict):
            raise errors.MalformedRequest(f"changes.{fragment} must be an object")
        allowed = {"added_parallel_units", "removed_parallel_units"}
        unknown = set(body) - allowed
        if unknown:
            raise errors.MalformedRequest(
                f"changes.{fragment}: unknown field(s) {sorted(unknown)}; allowed: {sorted(allowed)}"
            )
        added = _parse_units(fragment, "added_parallel_units", body.get("added_parallel_units"))
        removed = _parse_units(
            fragment, "removed_parallel_units", body.get("removed_parallel_units")
        )
        if not added and not removed:
            raise errors.NothingToDo(f"changes.{fragment} adds and removes nothing")
        both = set(added) & set(removed)
        if both:
            raise errors.AddedAndRemoved(
                f"{fragment}: parallel unit(s) {sorted(both)} are both added and removed"
            )
        return cls(added, removed)


def _parse_units(fragment: str, name: str, value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or any(
        isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= PARALLEL_UNIT_MAX
        for v in value
    ):
        raise errors.MalformedRequest(
            f"changes.{fragment}.{name} must be a list of parallel unit ids "
            f"(integers from 0 to {PARALLEL_UNIT_MAX})"
        )
    if len(set(value)) != len(value):
        raise errors.MalformedRequest(f"changes.{fragment}.{name} lists a unit twice")
    return tuple(value)


REQUEST_FIELDS = ("changes", "strategy", "granularity", "dry_run", "weighted", "reason")
REASON_MAX_CHARS = 500


@dataclass(frozen=True)
class OperationRequest:
    """A request for a rescale operation: one shape for scale-out, scale-in and migration.

    ``{"changes": {"<fragment>": {"added_parallel_units": [...], "removed_parallel_units": [...]}},
       "strategy": "live" | "stop_start", "granularity": {...}, "dry_run": false, "weighted": false,
       "reason": "why, for the audit trail"}``
    """

    changes: dict[str, FragmentChange]
    strategy: Strategy = Strategy.LIVE
    granularity: Granularity = field(default_factory=Granularity)
    dry_run: bool = False
    weighted: bool = False  # balance measured bytes, not just vnode counts
    reason: str = ""  # the operator's words, kept in the audit trail

    def to_json(self) -> dict[str, Any]:
        return {
            "changes": {name: c.to_json() for name, c in self.changes.items()},
            "strategy": self.strategy,
            "granularity": self.granularity.to_json(),
            "dry_run": self.dry_run,
            "weighted": self.weighted,
            "reason": self.reason,
        }

    @classmethod
    def parse(cls, data: Any) -> OperationRequest:
        """Parse a request body, refusing anything malformed with the exact reason. The one
        parser of requests: the API, the CLI and the stored operations all go through it."""
        if not isinstance(data, dict):
            raise errors.MalformedRequest("the request body must be a JSON object")
        unknown = set(data) - set(REQUEST_FIELDS)
        if unknown:
            raise errors.MalformedRequest(
                f"unknown field(s) {sorted(unknown)}; allowed: {sorted(REQUEST_FIELDS)}"
            )
        changes = data.get("changes")
        if not isinstance(changes, dict) or not changes:
            raise errors.MalformedRequest(
                "'changes' must be a non-empty object: {fragment: {added_parallel_units: [...], "
                "removed_parallel_units: [...]}}"
            )
        for name in changes:
            if not isinstance(name, str) or not FRAGMENT_NAME_PATTERN.fullmatch(name):
                raise errors.MalformedRequest(
                    f"changes: {str(name)[:80]!r} is not a fragment name (1 to {FRAGMENT_NAME_MAX_CHARS} "
                    "ASCII letters, digits, '_', '-' or '.')"
                )
        parsed = {name: FragmentChange.parse(name, body) for name, body in changes.items()}
        strategy = data.get("strategy", Strategy.LIVE)
        if not isinstance(strategy, str) or strategy not in set(Strategy):
            raise errors.MalformedRequest(
                f"'strategy' must be one of {[s.value for s in Strategy]}, not {strategy!r}"
            )
        for flag in ("dry_run", "weighted"):
            if not isinstance(data.get(flag, False), bool):
                raise errors.MalformedRequest(f"'{flag}' must be true or false")
        reason = data.get("reason", "")
        if not isinstance(reason, str) or len(reason) > REASON_MAX_CHARS:
            raise errors.MalformedRequest(
                f"'reason' must be a text of at most {REASON_MAX_CHARS} characters"
            )
        if any((ord(c) < 32 and c not in "\t\n") or "\ud800" <= c <= "\udfff" for c in reason):
            raise errors.MalformedRequest(
                "'reason' may not hold control characters or lone surrogates"
            )
        return cls(
            changes=parsed,
            strategy=Strategy(strategy),
            granularity=Granularity.parse(data.get("granularity")),
            dry_run=data.get("dry_run", False),
            weighted=data.get("weighted", False),
            reason=reason.strip(),
        )
