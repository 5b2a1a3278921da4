"""The rescale protocol's vocabulary: one name and one type per concept, for every layer.

Everything that crosses a layer boundary (API ↔ control plane ↔ orchestrator ↔ runner) is defined
here once: the phases and statuses as ``StrEnum`` s (so a typo is an ``AttributeError``, not a
silently wrong comparison), and the messages as frozen records with ``to_json``/``from_json`` (so
a renamed key breaks at the one place that builds it, not in a consumer three layers away). The
data plane, the orchestrator, the control plane's ingestion, the API and the events all import
from here; Django models take their ``choices`` from these enums. No Django import (DESIGN §4).

Names follow DESIGN §1 and ``docs/glossary.md``: a step's number is ``step``; a PU end of a move
is ``source_pu``/``target_pu``; the PU sets are ``parallel_units*``; the vnode → PU list is
``mapping``; an operation is named by ``operation_id`` everywhere.
"""

from __future__ import annotations

import enum
import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from workers.rescale import errors


def shallow_fields(record: Any) -> dict[str, Any]:
    """A dataclass's fields as a dict, values as they are. Not ``asdict``: records written at
    every change (progress reports, state files) would pay for a deep copy of every step; the
    caller converts the fields that need it."""
    return {f.name: getattr(record, f.name) for f in fields(record)}


# -- enums ---------------------------------------------------------------------------------------
class StepPhase(enum.StrEnum):
    """A step's phases, in order (DESIGN §3, docs/rescale.md "Live")."""

    PLANNED = "planned"  # control plane only: in the plan, not yet issued to the runner
    PENDING = "pending"  # issued, not started
    COLLECTING = "collecting"  # held from collect_epoch; the source's copy sealed and exporting
    EXPORTED = "exported"  # every vnode's export written and verified
    ACQUIRING = "acquiring"  # the target ingests and replays at acquire_epoch
    ACQUIRED = "acquired"  # that epoch has committed
    DROPPING = "dropping"  # the source deletes the vnodes' ranges at drop_epoch
    DONE = "done"  # that epoch has committed
    CANCELLED = "cancelled"  # never started: the operation was cancelled first


# a step whose vnodes are in transit (it keeps the operation from completing)
STEP_IN_FLIGHT = frozenset(
    {
        StepPhase.COLLECTING,
        StepPhase.EXPORTED,
        StepPhase.ACQUIRING,
        StepPhase.ACQUIRED,
        StepPhase.DROPPING,
    }
)
# a step holds its vnodes (sealed at the source, their records in hold queues) from its
# collect epoch up to its acquire epoch: these are the steps counted against steps_in_flight.
# A pending step waits in the runner for a slot; at the barrier that acquires a step (it is then
# acquiring: its vnodes route to the target) the runner may collect the next one
STEP_HOLDING = frozenset({StepPhase.COLLECTING, StepPhase.EXPORTED})
STEP_ENDED = frozenset({StepPhase.DONE, StepPhase.CANCELLED})


class Routing(enum.StrEnum):
    """Where the records of a vnode go while a step moves it (docs/rescale.md, "Live")."""

    SOURCE = "source"
    HOLD_QUEUE = "hold_queue"
    TARGET = "target"


ROUTING_BY_PHASE: dict[StepPhase, Routing] = {
    StepPhase.PLANNED: Routing.SOURCE,
    StepPhase.PENDING: Routing.SOURCE,
    StepPhase.COLLECTING: Routing.HOLD_QUEUE,
    StepPhase.EXPORTED: Routing.HOLD_QUEUE,
    StepPhase.ACQUIRING: Routing.TARGET,
    StepPhase.ACQUIRED: Routing.TARGET,
    StepPhase.DROPPING: Routing.TARGET,
    StepPhase.DONE: Routing.TARGET,
    StepPhase.CANCELLED: Routing.SOURCE,
}


class OperationStatus(enum.StrEnum):
    """An operation's status. The control plane uses all of them; the runner only knows an
    operation once it has begun (running) and until it ends (a FINAL status)."""

    PENDING = "pending"  # accepted, waiting for an orchestrator
    RUNNING = "running"
    CANCELLING = "cancelling"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    FAILED = "failed"


FINAL = frozenset({OperationStatus.COMPLETED, OperationStatus.CANCELLED, OperationStatus.FAILED})


class TickStatus(enum.StrEnum):
    """What one orchestrator tick found: an operation status, or that the runner has not
    reported yet (starting), or that the orchestrator gave up waiting (timeout)."""

    STARTING = "starting"
    RUNNING = "running"
    CANCELLING = "cancelling"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    FAILED = "failed"
    TIMEOUT = "timeout"


class Strategy(enum.StrEnum):
    LIVE = "live"  # epoch-aligned ICADD, step by step
    STOP_START = "stop_start"  # one barrier: snapshot, clear, restore


class StopStartPhase(enum.StrEnum):
    """A stop-start operation's durable phases (a live operation stays ``begun``)."""

    BEGUN = "begun"
    SNAPSHOTTED = "snapshotted"
    CLEARED = "cleared"  # no longer entered (the restore clears): an older ledger may hold it
    RESTORED = "restored"


class CommandKind(enum.StrEnum):
    """The runner's commands. Every one is idempotent (docs/rescale.md, "Crash safety")."""

    STOP = "stop"
    OPERATION_BEGIN = "operation.begin"
    OPERATION_STEP = "operation.step"
    OPERATION_CANCEL = "operation.cancel"
    OPERATION_FINISH = "operation.finish"
    # payload {"worker": name}: the worker's PUs hold no vnode any more (drained); the runner
    # drops them and asks Spark to kill the worker's executor (docs/elastic-workers.md)
    WORKER_DECOMMISSION = "worker.decommission"
    # payload {"requested_by": name}: snapshot every fragment's state at the next barrier where
    # none is being written and no vnode is in transit (docs/recovery.md)
    SNAPSHOT = "snapshot"


OPERATION_COMMANDS = frozenset(
    {
        CommandKind.OPERATION_BEGIN,
        CommandKind.OPERATION_STEP,
        CommandKind.OPERATION_CANCEL,
        CommandKind.OPERATION_FINISH,
    }
)


class ChangeKind(enum.StrEnum):
    SCALE_OUT = "scale_out"  # only added
    SCALE_IN = "scale_in"  # only removed
    MIGRATE = "migrate"  # both


class Event(enum.StrEnum):
    """Every websocket event type (``rescaler.events.publish``): the one list. Each has a
    handler on every consumer (``dashboard.consumers``), so no event can close a socket."""

    EPOCH_COMMITTED = "epoch.committed"
    OPERATION_REQUESTED = "operation.requested"
    OPERATION_PROGRESS = "operation.progress"
    OPERATION_CANCELLING = "operation.cancelling"
    OPERATION_FINISHED = "operation.finished"
    # elastic workers (docs/elastic-workers.md); the payload is the worker's summary
    WORKER_JOINED = "worker.joined"
    WORKER_LOST = "worker.lost"
    WORKER_REMOVED = "worker.removed"
    WORKER_STATUS = "worker.status"  # any other change: cordoned, draining, bootstrapped...


class AuditObject(enum.StrEnum):
    """The ``object_type`` of audit events; a step's ``object_id`` is ``<operation_id>/<step>``."""

    OPERATION = "operation"
    STEP = "step"
    WORKER = "worker"  # object_id: the worker's name


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
GRANULARITY_OPTIONAL = frozenset({"max_keys_per_step", "max_bytes_per_step", "bytes_per_second"})
GRANULARITY_TYPES: dict[str, type | tuple[type, ...]] = {
    "vnodes_per_step": int,
    "max_keys_per_step": int,
    "max_bytes_per_step": int,
    "steps_in_flight": int,
    "bytes_per_second": (int, float),
}
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
    whole move is *all at once*: fastest, with a spike. Keys and bytes caps cut a step earlier.
    """

    vnodes_per_step: int = 1
    max_keys_per_step: int | None = None
    max_bytes_per_step: int | None = None
    steps_in_flight: int = 1
    bytes_per_second: float | None = None

    def __post_init__(self) -> None:
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
        unknown = set(data) - set(GRANULARITY_TYPES)
        if unknown:
            raise errors.MalformedRequest(
                f"unknown granularity field(s) {sorted(unknown)}; allowed: {sorted(GRANULARITY_TYPES)}"
            )
        for name, value in data.items():
            if value is None and name in GRANULARITY_OPTIONAL:
                continue
            if isinstance(value, bool) or not isinstance(value, GRANULARITY_TYPES[name]):
                raise errors.MalformedRequest(f"granularity.{name} must be a number, not {value!r}")
        return cls(**data)


PRESETS = {
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


# -- the plan ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Move:
    """One vnode leaving one PU for another."""

    fragment: str
    vnode: int
    source_pu: int
    target_pu: int
    keys: int
    bytes: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Move:
        return cls(**data)


@dataclass(frozen=True)
class StepSpec:
    """One unit of a live migration, as planned: vnodes going from one PU to another."""

    step: int  # its number in the operation, from 1
    fragment: str
    source_pu: int
    target_pu: int
    vnodes: tuple[int, ...]
    keys: int
    bytes: int

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "vnodes": list(self.vnodes)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StepSpec:
        return cls(
            step=data["step"],
            fragment=data["fragment"],
            source_pu=data["source_pu"],
            target_pu=data["target_pu"],
            vnodes=tuple(data["vnodes"]),
            keys=data["keys"],
            bytes=data["bytes"],
        )


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
        counts = {pu: 0 for pu in parallel_units}
        size = {pu: 0 for pu in parallel_units}
        for vnode, pu in enumerate(mapping):
            counts[pu] = counts.get(pu, 0) + 1
            size[pu] = size.get(pu, 0) + self.load.get(vnode, (0, 0))[1]
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


@dataclass(frozen=True)
class Plan:
    """What an operation will do. ``to_json`` is the dry run's answer; a stored operation keeps
    only ``stored_json`` (fragments and estimate) beside its own columns and step rows, and
    ``from_stored`` puts the record back together, so nothing is stored twice."""

    request: OperationRequest
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

    def stored_json(self) -> dict[str, Any]:
        """The part of the plan no column or step row of the operation holds."""
        return {
            "fragments": {n: p.to_json() for n, p in self.fragments.items()},
            "estimated_duration_s": round(self.estimate_s, 3),
        }

    @classmethod
    def from_stored(
        cls, request: OperationRequest, stored: dict[str, Any], steps: list[StepSpec]
    ) -> Plan:
        return cls(
            request=request,
            fragments={n: FragmentPlan.from_json(f) for n, f in stored["fragments"].items()},
            steps=tuple(steps),
            estimate_s=stored["estimated_duration_s"],
        )


# -- runner commands' payloads -------------------------------------------------------------------
@dataclass(frozen=True)
class FragmentBegin:
    """What the runner needs of one fragment to begin an operation."""

    added_parallel_units: tuple[int, ...]
    removed_parallel_units: tuple[int, ...]
    parallel_units_after: tuple[int, ...]
    mapping_after: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {k: list(v) for k, v in asdict(self).items()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FragmentBegin:
        return cls(
            added_parallel_units=tuple(data.get("added_parallel_units", ())),
            removed_parallel_units=tuple(data.get("removed_parallel_units", ())),
            parallel_units_after=tuple(data.get("parallel_units_after", ())),
            mapping_after=tuple(data.get("mapping_after", ())),
        )


@dataclass(frozen=True)
class BeginPayload:
    """``operation.begin``: the operation, its strategy, per fragment its change, and its
    granularity: the runner starts a pending step only while fewer than ``steps_in_flight`` of
    the operation's steps hold their vnodes (None, from an older control plane: no bound)."""

    operation_id: str
    strategy: Strategy
    fragments: dict[str, FragmentBegin]
    granularity: Granularity | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "operation_id": self.operation_id,
            "strategy": self.strategy,
            "fragments": {n: f.to_json() for n, f in self.fragments.items()},
            "granularity": None if self.granularity is None else self.granularity.to_json(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BeginPayload:
        granularity = data.get("granularity")
        return cls(
            operation_id=str(data["operation_id"]),
            strategy=Strategy(data.get("strategy", Strategy.LIVE)),
            fragments={n: FragmentBegin.from_json(f) for n, f in data["fragments"].items()},
            granularity=None if granularity is None else Granularity.parse(granularity),
        )

    @classmethod
    def of_plan(cls, operation_id: str, plan: Plan) -> BeginPayload:
        return cls(
            operation_id=operation_id,
            strategy=plan.request.strategy,
            granularity=plan.request.granularity,
            fragments={
                name: FragmentBegin(
                    added_parallel_units=plan.request.changes[name].added_parallel_units,
                    removed_parallel_units=plan.request.changes[name].removed_parallel_units,
                    parallel_units_after=fp.parallel_units_after,
                    mapping_after=fp.mapping_after,
                )
                for name, fp in plan.fragments.items()
            },
        )


@dataclass(frozen=True)
class StepPayload:
    """``operation.step``: issue one planned step."""

    operation_id: str
    step: StepSpec

    def to_json(self) -> dict[str, Any]:
        return {"operation_id": self.operation_id, "step": self.step.to_json()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StepPayload:
        return cls(str(data["operation_id"]), StepSpec.from_json(data["step"]))


@dataclass(frozen=True)
class OperationRef:
    """``operation.cancel`` and ``operation.finish``: only the operation."""

    operation_id: str

    def to_json(self) -> dict[str, Any]:
        return {"operation_id": self.operation_id}


# -- progress, from the runner -------------------------------------------------------------------
@dataclass(frozen=True)
class StepProgress:
    """One step as the runner reports it."""

    step: int
    fragment: str
    source_pu: int
    target_pu: int
    vnodes: tuple[int, ...]
    phase: StepPhase
    collect_epoch: int | None = None
    acquire_epoch: int | None = None
    drop_epoch: int | None = None
    keys_moved: int = 0
    bytes_moved: int = 0
    hold_queue: int = 0
    per_vnode: dict[str, dict[str, Any]] = field(default_factory=dict)  # vnode -> figures
    timings: dict[str, float] = field(default_factory=dict)  # phase -> unix time entered
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        # field by field, not ``asdict``: a progress report carries every step, at every change
        return {
            **shallow_fields(self),
            "vnodes": list(self.vnodes),
            "per_vnode": {v: dict(figures) for v, figures in self.per_vnode.items()},
            "timings": dict(self.timings),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StepProgress:
        return cls(**{**data, "vnodes": tuple(data["vnodes"]), "phase": StepPhase(data["phase"])})


@dataclass(frozen=True)
class OperationProgress:
    """An operation as the runner reports it: its whole state at one barrier. A report with a
    FINAL status is the completion message."""

    operation_id: str
    strategy: Strategy
    fragments: tuple[str, ...]
    status: OperationStatus
    phase: StopStartPhase
    cancel_requested: bool = False
    begun_epoch: int | None = None
    finished_epoch: int | None = None
    steps: tuple[StepProgress, ...] = ()
    vnodes_moved: int = 0
    keys_moved: int = 0
    bytes_moved: int = 0
    error: str = ""
    # a stop-start's snapshot, clear and restore ran as Spark tasks: the executors they ran on
    executors: tuple[str, ...] = ()

    @property
    def final(self) -> bool:
        return self.status in FINAL

    def to_json(self) -> dict[str, Any]:
        return {
            **shallow_fields(self),
            "fragments": list(self.fragments),
            "executors": list(self.executors),
            "steps": [s.to_json() for s in self.steps],
        }

    def summary_json(self) -> dict[str, Any]:
        """The report without its steps (what the cluster-wide event carries)."""
        return {k: v for k, v in self.to_json().items() if k != "steps"}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> OperationProgress:
        return cls(
            **{
                **data,
                "strategy": Strategy(data["strategy"]),
                "fragments": tuple(data.get("fragments", ())),
                "status": OperationStatus(data["status"]),
                "phase": StopStartPhase(data.get("phase", StopStartPhase.BEGUN)),
                "steps": tuple(StepProgress.from_json(s) for s in data.get("steps", ())),
                "executors": tuple(data.get("executors", ())),
            }
        )


@dataclass(frozen=True)
class OperationSummary:
    """What an audit event's before/after and an operation event say of an operation."""

    operation_id: str
    status: OperationStatus
    strategy: Strategy
    fragments: tuple[str, ...]
    vnodes_moved: int
    keys_moved: int

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "fragments": list(self.fragments)}


@dataclass(frozen=True)
class Tick:
    """One orchestrator tick: what it found and the runner's last progress (None before the
    first report)."""

    status: TickStatus
    progress: OperationProgress | None = None
    error: str = ""

    @property
    def ended(self) -> bool:
        return self.status in (
            TickStatus.COMPLETED,
            TickStatus.CANCELLED,
            TickStatus.FAILED,
            TickStatus.TIMEOUT,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "progress": None if self.progress is None else self.progress.to_json(),
            "error": self.error,
        }
