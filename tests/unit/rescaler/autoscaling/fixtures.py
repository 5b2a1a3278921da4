"""Builders of the autoscaler's tests: epochs reported the way the runner reports them."""

from __future__ import annotations

import time
from collections.abc import Callable

from rescaler.cluster import services as cluster_services
from rescaler.cluster.models import EpochMetric
from tests.unit.api.fixtures import FRAGMENT, PIPELINE
from workers.control import EpochReport, PuLoad


def report_epochs(
    *,
    count: int,
    records: Callable[[int, int], int],
    parallel_units: tuple[int, ...] = (0, 1),
    epoch_s: float = 2.0,
    first_epoch: int = 0,
    end_at: float | None = None,
    busy_s_per_record: float | None = None,
    vnodes: int = 16,
    backlog: Callable[[int], int | None] | None = None,
    fan_out: int = 1,
) -> float:
    """``count`` epochs of word_count, ``epoch_s`` apart, the last committed at ``end_at``
    (default: now), as ``epoch_record`` stores them; ``records(epoch, pu)`` is what each PU
    processed. With ``busy_s_per_record``, each PU row also carries ``busy_s`` (its records
    times that), as a runner whose ``PuLoad`` reports busy seconds would store it. ``backlog(epoch)``:
    the source's backlog the epoch reports (default: none reported); ``fan_out``: the fragment's
    records per source record (the epoch's source rows are its records over it). Answers the
    last commit's time."""
    end_at = time.time() if end_at is None else end_at
    for i in range(count):
        epoch = first_epoch + i
        committed_at = end_at - (count - 1 - i) * epoch_s
        loads = [
            PuLoad(FRAGMENT, pu, rows=records(epoch, pu), keys=10, bytes=100)
            for pu in parallel_units
        ]
        cluster_services.epoch_record(
            report=EpochReport(
                pipeline=PIPELINE,
                epoch=epoch,
                rows=sum(p.rows for p in loads) // fan_out,
                malformed=0,
                duration_s=0.25,
                committed_at=committed_at,
                source_offset={"offset": epoch},
                per_pu=loads,
                per_vnode={FRAGMENT: {v: (10, 100) for v in range(vnodes)}},
                mapping_versions={FRAGMENT: 1},
                records_per_vnode={FRAGMENT: {v: float(v + 1) for v in range(vnodes)}},
                source_backlog=backlog(epoch) if backlog is not None else None,
            )
        )
        if busy_s_per_record is not None:
            row = EpochMetric.objects.get(pipeline__name=PIPELINE, epoch=epoch)
            row.per_pu = [{**p, "busy_s": p["rows"] * busy_s_per_record} for p in row.per_pu]
            row.save(update_fields=["per_pu"])
    return end_at
