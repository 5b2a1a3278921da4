"""Runner commands: their kinds and payloads."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass
from typing import Any

from workers.rescale.protocol.moves import StepSpec
from workers.rescale.protocol.operation_request import Granularity
from workers.rescale.protocol.phases import Strategy
from workers.rescale.protocol.plan import Plan


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
            granularity=plan.granularity,
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
