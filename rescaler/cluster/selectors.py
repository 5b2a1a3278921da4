"""Read-side queries of the cluster domain."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.utils import timezone

from rescaler.cluster.models import Pipeline


def runner_status(pipeline: str | None = None) -> dict[str, Any] | None:
    """The runner's liveness as its heartbeats tell it; None if no runner ever registered.

    Without a name: the pipeline whose heartbeat is the most recent.
    """
    queryset = Pipeline.objects.all()
    if pipeline is not None:
        queryset = queryset.filter(name=pipeline)
    row = queryset.order_by("-heartbeat_at").first()
    if row is None:
        return None
    age = (timezone.now() - row.heartbeat_at).total_seconds() if row.heartbeat_at else float("inf")
    return {
        "pipeline": row.name,
        "last_epoch": row.last_epoch,
        "heartbeat_age_s": round(age, 3),
        "status": row.status,
        "spark": row.spark or {"alive": False},
        "start": row.start or {},
    }


def runner_alive(pipeline: Pipeline) -> bool:
    if pipeline.heartbeat_at is None or pipeline.status != Pipeline.Status.RUNNING:
        return False
    age = (timezone.now() - pipeline.heartbeat_at).total_seconds()
    return age < settings.RESCALER_HEARTBEAT_STALE_S
