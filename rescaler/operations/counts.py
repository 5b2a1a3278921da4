"""What an operation's summaries read of every step, counted once: in one grouped query
(``step_groups``), or from the step rows when they are loaded anyway (the operation document
prefetches them).

The live delta of every barrier (``dashboard.live``) asks for ``moved``, ``waiting`` and the
steps done: counted in Postgres they cost one query whatever the number of steps, where
reading the rows back cost a 16,384-step operation a quarter of each barrier.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db.models import (
    Case,
    Count,
    F,
    FloatField,
    Func,
    IntegerField,
    Min,
    Q,
    QuerySet,
    Sum,
    Value,
    When,
)
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce, Greatest

from rescaler.operations.models import RescaleOperation, RescaleStep
from workers.rescale.protocol import STEP_ENDED, StepPhase


def step_done(phase: str) -> bool:
    """Whether a step in ``phase`` counts among the operation's steps done: once it moved. A
    cancelled step ended without moving, and a step on its way has not arrived. The one rule of
    every "steps done": ``StepCounts`` (the page, the live delta) and ``with_step_counts`` (the
    API's ``steps_done``, counted in SQL by the phases this answers for)."""
    return phase == StepPhase.DONE


_DONE_PHASES = tuple(phase.value for phase in StepPhase if step_done(phase))


def with_step_counts(operations: QuerySet[RescaleOperation]) -> QuerySet[RescaleOperation]:
    """The operations with ``steps_total`` and ``steps_done`` (``step_done``) counted in SQL:
    one query for a page of operations, as the API's list and document read them."""
    return operations.annotate(
        steps_total=Count("steps"),
        steps_done=Count("steps", filter=Q(steps__phase__in=_DONE_PHASES)),
    )


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
        """Counted from loaded rows (the same figures as ``step_counts``' query): each row a
        group of one step."""
        return cls.of_groups(StepGroup.of_row(s) for s in rows)

    @classmethod
    def of_groups(cls, groups: Iterable[StepGroup]) -> StepCounts:
        """Summed from ``step_groups`` (the same figures as ``of_rows``)."""
        total = known = done = moving = exporting = vnodes = keys = nbytes = 0
        keys_planned = bytes_planned = vnodes_planned = 0
        since: float | None = None
        for g in groups:
            total += g.steps
            keys_planned += g.keys
            bytes_planned += g.bytes
            vnodes_planned += g.vnodes
            keys += g.keys_surplus
            nbytes += g.bytes_surplus
            if g.phase == StepPhase.PLANNED:
                continue
            known += g.steps
            done += g.steps if step_done(g.phase) else 0
            moving += g.steps if g.phase not in STEP_ENDED else 0
            if g.phase == StepPhase.COLLECTING:
                exporting += g.steps
                vnodes += g.vnodes
                if g.exporting_since is not None:
                    at = float(g.exporting_since)
                    since = at if since is None else min(since, at)
        return cls(
            total, known, done, moving, exporting, vnodes, since, keys, nbytes,
            keys_planned, bytes_planned, vnodes_planned,
        )  # fmt: skip


def _prefetched_steps(op: RescaleOperation) -> list[RescaleStep] | None:
    cache = getattr(op, "_prefetched_objects_cache", {})
    return list(cache["steps"]) if "steps" in cache else None


@dataclass(frozen=True)
class StepGroup:
    """The steps of one fragment in one phase, counted together: out of one of the PUs asked
    about and into one (``step_groups``' ``pus``; None: out of, or into, any other)."""

    fragment: str
    phase: str
    source_pu: int | None
    target_pu: int | None
    steps: int
    vnodes: int
    keys: int  # planned
    bytes: int
    keys_surplus: int  # moved beyond the plan, step by step
    bytes_surplus: int
    exporting_since: float | None  # a collecting group's earliest start (unix s)

    @classmethod
    def of_row(cls, s: RescaleStep) -> StepGroup:
        """One step's row as a group of one (what ``step_groups`` sums in Postgres)."""
        collecting = s.phase == StepPhase.COLLECTING
        since = (s.timings or {}).get(StepPhase.COLLECTING) if collecting else None
        return cls(
            s.fragment, s.phase, None, None, 1, len(s.spec().completes_vnodes), s.keys, s.bytes,
            max(s.keys_moved - s.keys, 0), max(s.bytes_moved - s.bytes, 0),
            None if since is None else float(since),
        )  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> StepGroup:
        """A group as ``to_json`` wrote it; ValueError for anything else."""
        if not isinstance(data, dict) or set(data) != _GROUP_FIELDS:
            raise ValueError(f"not a step group: {data!r}")
        since = data["exporting_since"]
        if not (
            all(isinstance(data[name], str) for name in ("fragment", "phase"))
            and all(_is_int(data[name]) for name in _GROUP_COUNTS)
            and all(
                data[name] is None or _is_int(data[name]) for name in ("source_pu", "target_pu")
            )
            and (since is None or _is_int(since) or isinstance(since, float))
        ):
            raise ValueError(f"not a step group: {data!r}")
        return cls(**data)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_GROUP_FIELDS = {f.name for f in dataclasses.fields(StepGroup)}
_GROUP_COUNTS = ("steps", "vnodes", "keys", "bytes", "keys_surplus", "bytes_surplus")


#: the vnodes a step's row completes (``StepSpec.completes_vnodes``): its vnodes, or a cut
#: vnode's one with its last key range, so a vnode cut into ranges counts once
_VNODES_COMPLETED = Case(
    When(key_range_count__isnull=True, then=JsonArrayLength("vnodes")),
    When(key_range_index=F("key_range_count") - 1, then=Value(1)),
    default=Value(0),
    output_field=IntegerField(),
)


def step_groups(op: RescaleOperation, *, pus: Iterable[int] = ()) -> list[StepGroup]:
    """Every step of ``op`` counted in one scan, grouped by fragment and phase, and by source
    and target PU where those are among ``pus`` (so the groups are a few per phase, whatever
    the number of steps). ``StepCounts.of_groups`` sums them into the operation's figures; the
    operation page's live delta reads the PUs it touches from them too."""
    named = sorted(set(pus))
    nobody = Value(None, output_field=IntegerField())
    ends = {
        end: Case(When(**{f"{end}__in": named}, then=F(end)), default=nobody) if named else nobody
        for end in ("source_pu", "target_pu")
    }
    collecting = Q(phase=StepPhase.COLLECTING)
    zero = Value(0)
    rows = (
        RescaleStep.objects.filter(operation_id=op.pk)
        .values_list("fragment", "phase")
        .annotate(
            source=ends["source_pu"],
            target=ends["target_pu"],
            steps=Count("pk"),
            vnodes=Coalesce(Sum(_VNODES_COMPLETED), zero),
            planned_keys=Coalesce(Sum("keys"), zero),
            planned_bytes=Coalesce(Sum("bytes"), zero),
            keys_surplus=Coalesce(Sum(Greatest(F("keys_moved") - F("keys"), zero)), zero),
            bytes_surplus=Coalesce(Sum(Greatest(F("bytes_moved") - F("bytes"), zero)), zero),
            exporting_since=Min(
                Cast(KT(f"timings__{StepPhase.COLLECTING}"), FloatField()), filter=collecting
            ),
        )
        .order_by()
    )
    return [StepGroup(*row) for row in rows]


def step_counts(op: RescaleOperation) -> StepCounts:
    """The operation's steps counted: from its prefetched rows, else in one query."""
    rows = _prefetched_steps(op)
    if rows is not None:
        return StepCounts.of_rows(rows)
    return StepCounts.of_groups(step_groups(op))


def steps_of(op: RescaleOperation, numbers: Iterable[int]) -> list[RescaleStep]:
    """The rows of these steps: from the prefetched rows, else read (a few)."""
    wanted = set(numbers)
    rows = _prefetched_steps(op)
    if rows is not None:
        return [s for s in rows if s.step in wanted]
    return list(RescaleStep.objects.filter(operation_id=op.pk, step__in=wanted).order_by("step"))
