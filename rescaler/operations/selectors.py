"""Read-side queries: the cluster as validation and planning see it, and measured rates."""

from __future__ import annotations

from django.conf import settings
from django.db.models import Avg
from django.utils import timezone

from rescaler.cluster.models import EpochMetric, Fragment, ParallelUnit, Pipeline, VnodeMapping
from rescaler.operations.models import OperationFragment, RescaleOperation
from workers.rescale.planner import DEFAULT_EPOCH_S, DEFAULT_TRANSFER_BYTES_PER_S
from workers.rescale.protocol import OperationStatus, Strategy
from workers.rescale.request import ClusterView, FragmentView


def runner_alive(pipeline: Pipeline) -> bool:
    if pipeline.heartbeat_at is None or pipeline.status != Pipeline.Status.RUNNING:
        return False
    age = (timezone.now() - pipeline.heartbeat_at).total_seconds()
    return age < settings.RESCALER_HEARTBEAT_STALE_S


def current_mapping(fragment: Fragment) -> list[int]:
    row = (
        VnodeMapping.objects.filter(fragment=fragment, version=fragment.mapping_version)
        .values_list("mapping", flat=True)
        .first()
    )
    return list(row or [])


def cluster_view(pipeline: Pipeline) -> ClusterView:
    alive = runner_alive(pipeline)
    pus = ParallelUnit.objects.filter(worker__pipeline=pipeline).select_related("worker")
    busy = dict(
        OperationFragment.objects.filter(active=True, fragment__pipeline=pipeline).values_list(
            "fragment__name", "operation__operation_id"
        )
    )
    fragments = {}
    for frag in Fragment.objects.filter(pipeline=pipeline).prefetch_related("parallel_units"):
        fragments[frag.name] = FragmentView(
            name=frag.name,
            stateful=frag.kind == Fragment.Kind.STATEFUL,
            parallel_units=tuple(sorted(pu.number for pu in frag.parallel_units.all())),
            mapping=tuple(current_mapping(frag)) if frag.kind == Fragment.Kind.STATEFUL else (),
            vnode_load={int(v): (kb[0], kb[1]) for v, kb in (frag.vnode_load or {}).items()},
            busy_with=busy.get(frag.name),
        )
    return ClusterView(
        pu_worker={pu.number: pu.worker.name for pu in pus},
        worker_alive={pu.worker.name: alive and pu.worker.alive for pu in pus},
        fragments=fragments,
        worker_status={pu.worker.name: pu.worker.status for pu in pus},
        worker_bootstrapped_epoch={pu.worker.name: pu.worker.bootstrapped_epoch for pu in pus},
        pu_status={pu.number: pu.status for pu in pus},
    )


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
