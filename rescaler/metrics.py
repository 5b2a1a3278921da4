"""``/metrics`` in the Prometheus text format, read from Postgres at scrape time.

Postgres is where the runner reports every epoch and the orchestrator every operation, so one
collector reading it at scrape time gives the same answer from every Django process (a
process-local ``Counter`` would count only what that process saw). What it exposes, and why each
has its type:

* counters only where the underlying rows are never deleted (operations and their moves);
* epoch figures as gauges: ``EpochMetric`` rows are pruned (``EPOCH_RETENTION``), so a sum over
  them would go down and a counter built on it would lie. The epoch-latency histogram is a
  *gauge histogram* over the last ``EPOCH_WINDOW`` epochs: use ``histogram_quantile`` on its
  buckets directly, without ``rate()``.

Access: public unless ``RESCALER_METRICS_REQUIRE_AUTH`` is set (docs/api.md, "Metrics").
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.db.models import Count, F, Sum
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector, CollectorRegistry
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from rescaler.autoscaling.metrics import autoscaling_metrics
from rescaler.cluster.models import (
    EpochMetric,
    Fragment,
    ParallelUnit,
    Pipeline,
    VnodeMapping,
    Worker,
)
from rescaler.cluster.selectors import runner_alive
from rescaler.operations.models import RescaleOperation
from workers.control import WorkerStatus
from workers.rescale.protocol import FINAL

# the epoch-latency gauge histogram covers this many of each pipeline's latest epochs
EPOCH_WINDOW = 600
EPOCH_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
OPERATION_BUCKETS_S = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)


def _buckets(values: list[float], bounds: tuple[float, ...]) -> list[tuple[str, float]]:
    """Cumulative bucket counts, as Prometheus histograms have them."""
    counts = [sum(1 for v in values if v <= bound) for bound in bounds]
    return [
        *((str(b), float(c)) for b, c in zip(bounds, counts, strict=True)),
        ("+Inf", float(len(values))),
    ]


class RescalerCollector(Collector):
    """Collects the cluster's and the operations' figures from Postgres on each scrape."""

    def collect(self) -> Iterator[Metric]:
        yield from self._pipelines()
        yield from self._load()
        yield from self._workers()
        yield from self._operations()
        yield from autoscaling_metrics()

    # -- pipelines and epochs ------------------------------------------------------------------
    def _pipelines(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "rescaler_pipeline_up",
            "1 if the runner is running and its heartbeat is fresh.",
            labels=["pipeline"],
        )
        last_epoch = GaugeMetricFamily(
            "rescaler_pipeline_last_epoch",
            "The last committed epoch (-1 before the first).",
            labels=["pipeline"],
        )
        heartbeat = GaugeMetricFamily(
            "rescaler_pipeline_heartbeat_age_seconds",
            "Seconds since the runner's last heartbeat.",
            labels=["pipeline"],
        )
        rows = GaugeMetricFamily(
            "rescaler_epoch_rows", "Records read by the last committed epoch.", labels=["pipeline"]
        )
        malformed = GaugeMetricFamily(
            "rescaler_epoch_malformed_rows",
            "Malformed records in the last committed epoch.",
            labels=["pipeline"],
        )
        window_rows = GaugeMetricFamily(
            "rescaler_epoch_window_rows",
            f"Records read by the last {EPOCH_WINDOW} epochs (see rescaler_epoch_window_seconds).",
            labels=["pipeline"],
        )
        window_span = GaugeMetricFamily(
            "rescaler_epoch_window_seconds",
            f"Seconds between the first and the last commit of the last {EPOCH_WINDOW} epochs.",
            labels=["pipeline"],
        )
        throughput = GaugeMetricFamily(
            "rescaler_epoch_rows_per_second",
            f"Records per second over the last {EPOCH_WINDOW} epochs.",
            labels=["pipeline"],
        )
        latency = GaugeHistogramMetricFamily(
            "rescaler_epoch_duration_seconds",
            f"Duration of the last {EPOCH_WINDOW} epochs (a gauge histogram: no rate() needed).",
            labels=["pipeline"],
        )
        now = timezone.now()
        for pipeline in Pipeline.objects.all():
            name = [pipeline.name]
            up.add_metric(name, 1.0 if runner_alive(pipeline) else 0.0)
            last_epoch.add_metric(name, float(pipeline.last_epoch))
            if pipeline.heartbeat_at is not None:
                heartbeat.add_metric(name, (now - pipeline.heartbeat_at).total_seconds())
            recent = list(
                EpochMetric.objects.filter(pipeline=pipeline)
                .order_by("-epoch")
                .values_list("rows", "malformed", "duration_s", "committed_at")[:EPOCH_WINDOW]
            )
            if not recent:
                continue
            rows.add_metric(name, float(recent[0][0]))
            malformed.add_metric(name, float(recent[0][1]))
            total = float(sum(r[0] for r in recent))
            span = (recent[0][3] - recent[-1][3]).total_seconds()
            window_rows.add_metric(name, total)
            window_span.add_metric(name, span)
            if span > 0:
                # the first epoch of the window committed at its start: its rows are before it
                throughput.add_metric(name, (total - recent[-1][0]) / span)
            durations = [r[2] for r in recent]
            latency.add_metric(name, _buckets(durations, EPOCH_BUCKETS_S), sum(durations))
        yield from (up, last_epoch, heartbeat, rows, malformed, window_rows, window_span)
        yield from (throughput, latency)

    # -- per-PU load ---------------------------------------------------------------------------
    def _load(self) -> Iterator[Metric]:
        labels = ["pipeline", "fragment", "pu"]
        vnodes = GaugeMetricFamily(
            "rescaler_pu_vnodes", "Vnodes the current mapping gives the PU.", labels=labels
        )
        keys = GaugeMetricFamily(
            "rescaler_pu_keys", "Keys of state the PU holds (last per-vnode report).", labels=labels
        )
        size = GaugeMetricFamily(
            "rescaler_pu_bytes",
            "Bytes of state the PU holds (last per-vnode report).",
            labels=labels,
        )
        epoch_rows = GaugeMetricFamily(
            "rescaler_pu_epoch_rows", "Records the PU processed in the last epoch.", labels=labels
        )
        version = GaugeMetricFamily(
            "rescaler_fragment_mapping_version",
            "The fragment's current mapping version.",
            labels=["pipeline", "fragment"],
        )
        mappings = dict(
            VnodeMapping.objects.filter(version=F("fragment__mapping_version")).values_list(
                "fragment_id", "mapping"
            )
        )
        fragments = Fragment.objects.filter(kind=Fragment.Kind.STATEFUL).select_related("pipeline")
        for frag in fragments:
            pipeline = frag.pipeline.name
            version.add_metric([pipeline, frag.name], float(frag.mapping_version))
            per_pu: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0])
            load = frag.vnode_load or {}
            for vnode, pu in enumerate(mappings.get(frag.id, [])):
                figures = per_pu[pu]
                figures[0] += 1
                keys_bytes = load.get(str(vnode))
                if keys_bytes:
                    figures[1] += keys_bytes[0]
                    figures[2] += keys_bytes[1]
            for pu, (n, k, b) in sorted(per_pu.items()):
                pu_labels = [pipeline, frag.name, str(pu)]
                vnodes.add_metric(pu_labels, float(n))
                keys.add_metric(pu_labels, float(k))
                size.add_metric(pu_labels, float(b))
        latest = (
            EpochMetric.objects.order_by("pipeline_id", "-epoch")
            .distinct("pipeline_id")
            .select_related("pipeline")
            .only("pipeline__name", "per_pu")
        )
        for metric in latest:
            for reported in metric.per_pu or []:
                epoch_rows.add_metric(
                    [metric.pipeline.name, str(reported.get("fragment")), str(reported.get("pu"))],
                    float(reported.get("rows", 0)),
                )
        yield from (vnodes, keys, size, epoch_rows, version)

    # -- elastic workers -----------------------------------------------------------------------
    def _workers(self) -> Iterator[Metric]:
        """One series per worker and status (1 for its status, 0 for the others, so an alert on
        ``== 1`` works for every status), lost PUs, and where PU tasks really ran."""
        status = GaugeMetricFamily(
            "rescaler_worker_status",
            "1 for the worker's status (active, cordoned, draining, decommissioning, removed, "
            "lost), 0 for the others.",
            labels=["pipeline", "worker", "status"],
        )
        lost = GaugeMetricFamily(
            "rescaler_parallel_units_lost",
            "PUs whose worker disappeared without a drain (their vnodes wait to be moved).",
            labels=["pipeline"],
        )
        tasks = CounterMetricFamily(
            "rescaler_pu_tasks",
            "PU tasks counted (one per PU per epoch that reported where it ran).",
            labels=["pipeline", "pu"],
        )
        home = CounterMetricFamily(
            "rescaler_pu_tasks_home",
            "PU tasks that ran on the PU's own worker's executor.",
            labels=["pipeline", "pu"],
        )
        share = GaugeMetricFamily(
            "rescaler_pipeline_locality_ratio",
            "Share of PU tasks that ran on their own worker's executor, since the PUs exist.",
            labels=["pipeline"],
        )
        for name, pipeline, current in Worker.objects.values_list(
            "name", "pipeline__name", "status"
        ).order_by("pipeline__name", "name"):
            for value in WorkerStatus:
                status.add_metric([pipeline, name, value], 1.0 if value == current else 0.0)
        lost_by_pipeline: dict[str, int] = defaultdict(int)
        totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for pipeline, number, pu_status, total, at_home in ParallelUnit.objects.values_list(
            "worker__pipeline__name", "number", "status", "tasks_total", "tasks_home"
        ).order_by("worker__pipeline__name", "number"):
            lost_by_pipeline[pipeline] += pu_status == ParallelUnit.Status.LOST
            totals[pipeline][0] += at_home
            totals[pipeline][1] += total
            tasks.add_metric([pipeline, str(number)], float(total))
            home.add_metric([pipeline, str(number)], float(at_home))
        for pipeline in Pipeline.objects.values_list("name", flat=True):
            lost.add_metric([pipeline], float(lost_by_pipeline.get(pipeline, 0)))
            at_home, total = totals.get(pipeline, [0, 0])
            if total:
                share.add_metric([pipeline], at_home / total)
        yield from (status, lost, tasks, home, share)

    # -- operations ----------------------------------------------------------------------------
    def _operations(self) -> Iterator[Metric]:
        by_status = GaugeMetricFamily(
            "rescaler_operations",
            "Rescale operations by status and strategy.",
            labels=["status", "strategy"],
        )
        finished = CounterMetricFamily(
            "rescaler_operations_finished",
            "Rescale operations that ended, by outcome (completed, cancelled, failed) and "
            "error code.",
            labels=["outcome", "strategy", "error_code"],
        )
        durations = HistogramMetricFamily(
            "rescaler_operation_duration_seconds",
            "Duration of ended operations, from start to end.",
            labels=["outcome", "strategy"],
        )
        moved = {
            field: CounterMetricFamily(
                f"rescaler_{field}",
                f"{field.replace('_', ' ').capitalize()} by rescale operations.",
                labels=["strategy"],
            )
            for field in ("vnodes_moved", "keys_moved", "bytes_moved")
        }
        for row in RescaleOperation.objects.values("status", "strategy").annotate(n=Count("id")):
            by_status.add_metric([row["status"], row["strategy"]], float(row["n"]))
        for row in (
            RescaleOperation.objects.filter(status__in=FINAL)
            .values("status", "strategy", "error_code")
            .annotate(n=Count("id"))
        ):
            finished.add_metric(
                [row["status"], row["strategy"], row["error_code"]], float(row["n"])
            )
        ended: dict[tuple[str, str], list[float]] = defaultdict(list)
        for status, strategy, started, ended_at in RescaleOperation.objects.filter(
            status__in=FINAL,
            started_at__isnull=False,
            finished_at__isnull=False,
        ).values_list("status", "strategy", "started_at", "finished_at"):
            if started is not None and ended_at is not None:
                ended[(status, strategy)].append(max((ended_at - started).total_seconds(), 0.0))
        for (status, strategy), values in sorted(ended.items()):
            durations.add_metric(
                [status, strategy], _buckets(values, OPERATION_BUCKETS_S), sum(values)
            )
        totals: dict[str, dict[str, Any]] = {
            sums["strategy"]: dict(sums)
            for sums in RescaleOperation.objects.values("strategy").annotate(
                vnodes_moved=Sum("vnodes_moved"),
                keys_moved=Sum("keys_moved"),
                bytes_moved=Sum("bytes_moved"),
            )
        }
        for strategy, sums in sorted(totals.items()):
            for field, family in moved.items():
                family.add_metric([strategy], float(sums[field] or 0))
        yield from (by_status, finished, durations, *moved.values())


registry = CollectorRegistry(auto_describe=False)
registry.register(RescalerCollector())


def _authenticated(request: HttpRequest) -> bool:
    """A logged-in session or a valid API token (``Authorization: Token <key>``)."""
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        return True
    try:
        return TokenAuthentication().authenticate(Request(request)) is not None
    except AuthenticationFailed:
        return False


@never_cache
@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """The Prometheus exposition (OpenMetrics when the scraper asks for it)."""
    if getattr(settings, "RESCALER_METRICS_REQUIRE_AUTH", False) and not _authenticated(request):
        response = HttpResponse(
            "metrics need authentication: send Authorization: Token <key>\n",
            status=401,
            content_type="text/plain; charset=utf-8",
        )
        response["WWW-Authenticate"] = "Token"
        return response
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encoder(registry), content_type=content_type)
