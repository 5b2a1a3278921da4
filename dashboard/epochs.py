"""The epochs the console shows: the charts' series and the cluster page's last epoch."""

from __future__ import annotations

import datetime as dt
from typing import Any

from dashboard.format import count
from rescaler.cluster.models import EpochMetric


def last_epoch(pipeline: str | None) -> dict[str, Any] | None:
    """The pipeline's last committed epoch: its number, records and time, as the ticker says."""
    if pipeline is None:
        return None
    last = (
        EpochMetric.objects.filter(pipeline__name=pipeline)
        .order_by("-epoch")
        .values("epoch", "rows", "duration_s")
        .first()
    )
    if last is None:
        return None
    return {
        "epoch": last["epoch"],
        "rows": count(last["rows"]),
        "duration": f"{last['duration_s'] * 1000:.0f} ms",
    }


def epoch_series(
    *,
    pipeline: str,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
    limit: int = 300,
) -> dict[str, list[float]]:
    """The last ``limit`` epochs of a pipeline (within [since, until] when given), oldest first,
    as the charts' columns: commit time (unix s), records per second, epoch latency (ms)."""
    rows = EpochMetric.objects.filter(pipeline__name=pipeline)
    if since is not None:
        rows = rows.filter(committed_at__gte=since)
    if until is not None:
        rows = rows.filter(committed_at__lte=until)
    latest = list(
        rows.order_by("-epoch").values_list("epoch", "committed_at", "rows", "duration_s")[:limit]
    )
    latest.reverse()
    return {
        "epoch": [float(e) for e, _, _, _ in latest],
        "at": [at.timestamp() for _, at, _, _ in latest],
        "rows_per_s": [round(n / d, 1) if d > 0 else 0.0 for _, _, n, d in latest],
        "latency_ms": [round(d * 1000, 1) for _, _, _, d in latest],
    }
