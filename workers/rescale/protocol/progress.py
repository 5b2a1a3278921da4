"""Progress, from the runner: each step and the operation at one barrier, and the summary
an event or audit record carries."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any

from workers.hashing import KeyRange
from workers.rescale.protocol.phases import (
    FINAL,
    OperationStatus,
    StepPhase,
    StopStartPhase,
    Strategy,
    TickStatus,
)
from workers.rescale.protocol.records import shallow_fields


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
    hold_queue: int = 0  # records held
    hold_bytes: int = 0  # their bytes, what the hold queue bounds count
    per_vnode: dict[str, dict[str, Any]] = field(default_factory=dict)  # vnode -> figures
    timings: dict[str, float] = field(default_factory=dict)  # phase -> unix time entered
    error: str = ""
    key_range: KeyRange | None = None  # the step moves this key range of its one vnode

    def to_json(self) -> dict[str, Any]:
        # field by field, not ``asdict``: a progress report carries every step, at every change
        return {
            **shallow_fields(self),
            "vnodes": list(self.vnodes),
            "per_vnode": {v: dict(figures) for v, figures in self.per_vnode.items()},
            "timings": dict(self.timings),
            "key_range": None if self.key_range is None else self.key_range.to_json(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StepProgress:
        key_range = data.get("key_range")
        return cls(
            **{
                **data,
                "vnodes": tuple(data["vnodes"]),
                "phase": StepPhase(data["phase"]),
                "key_range": None if key_range is None else KeyRange.from_json(key_range),
            }
        )


@dataclass(frozen=True)
class OperationProgress:
    """An operation as the runner reports it at one barrier. A report with a FINAL status is
    the completion message.

    A report carries the operation's own figures and either every step the runner knows (a
    *full* report: ``base_version`` None) or only the steps that changed since report
    ``base_version`` of the same ``session``, the last one the control plane acknowledged (a
    *delta*). ``session`` names the runner's ledger since its start and ``version`` numbers its
    reports from 1, so a restarted runner (a new session) and a lost report (a gap) are seen
    (``ReportFit``); a report without them (an older runner) is a full one.
    """

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
    # steps whose hold queue reached its bound: the stream waits at the barrier for their exports
    hold_queue_full: tuple[int, ...] = ()
    session: str = ""
    version: int = 0
    base_version: int | None = None  # a delta on that report; None: a full report

    @property
    def final(self) -> bool:
        return self.status in FINAL

    @property
    def delta(self) -> bool:
        return self.base_version is not None

    def fit(self, session: str, version: int) -> ReportFit:
        """How this report fits a view holding report ``version`` of ``session`` (version 0:
        none, or one from an older runner): a full report applies unless it is an older one of
        the same session; a delta only on a view that holds its base or a later report of its
        session (what changed since the base includes what changed since then)."""
        same = bool(self.session) and self.session == session
        if same and self.version <= version:
            return ReportFit.STALE
        if self.base_version is None:
            return ReportFit.APPLY
        if same and self.base_version <= version:
            return ReportFit.APPLY
        return ReportFit.GAP

    def to_json(self) -> dict[str, Any]:
        return {**self.summary_json(), "steps": [s.to_json() for s in self.steps]}

    def summary_json(self) -> dict[str, Any]:
        """The report without its steps (what the cluster-wide event carries); its steps are
        never turned into JSON (thousands of them at every barrier of a large operation)."""
        return {
            **{k: v for k, v in shallow_fields(self).items() if k != "steps"},
            "fragments": list(self.fragments),
            "executors": list(self.executors),
            "hold_queue_full": list(self.hold_queue_full),
        }

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
                "hold_queue_full": tuple(data.get("hold_queue_full", ())),
            }
        )


class ReportFit(enum.StrEnum):
    """What a view of an operation's progress does with a report (``OperationProgress.fit``)."""

    APPLY = "apply"
    STALE = "stale"  # the view holds it or a later one already: nothing to do
    GAP = "gap"  # a delta on a report the view does not hold: it asks for a full report


@dataclass(frozen=True)
class ProgressAck:
    """The control plane's answer to a progress report: the report of the operation it holds
    now (``session``, ``version``), and whether it wants a full report (it found a gap)."""

    operation_id: str
    session: str
    version: int
    full_wanted: bool = False

    def acknowledges(self, report: OperationProgress) -> bool:
        """Whether the control plane holds exactly ``report`` now: its next delta may build on
        it."""
        return (
            not self.full_wanted
            and self.session == report.session
            and self.version == report.version
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProgressAck:
        return cls(**data)


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
