"""The decision model's signals, read from what the runner already reports to Postgres.

Per committed epoch the runner stores an ``EpochMetric`` row: when it committed, its duration,
and per (fragment, PU) the records the PU's task processed (``per_pu``: ``workers.control.PuLoad``
as a dict); per fragment the latest per-vnode load (``Fragment.vnode_load``, the third figure
records per epoch). From those:

* input rate — records of the fragment per second of wall time between commits;
* epoch latency — ``EpochMetric.duration_s``;
* skew — the busiest PU's records over the mean PU's, per epoch, and the per-vnode load;
* busy seconds per PU (the true processing rate, the busy fraction) — from ``per_pu[].busy_s``,
  the seconds the PU's task measured (``PuLoad.busy_s``). Epochs of an older runner carry none:
  in a window without any, ``busy_s`` is unknown and named in ``missing_signals``;
* backlog — ``EpochMetric.source_backlog``: the records the source held past the epoch when
  it committed, as the runner asked the source (a JetStream stream's messages past the epoch's
  sequence, the directory's unread files' records, none for the generator, which makes each
  epoch's rows when asked; a pipeline's own source through its ``source_backlog``). In source
  records; a fragment's backlog is that times the fragment's records per source record over the
  read (a line is several words to a word count). Epochs that do not report it (an older
  runner, a pipeline source without ``source_backlog``) leave it unknown: named in
  ``missing_signals`` when no epoch of the read has it, and the model then has no backlog term.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

from django.db.models import Max
from django.utils import timezone

from rescaler.autoscaling.model import (
    SIGNAL_BACKLOG,
    SIGNAL_BUSY,
    EpochSignal,
    FragmentSignals,
    PipelineSignals,
)
from rescaler.cluster.models import EpochMetric, Fragment, Pipeline, VnodeMapping, Worker
from rescaler.operations.models import RescaleOperation
from workers.control import WorkerStatus
from workers.rescale.protocol.phases import FINAL

# the most epochs one read takes: a window of 10 minutes at 10 epochs a second
MAX_EPOCHS = 6_000
# what the model is told when a signal is missing from every epoch of the window
MISSING = {
    SIGNAL_BUSY: "the runner's epoch reports carry no PU busy seconds (PuLoad.busy_s): a "
    "runner older than this control plane; restart it with this version",
    SIGNAL_BACKLOG: "the runner's epoch reports carry no source backlog "
    "(EpochReport.source_backlog): the pipeline's own source has no source_backlog function, or "
    "the runner is older than this control plane",
}


def read_window_s(stabilisation_s: float) -> float:
    """How far back to read for a stabilisation window: twice it, so that the window is full
    whatever the epochs' length (the model counts only the window's own epochs)."""
    return 2 * stabilisation_s


def pipeline_signals(
    *, pipeline: Pipeline, window_s: float, now: dt.datetime | None = None
) -> PipelineSignals:
    """The pipeline's signals over the epochs committed in the last ``window_s`` seconds (the
    first of them only starts the first interval: read more than the policy's window, e.g.
    ``read_window_s``), with the guards: the operation in progress, the workers draining, the
    end of the last operation."""
    now = now or timezone.now()
    since = now - dt.timedelta(seconds=window_s)
    # the newest MAX_EPOCHS of them, oldest first
    rows = list(
        EpochMetric.objects.filter(pipeline=pipeline, committed_at__gte=since)
        .order_by("-committed_at", "-epoch")
        .values_list("epoch", "committed_at", "duration_s", "per_pu", "rows", "source_backlog")[
            :MAX_EPOCHS
        ]
    )[::-1]
    stateful = list(
        Fragment.objects.filter(pipeline=pipeline, kind=Fragment.Kind.STATEFUL).order_by(
            "position", "name"
        )
    )
    mappings = _mappings(stateful)
    fragments = {}
    busy_seen = backlog_seen = False
    for fragment in stateful:
        epochs = tuple(_epochs(fragment.name, rows))
        busy_seen = busy_seen or any(e.busy_s is not None for e in epochs)
        backlog_seen = backlog_seen or any(e.backlog is not None for e in epochs)
        load = fragment.vnode_load or {}
        fragments[fragment.name] = FragmentSignals(
            fragment=fragment.name,
            parallel_units=fragment.parallel_units.count(),
            epochs=epochs,
            vnode_records={int(v): float(f[2]) for v, f in load.items() if len(f) > 2},
            mapping=tuple(mappings.get(fragment.pk, ())),
        )
    missing = {} if backlog_seen else {SIGNAL_BACKLOG: MISSING[SIGNAL_BACKLOG]}
    if not busy_seen:
        missing[SIGNAL_BUSY] = MISSING[SIGNAL_BUSY]
    ended = RescaleOperation.objects.filter(pipeline=pipeline).aggregate(at=Max("finished_at"))[
        "at"
    ]
    return PipelineSignals(
        pipeline=pipeline.name,
        now=now.timestamp(),
        fragments=fragments,
        operation_in_progress=(
            RescaleOperation.objects.filter(pipeline=pipeline)
            .exclude(status__in=list(FINAL))
            .order_by("created_at")
            .values_list("operation_id", flat=True)
            .first()
        ),
        draining_workers=tuple(
            Worker.objects.filter(
                pipeline=pipeline,
                status__in=[WorkerStatus.DRAINING, WorkerStatus.DECOMMISSIONING],
            ).values_list("name", flat=True)
        ),
        last_operation_ended_at=ended.timestamp() if ended is not None else None,
        missing_signals=missing,
    )


def _mappings(fragments: list[Fragment]) -> dict[int, list[int]]:
    """Each fragment's current vnode → PU mapping, in one query."""
    wanted = {(f.pk, f.mapping_version) for f in fragments}
    rows = VnodeMapping.objects.filter(
        fragment__in=[f.pk for f in fragments],
        version__in={v for _, v in wanted},
    ).values_list("fragment_id", "version", "mapping")
    return {pk: list(m) for pk, v, m in rows if (pk, v) in wanted}


Row = tuple[int, dt.datetime, float, list[dict[str, Any]], int, int | None]


def _fan_out(fragment: str, rows: list[Row]) -> float | None:
    """The fragment's records per source record over ``rows`` (None: no source record)."""
    source = sum(r[4] for r in rows)
    mine = sum(
        int(p.get("rows", 0)) for r in rows for p in r[3] or () if p.get("fragment") == fragment
    )
    return mine / source if source else None


def _epochs(fragment: str, rows: list[Row]) -> Iterable[EpochSignal]:
    """The fragment's epochs, each but the first row's (its interval starts before the read);
    the source's backlog in the fragment's records (module docstring)."""
    fan_out = _fan_out(fragment, rows)
    previous: dt.datetime | None = None
    for epoch, committed_at, duration_s, per_pu, _rows, source_backlog in rows:
        start, previous = previous, committed_at
        mine = [p for p in per_pu or () if p.get("fragment") == fragment]
        if start is None or not mine:
            continue
        interval = (committed_at - start).total_seconds()
        if interval <= 0:
            continue
        records = [int(p.get("rows", 0)) for p in mine]
        busy = [p.get("busy_s") for p in mine]
        numbers = [float(b) for b in busy if isinstance(b, int | float) and not isinstance(b, bool)]
        yield EpochSignal(
            epoch=epoch,
            at=committed_at.timestamp(),
            interval_s=interval,
            parallel_units=len({p.get("pu") for p in mine}),
            records=sum(records),
            duration_s=duration_s,
            busiest_pu_records=max(records),
            # every PU's busy seconds, or unknown: a sum of some of them would be no rate
            busy_s=sum(numbers) if len(numbers) == len(busy) else None,
            backlog=_in_records(source_backlog, fan_out),
        )


def _in_records(source_backlog: int | None, fan_out: float | None) -> int | None:
    if source_backlog is None or (fan_out is None and source_backlog):
        return None  # not reported, or records of the source whose worth here is unknown
    return round(source_backlog * (fan_out or 0.0))
