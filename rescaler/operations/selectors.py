"""Read-side queries: the cluster as validation and planning see it, and measured rates."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.contrib.postgres.aggregates import ArrayAgg
from django.db import connection
from django.db.models import Avg, OuterRef, Q, Subquery, Value

from rescaler.cluster.models import EpochMetric, Fragment, ParallelUnit, Pipeline, VnodeMapping
from rescaler.cluster.selectors import runner_alive
from rescaler.operations.counts import StepCounts, step_counts
from rescaler.operations.models import OperationFragment, RescaleOperation
from workers.rescale.planner import DEFAULT_EPOCH_S, DEFAULT_TRANSFER_BYTES_PER_S
from workers.rescale.protocol import OperationStatus, Strategy
from workers.rescale.request import ClusterView, FragmentView


def operation_exists(operation_id: str) -> bool:
    """Whether an operation of that id was ever requested (a page may follow only those)."""
    return RescaleOperation.objects.filter(operation_id=operation_id).exists()


def current_mapping(fragment: Fragment) -> list[int]:
    row = (
        VnodeMapping.objects.filter(fragment=fragment, version=fragment.mapping_version)
        .values_list("mapping", flat=True)
        .first()
    )
    return list(row or [])


def cluster_view(pipeline: Pipeline) -> ClusterView:
    """The cluster as validation and the planner see it, in four queries whatever its size:
    its PUs with their workers, the operations holding fragments, and the fragments with their
    PUs and current mapping. Rows are read as values (1,024 PUs, 32,768 vnodes)."""
    alive = runner_alive(pipeline)
    pus = list(
        ParallelUnit.objects.filter(worker__pipeline=pipeline).values_list(
            "number", "status", "worker__name", "worker__alive", "worker__status",
            "worker__bootstrapped_epoch",
        )
    )  # fmt: skip
    busy = dict(
        OperationFragment.objects.filter(active=True, fragment__pipeline=pipeline).values_list(
            "fragment__name", "operation__operation_id"
        )
    )
    mapping = VnodeMapping.objects.filter(
        fragment=OuterRef("pk"), version=OuterRef("mapping_version")
    ).values("mapping")[:1]
    rows = (
        Fragment.objects.filter(pipeline=pipeline)
        .annotate(
            pu_numbers=ArrayAgg(
                "parallel_units__number",
                order_by="parallel_units__number",
                filter=Q(parallel_units__isnull=False),
                default=Value([]),
            ),
            current_mapping=Subquery(mapping),
        )
        .values_list("name", "kind", "pu_numbers", "current_mapping", "vnode_load")
        .order_by("position", "name")
    )
    fragments = {}
    for name, kind, numbers, current, load in rows:
        stateful = kind == Fragment.Kind.STATEFUL
        fragments[name] = FragmentView(
            name=name,
            stateful=stateful,
            parallel_units=tuple(numbers),
            mapping=tuple(current or ()) if stateful else (),
            vnode_load={int(v): (kb[0], kb[1]) for v, kb in (load or {}).items()},
            vnode_records={int(v): kb[2] for v, kb in (load or {}).items() if len(kb) > 2},
            busy_with=busy.get(name),
        )
    return ClusterView(
        pu_worker={number: worker for number, _, worker, *_ in pus},
        worker_alive={worker: alive and up for _, _, worker, up, *_ in pus},
        fragments=fragments,
        worker_status={worker: status for _, _, worker, _, status, _ in pus},
        worker_bootstrapped_epoch={worker: epoch for *_, worker, _, _, epoch in pus},
        pu_status={number: status for number, status, *_ in pus},
    )


def parallel_units_closed_to_vnodes() -> dict[int, str]:
    """PU -> why no new vnodes may go to it, for each PU that no pipeline's cluster view opens
    (``ClusterView.vnode_refusal``, the rule validation, the planner and drains apply), so the
    pages offer only the others and say why."""
    closed: dict[int, str] = {}
    opened: set[int] = set()
    for pipeline in Pipeline.objects.all():
        view = cluster_view(pipeline)
        for pu in view.pu_worker:
            refusal = view.vnode_refusal(pu)
            if refusal is None:
                opened.add(pu)
            else:
                closed.setdefault(pu, str(refusal))
    return {pu: why for pu, why in closed.items() if pu not in opened}


def measured_rates(pipeline: Pipeline) -> dict[str, float]:
    """Transfer rate of recent live operations and the recent epoch duration, for estimates."""
    epoch_s = (
        EpochMetric.objects.filter(pipeline=pipeline)
        .order_by("-epoch")[:20]
        .aggregate(avg=Avg("duration_s"))["avg"]
    )
    rates: list[float] = []
    for op in RescaleOperation.objects.filter(
        pipeline=pipeline,
        status=OperationStatus.COMPLETED,
        strategy=Strategy.LIVE,
        bytes_moved__gt=0,
    )[:5]:
        duration = op.duration_s
        if duration:
            rates.append(op.bytes_moved / duration)
    return {
        "bytes_per_s": sum(rates) / len(rates) if rates else DEFAULT_TRANSFER_BYTES_PER_S,
        "epoch_s": epoch_s or DEFAULT_EPOCH_S,
    }


@dataclass(frozen=True)
class Moved:
    """One measure of an operation (keys, bytes or vnodes): what the plan counted at the start
    against what moved. Keys that arrive in a vnode while it moves move with it, so ``moved``
    may pass ``planned``; those are ``arrived``, never a share of the plan over 100 %."""

    planned: int
    moved: int
    arrived: int = 0

    @property
    def of_plan(self) -> int:
        """What moved of what was planned (the arrivals left out)."""
        return min(self.moved - self.arrived, self.planned)

    @property
    def share(self) -> float | None:
        """``of_plan`` over ``planned`` (0..1); None when nothing was planned."""
        return self.of_plan / self.planned if self.planned else None


MOVED_MEASURES = ("keys", "bytes", "vnodes")


def plan_fragments_read(op: RescaleOperation, keys: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """Of each fragment of the operation's plan, these keys: from the plan when it is loaded,
    else these alone are read from it, so that who reads the operation without its plan (a
    large plan is megabytes, mostly its moves) does not read it for a few of its values."""
    if "plan" not in op.get_deferred_fields():
        fragments = (op.plan or {}).get("fragments") or {}
        return {name: {key: frag.get(key) for key in keys} for name, frag in fragments.items()}
    values = ", ".join("f.value -> %s::text" for _ in keys)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT f.key, {values} FROM {RescaleOperation._meta.db_table} AS o, "
            "jsonb_each(o.plan -> 'fragments') AS f WHERE o.id = %s",
            [*keys, op.pk],
        )
        rows = cursor.fetchall()
    return {name: dict(zip(keys, map(_json, rest), strict=True)) for name, *rest in rows}


def _json(value: Any) -> Any:
    """A jsonb value as Python (a driver may hand it over as its text)."""
    return json.loads(value) if isinstance(value, str) else value


def planned_moves(op: RescaleOperation, counts: StepCounts | None = None) -> dict[str, int]:
    """The plan's keys, bytes and vnodes to move. Where the operation has steps, their sums
    (``counts``): the steps partition the plan's moves. Else the plan's fragments' totals
    (``plan_fragments_read``: without reading the plan when it was not loaded)."""
    if counts is not None and counts.total:
        return {
            "keys": counts.keys_planned,
            "bytes": counts.bytes_planned,
            "vnodes": counts.vnodes_planned,
        }
    totals = plan_fragments_read(op, tuple(f"{m}_moved" for m in MOVED_MEASURES))
    return {
        m: sum(int(frag[f"{m}_moved"] or 0) for frag in totals.values()) for m in MOVED_MEASURES
    }


def operation_moved(op: RescaleOperation, *, counts: StepCounts | None = None) -> dict[str, Moved]:
    """Keys, bytes and vnodes of the operation, planned against moved. A step that moved more
    than planned carried new arrivals; one that moved less lost some on the way (a key deleted
    meanwhile): only the surplus counts as arrived. ``counts``: the steps counted, when the
    caller has them."""
    counts = counts or step_counts(op)
    planned = planned_moves(op, counts)
    moved = {"keys": op.keys_moved, "bytes": op.bytes_moved, "vnodes": op.vnodes_moved}
    surplus = {"keys": counts.keys_surplus, "bytes": counts.bytes_surplus}
    result = {}
    for measure in MOVED_MEASURES:
        over = max(surplus.get(measure, 0), moved[measure] - planned[measure], 0)
        result[measure] = Moved(planned[measure], moved[measure], min(over, moved[measure]))
    return result
