"""What an operation's summaries read of every step, counted once: in one aggregate query, or
from the step rows when they are loaded anyway (the operation document prefetches them).

The live delta of every barrier (``dashboard.live``) asks for ``moved``, ``waiting`` and the
steps done: counted in Postgres they cost one query whatever the number of steps, where
reading the rows back cost a 16,384-step operation a quarter of each barrier.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, F, FloatField, Func, IntegerField, Min, Q, Sum, Value
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce, Greatest

from rescaler.operations.models import RescaleOperation, RescaleStep
from workers.rescale.protocol import STEP_ENDED, StepPhase


class JsonArrayLength(Func):
    """The length of a JSON array column (a step's ``vnodes``)."""

    function = "jsonb_array_length"
    output_field = IntegerField()

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return super().as_sql(compiler, connection, function="json_array_length", **extra)


@dataclass(frozen=True)
class StepCounts:
    """An operation's steps, counted."""

    total: int  # planned
    known: int  # sent to the runner (not planned any more)
    done: int
    moving: int  # known and not ended
    exporting: int  # collecting: their state is being exported
    exporting_vnodes: int
    exporting_since: float | None  # when the earliest of them started collecting (unix s)
    keys_surplus: int  # moved beyond the plan, step by step (arrivals during the move)
    bytes_surplus: int
    # as planned: the steps partition the plan's moves (``planner.split_steps``), so these are
    # the plan's own totals wherever the operation has steps
    keys_planned: int = 0
    bytes_planned: int = 0
    vnodes_planned: int = 0

    @classmethod
    def of_rows(cls, rows: Iterable[RescaleStep]) -> StepCounts:
        """Counted from loaded rows (the same figures as ``step_counts``' query)."""
        total = known = done = moving = exporting = vnodes = keys = nbytes = 0
        keys_planned = bytes_planned = vnodes_planned = 0
        since: float | None = None
        for s in rows:
            total += 1
            keys_planned += s.keys
            bytes_planned += s.bytes
            vnodes_planned += len(s.vnodes)
            keys += max(s.keys_moved - s.keys, 0)
            nbytes += max(s.bytes_moved - s.bytes, 0)
            if s.phase == StepPhase.PLANNED:
                continue
            known += 1
            done += s.phase == StepPhase.DONE
            moving += s.phase not in STEP_ENDED
            if s.phase == StepPhase.COLLECTING:
                exporting += 1
                vnodes += len(s.vnodes)
                at = (s.timings or {}).get(StepPhase.COLLECTING)
                if at is not None:
                    since = float(at) if since is None else min(since, float(at))
        return cls(
            total, known, done, moving, exporting, vnodes, since, keys, nbytes,
            keys_planned, bytes_planned, vnodes_planned,
        )  # fmt: skip


def _prefetched_steps(op: RescaleOperation) -> list[RescaleStep] | None:
    cache = getattr(op, "_prefetched_objects_cache", {})
    return list(cache["steps"]) if "steps" in cache else None


def step_counts(op: RescaleOperation) -> StepCounts:
    """The operation's steps counted: from its prefetched rows, else in one query."""
    rows = _prefetched_steps(op)
    if rows is not None:
        return StepCounts.of_rows(rows)
    known = ~Q(phase=StepPhase.PLANNED)
    collecting = Q(phase=StepPhase.COLLECTING)
    zero = Value(0)
    figures = RescaleStep.objects.filter(operation_id=op.pk).aggregate(
        total=Count("pk"),
        known=Count("pk", filter=known),
        done=Count("pk", filter=Q(phase=StepPhase.DONE)),
        moving=Count("pk", filter=known & ~Q(phase__in=list(STEP_ENDED))),
        exporting=Count("pk", filter=collecting),
        exporting_vnodes=Coalesce(Sum(JsonArrayLength("vnodes"), filter=collecting), zero),
        exporting_since=Min(
            Cast(KT(f"timings__{StepPhase.COLLECTING}"), FloatField()), filter=collecting
        ),
        keys_surplus=Coalesce(Sum(Greatest(F("keys_moved") - F("keys"), zero)), zero),
        bytes_surplus=Coalesce(Sum(Greatest(F("bytes_moved") - F("bytes"), zero)), zero),
        keys_planned=Coalesce(Sum("keys"), zero),
        bytes_planned=Coalesce(Sum("bytes"), zero),
        vnodes_planned=Coalesce(Sum(JsonArrayLength("vnodes")), zero),
    )
    return StepCounts(**figures)


def steps_of(op: RescaleOperation, numbers: Iterable[int]) -> list[RescaleStep]:
    """The rows of these steps: from the prefetched rows, else read (a few)."""
    wanted = set(numbers)
    rows = _prefetched_steps(op)
    if rows is not None:
        return [s for s in rows if s.step in wanted]
    return list(RescaleStep.objects.filter(operation_id=op.pk, step__in=wanted).order_by("step"))
