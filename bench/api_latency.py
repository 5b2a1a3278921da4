"""Latency of ``GET /api/v1/cluster`` on a cluster of realistic size, against the real Postgres.

Builds, in a throwaway database (created and dropped here, never the project's), a pipeline the
way the runner registers one: ``--workers`` workers with ``--pus-per-worker`` PUs each, a
stateful fragment of ``--vnodes`` vnodes on ``--fragment-pus`` PUs (plus source and sink),
``--epochs`` reported epochs with per-PU and per-vnode load, and one operation in progress.
Then it sends ``--requests`` authenticated requests (``Authorization: Token``, as automation
does) through Django's test client, after ``--warmup`` unmeasured ones, and measures each with
``perf_counter``: the whole Django stack (middleware, authentication, DRF, the queries, JSON
rendering), without a network or an ASGI server in between.

    .venv/bin/python bench/api_latency.py                      # 256 vnodes, 16 PUs, 300 requests
    .venv/bin/python bench/api_latency.py --vnodes 4096 --fragment-pus 32 --workers 8

Prints p50/p99 and writes ``bench/results/api_latency.json``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # runnable as `python bench/api_latency.py` from anywhere
    sys.path.insert(0, str(ROOT))

from bench._common import log, machine_info, percentile, write_json  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "api_latency.json"


def build_cluster(args: argparse.Namespace) -> dict[str, Any]:
    """Register the pipeline and report epochs as the runner would; returns what was built."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission
    from rest_framework.authtoken.models import Token

    from rescaler.cluster import services as cluster_services
    from rescaler.operations import enqueue
    from rescaler.operations import requests as operation_requests
    from workers.control import EpochReport, PuLoad, Topology
    from workers.pipeline.placement import VnodeMapping

    enqueue.operation_drive_enqueue = lambda pk: None  # no Celery here
    workers = {
        f"executor-{w}": list(range(w * args.pus_per_worker, (w + 1) * args.pus_per_worker))
        for w in range(args.workers)
    }
    all_pus = [pu for pus in workers.values() for pu in pus]
    fragment_pus = all_pus[: args.fragment_pus]
    placement = VnodeMapping.initial("word_count", args.vnodes, fragment_pus)
    topology = Topology(
        pipeline="wordcount",
        workers=workers,
        fragments={
            "source": {"kind": "source", "parallel_units": fragment_pus},
            "word_count": {
                "kind": "stateful",
                "region": 1,
                "vnodes": args.vnodes,
                "key": "word",
                "operator": "count",
                "parallel_units": fragment_pus,
                "mapping": list(placement.mapping),
                "version": 1,
            },
            "sink": {"kind": "sink", "parallel_units": fragment_pus},
        },
        spark={"alive": True, "master": "local[2]"},
    )
    cluster_services.topology_register(topology=topology)
    start = time.time() - args.epochs
    for epoch in range(args.epochs):
        cluster_services.epoch_record(
            report=EpochReport(
                pipeline="wordcount",
                epoch=epoch,
                rows=200_000,
                malformed=0,
                duration_s=0.4,
                committed_at=start + epoch,
                source_offset={"offset": 200_000 * (epoch + 1)},
                per_pu=[
                    PuLoad("word_count", pu, 200_000 // len(fragment_pus), 5000, 400_000)
                    for pu in fragment_pus
                ],
                per_vnode={
                    "word_count": {v: (4000 + v, 320_000 + 80 * v) for v in range(args.vnodes)}
                },
                mapping_versions={"word_count": 1},
            )
        )
    cluster_services.runner_heartbeat(
        pipeline="wordcount", epoch=args.epochs - 1, status="running", spark={"alive": True}
    )
    user = get_user_model().objects.create_user("bench")
    user.user_permissions.add(Permission.objects.get(codename="rescale"))
    spare = [pu for pu in all_pus if pu not in fragment_pus][:2]
    if spare:  # an operation in progress: the busy lookup has a row to find
        operation_requests.operation_request(
            user=user,
            body={"changes": {"word_count": {"added_parallel_units": spare}}},
        )
    return {
        "token": Token.objects.create(user=user).key,
        "workers": len(workers),
        "parallel_units": len(all_pus),
        "fragment_parallel_units": len(fragment_pus),
        "vnodes": args.vnodes,
        "epochs_reported": args.epochs,
        "operation_in_progress": bool(spare),
    }


def measure(token: str, warmup: int, requests: int) -> dict[str, Any]:
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client(HTTP_AUTHORIZATION=f"Token {token}")
    for _ in range(warmup):
        assert client.get("/api/v1/cluster").status_code == 200
    with CaptureQueriesContext(connection) as queries:
        response = client.get("/api/v1/cluster")
    query_count = len(queries)  # now: the log it slices is reset by the next request
    assert response.status_code == 200, response.content[:500]
    body = response.json()
    assert len(body["fragments"][1]["mapping"]) > 0
    times_ms: list[float] = []
    cpu0 = time.process_time()
    for _ in range(requests):
        t0 = time.perf_counter()
        response = client.get("/api/v1/cluster")
        times_ms.append((time.perf_counter() - t0) * 1000)
        assert response.status_code == 200
    cpu_ms = (time.process_time() - cpu0) * 1000 / requests
    return {
        "requests": requests,
        "warmup": warmup,
        "p50_ms": round(percentile(times_ms, 50) or 0, 2),
        "p90_ms": round(percentile(times_ms, 90) or 0, 2),
        "p99_ms": round(percentile(times_ms, 99) or 0, 2),
        "mean_ms": round(statistics.fmean(times_ms), 2),
        "max_ms": round(max(times_ms), 2),
        # CPU of this process per request (Django, DRF, psycopg; not Postgres): what the wall
        # time would approach on an idle machine, minus the queries' round trips
        "django_cpu_ms_per_request": round(cpu_ms, 2),
        "load_avg_at_end": [round(x, 2) for x in os.getloadavg()],
        "queries_per_request": query_count,
        "response_bytes": len(response.content),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vnodes", type=int, default=256)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--pus-per-worker", type=int, default=4)
    parser.add_argument("--fragment-pus", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rescaler.settings.test")
    import django
    from django.conf import settings

    settings.DATABASES["default"].setdefault("TEST", {})["NAME"] = (
        f"bench_api_latency_{os.getpid()}"
    )
    django.setup()
    from django.db import connection
    from django.test.utils import setup_test_environment

    setup_test_environment()
    log(f"creating the throwaway database {settings.DATABASES['default']['TEST']['NAME']}")
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        built = build_cluster(args)
        token = built.pop("token")
        log(
            f"{built['parallel_units']} PUs on {built['workers']} workers, {args.vnodes} vnodes "
            f"on {built['fragment_parallel_units']} PUs; {args.requests} requests"
        )
        result = measure(token, args.warmup, args.requests)
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
    report = {
        "benchmark": "GET /api/v1/cluster",
        "method": "Django test client in process (middleware, token auth, DRF, Postgres "
        "queries, JSON rendering); no network, no ASGI server",
        "cluster": built,
        "latency": result,
        "machine": machine_info(packages=("django", "djangorestframework", "psycopg")),
    }
    write_json(args.output, report)
    print(
        f"GET /api/v1/cluster  {args.vnodes} vnodes, {built['parallel_units']} PUs: "
        f"p50 {result['p50_ms']} ms, p99 {result['p99_ms']} ms, mean {result['mean_ms']} ms, "
        f"Django CPU {result['django_cpu_ms_per_request']} ms/request, "
        f"{result['queries_per_request']} queries, {result['response_bytes']} bytes "
        f"({args.requests} requests) -> {args.output.relative_to(ROOT)}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
