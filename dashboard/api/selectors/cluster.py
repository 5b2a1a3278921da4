"""The cluster information (``GET cluster``) and the workers (``GET workers``): pipelines, workers
with their PUs, fragments with their mappings and load, in a fixed number of queries."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.contrib.postgres.aggregates import ArrayAgg, JSONBAgg
from django.db.models import JSONField, OuterRef, Q, Subquery, Value
from django.db.models.expressions import RawSQL
from django.db.models.functions import JSONObject
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from dashboard.api.errors import not_found
from rescaler.cluster.models import (
    EpochMetric,
    Fragment,
    ParallelUnit,
    Pipeline,
    VnodeMapping,
    Worker,
)
from rescaler.cluster.selectors import runner_alive
from rescaler.operations.models import OperationFragment


def _age_s(at: Any) -> float | None:
    return round((timezone.now() - at).total_seconds(), 3) if at is not None else None


def _pu_numbers(path: str) -> ArrayAgg:
    """The PU numbers reached through ``path``, sorted; [] when there are none."""
    return ArrayAgg(
        f"{path}__number",
        order_by=f"{path}__number",
        filter=Q(**{f"{path}__isnull": False}),
        default=Value([]),
    )


def _pu_rows() -> JSONBAgg:
    """A worker's PUs with their status and placement figures, by number; [] when none."""
    return JSONBAgg(
        JSONObject(
            number="parallel_units__number",
            status="parallel_units__status",
            last_executor="parallel_units__last_executor",
            last_host="parallel_units__last_host",
            tasks_total="parallel_units__tasks_total",
            tasks_home="parallel_units__tasks_home",
        ),
        filter=Q(parallel_units__isnull=False),
        order_by="parallel_units__number",
        default=Value([], output_field=JSONField()),
    )


class _PuLoad(RawSQL):
    """Per PU of a fragment's current mapping, ``[pu, vnodes, keys, bytes]`` by PU: the vnodes
    the mapping gives it and the keys and bytes of their last per-vnode report
    (``Fragment.vnode_load``), summed by Postgres. A correlated subquery of the fragments'
    query: no row per vnode and no per-vnode load reaches Python (32,768 vnodes were 40 % of
    the request's time). The mapping and the load are each read once (``jsonb_array_elements``,
    ``jsonb_each``), never looked up per vnode (each lookup would read the whole load again).
    It is not grouped by: it is a value of the fragment's row."""

    def __init__(self) -> None:
        fragment, mapping = Fragment._meta.db_table, VnodeMapping._meta.db_table
        super().__init__(
            f"""
            SELECT COALESCE(
                jsonb_agg(jsonb_build_array(s.pu, s.vnodes, s.keys, s.bytes) ORDER BY s.pu),
                '[]'::jsonb)
            FROM (
                SELECT m.pu::bigint AS pu, count(*) AS vnodes,
                       COALESCE(sum((l.kb ->> 0)::numeric), 0)::bigint AS keys,
                       COALESCE(sum((l.kb ->> 1)::numeric), 0)::bigint AS bytes
                FROM "{mapping}" vm
                CROSS JOIN LATERAL jsonb_array_elements_text(vm.mapping) WITH ORDINALITY
                    AS m(pu, i)
                LEFT JOIN LATERAL (
                    SELECT e.key::bigint AS vnode, e.value AS kb
                    FROM jsonb_each(
                        CASE jsonb_typeof("{fragment}"."vnode_load")
                            WHEN 'object' THEN "{fragment}"."vnode_load" ELSE '{{}}'::jsonb END
                    ) e
                ) l ON l.vnode = m.i - 1 AND jsonb_typeof(l.kb) = 'array'
                WHERE vm.fragment_id = "{fragment}"."id"
                  AND vm.version = "{fragment}"."mapping_version"
                  AND jsonb_typeof(vm.mapping) = 'array'
                GROUP BY m.pu::bigint
            ) s
            """,
            (),
            output_field=JSONField(),
        )

    def get_group_by_cols(self) -> list[Any]:
        return []


def locality(tasks_home: int, tasks_total: int) -> dict[str, Any]:
    """The share of PU tasks that ran on their own worker's executor (None before any)."""
    return {
        "tasks_total": tasks_total,
        "tasks_home": tasks_home,
        "share": round(tasks_home / tasks_total, 4) if tasks_total else None,
    }


def _pipelines(pipeline: str | None) -> list[Pipeline]:
    rows = list(
        Pipeline.objects.all() if pipeline is None else Pipeline.objects.filter(name=pipeline)
    )
    if pipeline is not None and not rows:
        raise not_found("unknown_pipeline", f"no pipeline named {pipeline!r} has registered")
    return rows


def _worker_rows(
    pipeline_ids: list[int], alive: dict[int, bool], names: dict[int, str]
) -> tuple[list[dict[str, Any]], list[Any]]:
    """The workers of these pipelines as the API shows them (one query), and the rows' PUs."""
    workers = list(
        Worker.objects.filter(pipeline_id__in=pipeline_ids)
        .annotate(pus=_pu_rows())
        .order_by("name")
    )
    rows = []
    for worker in workers:
        home = sum(pu["tasks_home"] for pu in worker.pus)
        total = sum(pu["tasks_total"] for pu in worker.pus)
        rows.append(
            {
                "name": worker.name,
                "pipeline": names[worker.pipeline_id],
                "alive": worker.alive and alive[worker.pipeline_id],
                "last_seen": worker.last_seen,
                "parallel_units": [pu["number"] for pu in worker.pus],
                "status": worker.status,
                "status_reason": worker.status_reason,
                "executor_id": worker.executor_id,
                "host": worker.host,
                "cores": worker.cores,
                "bootstrapped_epoch": worker.bootstrapped_epoch,
                "joined_at": worker.joined_at,
                "left_at": worker.left_at,
                "drain_operation_id": worker.drain_operation_id or None,
                "notice": (
                    None
                    if worker.notice_deadline is None
                    else {
                        "at": worker.notice_at,
                        "deadline": worker.notice_deadline,
                        "origin": worker.notice_origin,
                    }
                ),
                "locality": locality(home, total),
            }
        )
    return rows, workers


def worker_list(*, pipeline: str | None = None) -> list[dict[str, Any]]:
    """Every worker (of one pipeline), with its status, executor and PUs: two queries."""
    pipelines = _pipelines(pipeline)
    rows, _ = _worker_rows(
        [p.id for p in pipelines],
        {p.id: runner_alive(p) for p in pipelines},
        {p.id: p.name for p in pipelines},
    )
    return rows


def cluster_info(*, pipeline: str | None = None) -> dict[str, Any]:
    """Workers and their PUs, PU → worker, and per fragment its PUs, mapping and load.

    Three queries whatever the size of the cluster (each of the large ones is a few ms): the
    pipelines with their latest epoch, the workers with their PUs, and the fragments with their
    PUs, current mapping and the operation in progress on them.
    """
    latest_epoch = EpochMetric.objects.filter(pipeline=OuterRef("pk")).order_by("-epoch")
    pipelines = list(
        (
            # an archived pipeline (rescaler.operations.pipeline_archive) is left out unless asked by name
            Pipeline.objects.filter(archived_at__isnull=True)
            if pipeline is None
            else Pipeline.objects.filter(name=pipeline)
        )
        .annotate(
            latest_epoch=Subquery(
                latest_epoch.values(
                    json=JSONObject(
                        epoch="epoch", rows="rows", malformed="malformed",
                        duration_s="duration_s", committed_at="committed_at", per_pu="per_pu",
                    )
                )[:1]
            )
        )
    )  # fmt: skip
    if pipeline is not None and not pipelines:
        raise not_found("unknown_pipeline", f"no pipeline named {pipeline!r} has registered")
    ids = [p.id for p in pipelines]
    alive = {p.id: runner_alive(p) for p in pipelines}
    names = {p.id: p.name for p in pipelines}
    latest = {p.id: p.latest_epoch for p in pipelines if p.latest_epoch}

    worker_rows, workers = _worker_rows(ids, alive, names)
    current_mapping = VnodeMapping.objects.filter(
        fragment=OuterRef("pk"), version=OuterRef("mapping_version")
    )
    active_operation = OperationFragment.objects.filter(fragment=OuterRef("pk"), active=True)
    fragments = list(
        Fragment.objects.filter(pipeline_id__in=ids)
        .annotate(
            pu_numbers=_pu_numbers("parallel_units"),
            current_mapping=Subquery(current_mapping.values("mapping")[:1]),
            busy_with=Subquery(active_operation.values("operation__operation_id")[:1]),
            pu_load=_PuLoad(),
        )
        .defer("vnode_load")
        .order_by("pipeline_id", "position")
    )

    fragments_of_pu: dict[int, list[str]] = defaultdict(list)
    for frag in fragments:
        for number in frag.pu_numbers:
            fragments_of_pu[number].append(frag.name)
    parallel_units: dict[str, dict[str, Any]] = {}
    tasks: dict[int, list[int]] = defaultdict(lambda: [0, 0])  # pipeline -> [home, total]
    for worker, row in zip(workers, worker_rows, strict=True):
        for pu in worker.pus:
            parallel_units[str(pu["number"])] = {
                "worker": worker.name,
                "alive": row["alive"] and pu["status"] == ParallelUnit.Status.ACTIVE,
                "fragments": fragments_of_pu.get(pu["number"], []),
                "status": pu["status"],
                "last_executor": pu["last_executor"],
                "last_host": pu["last_host"],
                "locality": locality(pu["tasks_home"], pu["tasks_total"]),
            }
        tasks[worker.pipeline_id][0] += row["locality"]["tasks_home"]
        tasks[worker.pipeline_id][1] += row["locality"]["tasks_total"]
    parallel_units = dict(sorted(parallel_units.items(), key=lambda item: int(item[0])))

    return {
        "pipelines": [
            {**_pipeline_row(p, alive[p.id], latest.get(p.id)), "locality": locality(*tasks[p.id])}
            for p in pipelines
        ],
        "workers": worker_rows,
        "parallel_units": parallel_units,
        "fragments": [
            _fragment_row(f, names[f.pipeline_id], latest.get(f.pipeline_id)) for f in fragments
        ],
    }


def _pipeline_row(p: Pipeline, alive: bool, epoch: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "name": p.name,
        "status": p.status,
        "runner_alive": alive,
        "last_epoch": p.last_epoch,
        "heartbeat_at": p.heartbeat_at,
        "heartbeat_age_s": _age_s(p.heartbeat_at),
        "spark": p.spark or {},
        "last_epoch_metric": None
        if epoch is None
        else {
            # as the schema types them: Postgres writes a whole float in JSON as an integer
            "epoch": int(epoch["epoch"]),
            "rows": int(epoch["rows"]),
            "malformed": int(epoch["malformed"]),
            "duration_s": float(epoch["duration_s"]),
            # JSONObject gives the time as Postgres writes it in JSON (ISO 8601)
            "committed_at": parse_datetime(epoch["committed_at"]),
        },
    }


def _fragment_row(frag: Any, pipeline: str, epoch: dict[str, Any] | None) -> dict[str, Any]:
    """One fragment's row; ``frag`` carries the annotations of ``cluster_info``."""
    pus: list[int] = list(frag.pu_numbers)
    mapping: list[int] | None = frag.current_mapping
    per_pu: dict[int, dict[str, Any]] = {}

    def row(pu: int) -> dict[str, Any]:
        if pu not in per_pu:
            per_pu[pu] = {"parallel_unit": pu, "vnodes": 0, "keys": 0, "bytes": 0,
                          "epoch_rows": 0, "epoch_keys": 0, "epoch_bytes": 0}  # fmt: skip
        return per_pu[pu]

    for pu in pus:
        row(pu)
    if mapping is not None:
        for pu, vnodes, keys, nbytes in frag.pu_load:  # summed by Postgres (_PuLoad)
            entry = row(pu)
            entry["vnodes"], entry["keys"], entry["bytes"] = vnodes, keys, nbytes
    if epoch is not None:
        for reported in epoch["per_pu"] or []:
            if reported.get("fragment") == frag.name:
                entry = row(reported["pu"])
                entry["epoch_rows"] += int(reported.get("rows", 0))
                entry["epoch_keys"] += int(reported.get("keys", 0))
                entry["epoch_bytes"] += int(reported.get("bytes", 0))
    loads = [per_pu[pu] for pu in sorted(per_pu)]
    return {
        "name": frag.name,
        "pipeline": pipeline,
        "kind": frag.kind,
        "position": frag.position,
        "region": frag.region,
        "key": frag.key,
        "operator": frag.operator,
        "upstream": frag.upstream,
        "vnodes": frag.vnodes,
        "parallel_units": pus,
        "busy_with": frag.busy_with,
        "mapping_version": None if mapping is None else frag.mapping_version,
        "mapping": mapping,
        "load": {
            "epoch": epoch["epoch"] if epoch is not None else None,
            "keys": sum(e["keys"] for e in loads),
            "bytes": sum(e["bytes"] for e in loads),
            "per_parallel_unit": loads,
        },
    }
