"""Services of the cluster domain: what the runner reports, and what operators ask of it."""

from __future__ import annotations

import datetime as dt
import logging
from collections import defaultdict
from typing import Any

from django.db import transaction
from django.db.models import F, Value
from django.db.models.functions import Greatest
from django.utils import timezone

from rescaler.audit.services import audit_record_many
from rescaler.bulk import rows_insert, rows_update
from rescaler.cluster.models import (
    EpochMetric,
    Fragment,
    ParallelUnit,
    Pipeline,
    RunnerCommand,
    VnodeMapping,
    Worker,
)
from rescaler.cluster.signals import epoch_recorded
from rescaler.events import CLUSTER_GROUP, publish
from workers.control import EpochReport, PuLoad, Topology, WorkerStatus
from workers.rescale.protocol import CommandKind, Event

log = logging.getLogger(__name__)

# keep the newest epochs per pipeline; older rows are deleted as new ones arrive
EPOCH_RETENTION = 5_000
# workers whose executor is gone for good: neither a heartbeat nor a re-registration makes
# them alive again (only the runner's worker report does, docs/elastic-workers.md)
GONE = (WorkerStatus.LOST, WorkerStatus.REMOVED)


class ClusterError(Exception):
    """Base class of the cluster domain's refusals."""


class PipelineNotFound(ClusterError):
    """No runner has registered a pipeline of that name."""


@transaction.atomic
def topology_register(*, topology: Topology) -> Pipeline:
    """Create or refresh a pipeline's workers, PUs, fragments, matrix and mapping versions."""
    # a re-registration (placements changed by a rescale) must not touch the runner's liveness:
    # only a pipeline seen for the first time starts as "starting"; heartbeats set the rest
    pipeline, _ = Pipeline.objects.update_or_create(
        name=topology.pipeline,
        # a runner registering an archived pipeline brings it back (rescaler.operations.pipeline_archive)
        defaults={"spark": topology.spark, "archived_at": None},
        create_defaults={"status": Pipeline.Status.STARTING, "spark": topology.spark},
    )
    # workers and PUs upserted in one statement each, whatever their number (1,024 PUs were
    # 2,000 queries): a worker already lost or removed keeps its liveness
    now = timezone.now()
    names = list(topology.workers)
    gone = set(
        Worker.objects.filter(name__in=names, status__in=GONE).values_list("name", flat=True)
    )
    Worker.objects.bulk_create(
        [
            Worker(name=n, pipeline=pipeline, alive=True, last_seen=now)
            for n in names
            if n not in gone
        ],
        update_conflicts=True,
        unique_fields=["name"],
        update_fields=["pipeline", "alive", "last_seen"],
    )
    if gone:
        Worker.objects.filter(name__in=gone).update(pipeline=pipeline, last_seen=now)
    worker_ids = dict(Worker.objects.filter(name__in=names).values_list("name", "id"))
    # a PU listed under two workers goes to the last one, as it did one row at a time
    owner = {number: worker for worker, numbers in topology.workers.items() for number in numbers}
    ParallelUnit.objects.bulk_create(
        [ParallelUnit(number=n, worker_id=worker_ids[w]) for n, w in owner.items()],
        update_conflicts=True,
        unique_fields=["number"],
        update_fields=["worker"],
    )
    pus = dict(ParallelUnit.objects.filter(number__in=list(owner)).values_list("number", "id"))
    for position, (name, info) in enumerate(topology.fragments.items()):
        fragment, _ = Fragment.objects.update_or_create(
            pipeline=pipeline,
            name=name,
            defaults={
                "kind": info["kind"],
                "position": position,
                "region": info.get("region", 0),
                "vnodes": info.get("vnodes"),
                "key": info.get("key", ""),
                "operator": info.get("operator", ""),
                "upstream": info.get("upstream", ""),
            },
        )
        fragment.parallel_units.set([pus[n] for n in info.get("parallel_units", []) if n in pus])
        if "mapping" in info:
            mapping_record(fragment=fragment, version=info["version"], mapping=info["mapping"])
    return pipeline


def mapping_record(*, fragment: Fragment, version: int, mapping: list[int]) -> None:
    """Record a mapping version (once) and make it the fragment's current one if newer."""
    VnodeMapping.objects.get_or_create(
        fragment=fragment, version=version, defaults={"mapping": mapping}
    )
    if version > fragment.mapping_version:
        fragment.mapping_version = version
        fragment.save(update_fields=["mapping_version"])


def epoch_record(*, report: EpochReport) -> EpochMetric:
    """Store an epoch's report (a re-run epoch replaces its row) and tell the dashboard."""
    with transaction.atomic():
        pipeline = Pipeline.objects.locked().get(name=report.pipeline)
        metric, _ = EpochMetric.objects.update_or_create(
            pipeline=pipeline,
            epoch=report.epoch,
            defaults={
                "rows": report.rows,
                "malformed": report.malformed,
                "malformed_samples": report.malformed_samples,
                "duration_s": report.duration_s,
                "committed_at": dt.datetime.fromtimestamp(report.committed_at, tz=dt.UTC),
                "source_offset": report.source_offset,
                "per_pu": [vars(p) for p in report.per_pu],
                "mapping_versions": report.mapping_versions,
                "source_backlog": report.source_backlog,
            },
        )
        pipeline.last_epoch = max(pipeline.last_epoch, report.epoch)
        pipeline.status = Pipeline.Status.RUNNING
        pipeline.save(update_fields=["last_epoch", "status"])
        placement_record(epoch=report.epoch, per_pu=report.per_pu)
        for name, vnodes in report.per_vnode.items():
            Fragment.objects.filter(pipeline=pipeline, name=name).update(
                vnode_load=vnode_load_json(vnodes, report.records_per_vnode.get(name, {}))
            )
        if report.epoch % 100 == 0:
            EpochMetric.objects.filter(
                pipeline=pipeline, epoch__lt=report.epoch - EPOCH_RETENTION
            ).delete()
    publish(CLUSTER_GROUP, Event.EPOCH_COMMITTED, epoch_summary(metric))
    for receiver, failure in epoch_recorded.send_robust(
        sender=EpochMetric, pipeline=pipeline, epoch=report.epoch
    ):
        if isinstance(failure, Exception):
            log.warning("%s failed on epoch %s", receiver, report.epoch, exc_info=failure)
    return metric


def vnode_load_json(
    state: dict[int, tuple[int, int]], records: dict[int, float]
) -> dict[str, list[float]]:
    """``Fragment.vnode_load``: vnode -> [keys, bytes, records per epoch] (the last, the
    stream's smoothed measure of the vnode's load, the planner's order of hot vnodes)."""
    return {
        str(v): [*state.get(v, (0, 0)), records.get(v, 0.0)]
        for v in state.keys() | records.keys()  # a jsonb object: no order to keep
    }


def placement_record(*, epoch: int, per_pu: list[PuLoad]) -> None:
    """Where each PU's task really ran in ``epoch`` (the truthful placement) and the locality
    counters: ``tasks_total`` + 1 per PU, ``tasks_home`` + 1 when it ran on its own worker's
    executor.

    Counted once per (epoch, PU): a PU that runs several fragments reports a row for each, and
    the first row of the report that names an executor is the one counted (the runner's rows are
    in fragment order, so that is the first fragment's task); a repeated report, or a re-run
    epoch, counts nothing more (``counted_epoch``). Rows without an executor (a runner that does
    not report placement) count nothing. A few UPDATEs per epoch, one per (executor, home)
    group, whatever the number of PUs.
    """
    first: dict[int, PuLoad] = {}
    for load in per_pu:
        if load.executor and load.pu not in first:
            first[load.pu] = load
    if not first:
        return
    home_executor = dict(
        ParallelUnit.objects.filter(number__in=list(first), counted_epoch__lt=epoch).values_list(
            "number", "worker__executor_id"
        )
    )
    groups: dict[tuple[str, str, bool], list[int]] = defaultdict(list)
    for number, executor_id in home_executor.items():
        load = first[number]
        at_home = bool(executor_id) and executor_id == load.executor
        groups[(load.executor, load.host, at_home)].append(number)
    for (executor, host, at_home), numbers in groups.items():
        ParallelUnit.objects.filter(number__in=numbers, counted_epoch__lt=epoch).update(
            last_executor=executor[:64],
            last_host=host[:255],
            counted_epoch=epoch,
            tasks_total=F("tasks_total") + 1,
            tasks_home=F("tasks_home") + (1 if at_home else 0),
        )


def epoch_summary(metric: EpochMetric) -> dict[str, Any]:
    return {
        "pipeline": metric.pipeline.name,
        "epoch": metric.epoch,
        "rows": metric.rows,
        "malformed": metric.malformed,
        "duration_s": metric.duration_s,
        "committed_at": metric.committed_at.isoformat(),
        "per_pu": metric.per_pu,
        "mapping_versions": metric.mapping_versions,
    }


def runner_heartbeat(
    *,
    pipeline: str,
    epoch: int,
    status: str,
    spark: dict[str, Any],
    start: dict[str, Any] | None = None,
) -> None:
    now = timezone.now()
    updated = Pipeline.objects.filter(name=pipeline).update(
        # GREATEST: a heartbeat that raced a newer epoch report never moves last_epoch back
        heartbeat_at=now,
        status=status,
        spark=spark,
        start=start or {},
        last_epoch=Greatest(F("last_epoch"), Value(epoch)),
    )
    if updated:
        # a lost or removed worker has no executor: the runner's liveness says nothing of it
        Worker.objects.filter(pipeline__name=pipeline).exclude(status__in=GONE).update(
            last_seen=now, alive=status != "stopped"
        )


def command_submit(
    *,
    pipeline: Pipeline | str,
    kind: CommandKind | str,
    payload: dict[str, Any] | None = None,
    user: Any = None,
    actor_name: str = "",
    obj: tuple[str, str] | None = None,
    action: str = "",
    before: Any = None,
    after: dict[str, Any] | None = None,
) -> RunnerCommand:
    """Queue a command for the pipeline's runner and audit it, in one transaction (see
    ``commands_submit``, the one writer of ``RunnerCommand`` rows).

    ``user`` is who asked; a component acting on its own names itself in ``actor_name``. The
    event is ``command.<kind>`` on ``obj`` (default: the pipeline) with the payload, unless the
    caller names the change the command makes (``action``, ``before``, ``after``: a worker
    decommissioning, a snapshot requested), so one request leaves one event. Its ``after``
    always carries the command's id.
    """
    (command,) = commands_submit(
        pipeline=pipeline,
        kind=kind,
        payloads=[payload or {}],
        user=user,
        actor_name=actor_name,
        obj=obj,
        action=action,
        before=before,
        after=after,
    )
    return command


@transaction.atomic
def commands_submit(
    *,
    pipeline: Pipeline | str,
    kind: CommandKind | str,
    payloads: list[dict[str, Any]],
    user: Any = None,
    actor_name: str = "",
    obj: tuple[str, str] | None = None,
    action: str = "",
    before: Any = None,
    after: dict[str, Any] | None = None,
) -> list[RunnerCommand]:
    """Queue commands of one kind for the pipeline's runner, in order, each audited as
    ``command_submit`` says, in one transaction and two INSERTs whatever their number (a wave
    of steps): the one writer of ``RunnerCommand`` rows, so no command reaches the runner
    unrecorded."""
    if isinstance(pipeline, Pipeline):
        target = pipeline
    else:
        try:
            target = Pipeline.objects.get(name=pipeline)
        except Pipeline.DoesNotExist:
            raise PipelineNotFound(f"no pipeline named {pipeline!r} has registered") from None
    asker = user if user is not None and user.is_authenticated else None
    commands = rows_insert(
        [
            RunnerCommand(pipeline=target, kind=kind, payload=payload, created_by=asker)
            for payload in payloads
        ]
    )
    audit_record_many(
        [
            {
                "actor": asker,
                "actor_name": actor_name,
                "action": action or f"command.{kind}",
                "obj": obj or ("pipeline", target.name),
                "before": before,
                # the operation is the event's object already: its id is not repeated
                "after": {
                    "command": command.id,
                    **(
                        after
                        if after is not None
                        else {k: v for k, v in command.payload.items() if k != "operation_id"}
                    ),
                },
            }
            for command in commands
        ]
    )
    return commands


def command_ack(*, command_id: int, status: str, detail: str = "") -> None:
    commands_ack(acks=[(command_id, status, detail)])


def commands_ack(*, acks: list[tuple[int, str, str]]) -> None:
    """The runner's outcome of each (command id, status, detail), in one UPDATE."""
    now = timezone.now()
    rows_update(
        RunnerCommand,
        ["status", "detail", "acked_at"],
        {command_id: (status, detail, now) for command_id, status, detail in acks},
    )
