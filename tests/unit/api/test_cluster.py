"""GET /api/v1/cluster: the cluster information of DESIGN §2."""

from __future__ import annotations

import time
from typing import Any
from unittest import mock

import pytest
from django.utils import timezone
from rest_framework.renderers import JSONRenderer
from rest_framework.test import APIClient

from rescaler.cluster.models import Pipeline
from rescaler.cluster.services import epoch_record
from rescaler.operations.requests import operation_request
from rescaler.runner.workers import workers_record
from tests.unit.api.fixtures import FRAGMENT, PIPELINE, register_cluster, request_body
from workers.control import EpochReport, PuLoad, WorkerInfo

pytestmark = pytest.mark.django_db

URL = "/api/v1/cluster"


def test_anonymous_is_told_to_authenticate(anon: APIClient, cluster: Pipeline) -> None:
    response = anon.get(URL)
    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"
    assert response["WWW-Authenticate"] == "Token"


def test_workers_pus_fragments_mapping_and_load(
    viewer_client: APIClient, cluster: Pipeline
) -> None:
    response = viewer_client.get(URL)
    assert response.status_code == 200
    data = response.json()
    (pipeline,) = data["pipelines"]
    assert pipeline["name"] == "wordcount" and pipeline["runner_alive"] is True
    assert pipeline["last_epoch"] == 0 and pipeline["heartbeat_age_s"] < 60
    assert pipeline["last_epoch_metric"]["rows"] == 1000
    no_tasks = {"tasks_total": 0, "tasks_home": 0, "share": None}
    assert pipeline["locality"] == no_tasks
    assert data["workers"] == [
        {
            "name": "local-0",
            "pipeline": "wordcount",
            "alive": True,
            "last_seen": data["workers"][0]["last_seen"],
            "parallel_units": [0, 1, 2, 3],
            # registered with the topology, never reported by report_workers
            "status": "active",
            "status_reason": "",
            "executor_id": "",
            "host": "",
            "cores": 0,
            "bootstrapped_epoch": None,
            "joined_at": None,
            "left_at": None,
            "drain_operation_id": None,
            "notice": None,
            "locality": no_tasks,
        }
    ]
    assert data["parallel_units"]["0"] == {
        "worker": "local-0",
        "alive": True,
        "fragments": ["source", "word_count", "sink"],
        "status": "active",
        "last_executor": "",
        "last_host": "",
        "locality": no_tasks,
    }
    assert data["parallel_units"]["3"]["fragments"] == []
    fragments = {f["name"]: f for f in data["fragments"]}
    assert [f["name"] for f in data["fragments"]] == ["source", "word_count", "sink"]
    assert fragments["source"]["mapping"] is None
    word_count = fragments["word_count"]
    assert word_count["kind"] == "stateful" and word_count["vnodes"] == 16
    assert word_count["parallel_units"] == [0, 1]
    assert word_count["mapping"] == [0] * 8 + [1] * 8 and word_count["mapping_version"] == 1
    assert word_count["busy_with"] is None
    load = word_count["load"]
    assert load["epoch"] == 0
    per_pu = {row["parallel_unit"]: row for row in load["per_parallel_unit"]}
    # vnode v holds 10 keys and 100 + v bytes (fixtures.register_cluster)
    assert per_pu[0] == {
        "parallel_unit": 0, "vnodes": 8, "keys": 80, "bytes": sum(100 + v for v in range(8)),
        "epoch_rows": 500, "epoch_keys": 100, "epoch_bytes": 1000,
    }  # fmt: skip
    assert per_pu[1]["bytes"] == sum(100 + v for v in range(8, 16))
    assert load["keys"] == 160


def test_a_fragment_with_an_operation_in_progress_names_it(
    viewer_client: APIClient, operator: Any, cluster: Pipeline
) -> None:
    op = operation_request(user=operator, body=request_body(added_parallel_units=[2]))
    fragments = {f["name"]: f for f in viewer_client.get(URL).json()["fragments"]}
    assert fragments["word_count"]["busy_with"] == op.operation_id


def test_a_stale_heartbeat_shows_the_workers_dead(
    viewer_client: APIClient, cluster: Pipeline
) -> None:
    Pipeline.objects.filter(pk=cluster.pk).update(
        heartbeat_at=timezone.now() - timezone.timedelta(minutes=10)
    )
    data = viewer_client.get(URL).json()
    assert data["pipelines"][0]["runner_alive"] is False
    assert data["workers"][0]["alive"] is False
    assert data["parallel_units"]["2"]["alive"] is False


def test_worker_status_placement_and_locality(viewer_client: APIClient, db: None) -> None:
    """A reported worker's executor and status; each PU's status, where its task last ran and
    the share of its tasks that ran at home; the pipeline's share over every PU."""
    register_cluster(workers={"w1": [0, 1], "w2": [2, 3]}, initial_pus=(0, 1, 2))
    workers_record(
        pipeline=PIPELINE,
        epoch=0,
        workers=[WorkerInfo("w1", "1", "host-a", 2, (0, 1), True, 0)],  # w2 is lost
    )
    for epoch, executor in ((1, "1"), (2, "2")):
        epoch_record(
            report=EpochReport(
                pipeline=PIPELINE, epoch=epoch, rows=1, malformed=0, duration_s=0.1,
                committed_at=time.time(), source_offset={}, per_vnode={}, mapping_versions={},
                per_pu=[PuLoad(FRAGMENT, 0, 1, 1, 1, executor=executor, host=f"h{executor}")],
            )
        )  # fmt: skip
    data = viewer_client.get(URL).json()
    workers = {w["name"]: w for w in data["workers"]}
    assert workers["w1"]["status"] == "active" and workers["w1"]["executor_id"] == "1"
    assert workers["w2"]["status"] == "lost" and workers["w2"]["alive"] is False
    assert "disappeared" in workers["w2"]["status_reason"]
    pu0, pu2 = data["parallel_units"]["0"], data["parallel_units"]["2"]
    assert (pu0["status"], pu0["last_executor"], pu0["last_host"]) == ("active", "2", "h2")
    assert pu0["locality"] == {"tasks_total": 2, "tasks_home": 1, "share": 0.5}
    assert pu2["status"] == "lost" and pu2["alive"] is False
    assert data["pipelines"][0]["locality"] == {"tasks_total": 2, "tasks_home": 1, "share": 0.5}


def test_filter_by_pipeline_and_unknown_pipeline(
    viewer_client: APIClient, cluster: Pipeline
) -> None:
    assert len(viewer_client.get(URL, {"pipeline": "wordcount"}).json()["pipelines"]) == 1
    response = viewer_client.get(URL, {"pipeline": "nope"})
    assert response.status_code == 404
    assert response.json()["code"] == "unknown_pipeline"


def test_an_empty_cluster_is_an_empty_answer(viewer_client: APIClient) -> None:
    response = viewer_client.get(URL)
    assert response.status_code == 200
    assert response.json() == {
        "pipelines": [],
        "workers": [],
        "parallel_units": {},
        "fragments": [],
    }


@pytest.mark.parametrize(("vnodes", "pus"), [(16, 4), (256, 32), (32768, 1024)])
def test_queries_do_not_grow_with_the_cluster(
    viewer_client: APIClient, django_assert_num_queries: Any, vnodes: int, pus: int
) -> None:
    """The same four queries from 4 PUs and 16 vnodes to 1,024 PUs and 32,768 vnodes (issue 23)."""
    register_cluster(
        vnodes=vnodes,
        workers={f"w{i}": list(range(i * 4, i * 4 + 4)) for i in range(pus // 4)},
        initial_pus=tuple(range(pus // 2)),
        epochs=3,
    )
    # the token (with its user), then pipelines, workers and fragments, each with what they need
    with django_assert_num_queries(4):
        response = viewer_client.get(URL)
    assert response.status_code == 200
    data = response.json()
    assert len(data["parallel_units"]) == pus and len(data["workers"]) == pus // 4
    (fragment,) = [f for f in data["fragments"] if f["name"] == FRAGMENT]
    assert len(fragment["mapping"]) == vnodes
    assert sum(row["vnodes"] for row in fragment["load"]["per_parallel_unit"]) == vnodes


def test_registering_costs_the_same_queries_whatever_the_number_of_pus(db: None) -> None:
    """The runner registers its topology at every start and after every rescale: workers and
    PUs are upserted in one statement each (1,024 PUs were some 2,000 queries)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from rescaler.cluster.models import ParallelUnit, Worker
    from rescaler.cluster.services import topology_register
    from workers.control import Topology

    def register(name: str, first_pu: int, pus: int) -> int:
        topology = Topology(
            pipeline=name,
            workers={
                f"{name}-w{i}": list(range(first_pu + i * 8, first_pu + i * 8 + 8))
                for i in range(pus // 8)
            },
            fragments={"source": {"kind": "source", "parallel_units": [first_pu]}},
            spark={},
        )
        with CaptureQueriesContext(connection) as queries:
            topology_register(topology=topology)
        return len(queries)

    small, large = register("small", 0, 8), register("large", 8, 1024)
    assert small == large
    assert register("large", 8, 1024) <= large, "a re-registration no more"
    assert Worker.objects.filter(pipeline__name="large").count() == 128
    assert ParallelUnit.objects.filter(worker__pipeline__name="large").count() == 1024
    assert set(
        ParallelUnit.objects.filter(number__in=[8, 15]).values_list("worker__name", flat=True)
    ) == {"large-w0"}


@pytest.mark.parametrize(("vnodes", "pus"), [(16, 4), (32768, 1024)])
def test_the_view_validation_and_the_planner_read_costs_three_queries(
    db: None, django_assert_num_queries: Any, vnodes: int, pus: int
) -> None:
    """``cluster_view``: the PUs with their workers, the busy fragments, the fragments with
    their PUs and current mapping, whatever the size (issue 23)."""
    from rescaler.operations.selectors import cluster_view

    pipeline = register_cluster(
        vnodes=vnodes,
        workers={f"w{i}": list(range(i * 4, i * 4 + 4)) for i in range(pus // 4)},
        initial_pus=tuple(range(pus // 2)),
    )
    pipeline.refresh_from_db()
    with django_assert_num_queries(3):
        view = cluster_view(pipeline)
    assert len(view.pu_worker) == pus and view.pu_worker[pus - 1] == f"w{pus // 4 - 1}"
    assert all(view.worker_alive.values()) and view.closed_parallel_units() == frozenset()
    fragment = view.fragments[FRAGMENT]
    assert fragment.stateful and fragment.parallel_units == tuple(range(pus // 2))
    assert len(fragment.mapping) == vnodes and len(fragment.vnode_load) == vnodes
    assert view.fragments["source"].mapping == () and fragment.busy_with is None


def test_the_answer_is_what_the_cluster_serializer_makes_of_it_byte_for_byte(
    viewer_client: APIClient, db: None
) -> None:
    """The view renders ``cluster_info`` as it is (issue 23: DRF field by field was half the
    time of a request at 1,024 PUs): it must already be the documented schema's shape and
    types, down to a whole float (``duration_s`` of 1.0 comes from Postgres as ``1``), a
    worker's notice and a PU its mapping gives vnodes it is no longer registered on."""
    from dashboard.api.selectors import cluster as cluster_selectors
    from dashboard.api.selectors.cluster import cluster_info
    from dashboard.api.serializers.cluster import ClusterSerializer
    from rescaler.cluster.models import Fragment, VnodeMapping, Worker

    register_cluster(workers={"w1": [0, 1], "w2": [2, 3]}, initial_pus=(0, 1, 2), epochs=2)
    workers_record(
        pipeline=PIPELINE,
        epoch=0,
        workers=[WorkerInfo("w1", "1", "host-a", 2, (0, 1), True, 0)],
    )
    epoch_record(
        report=EpochReport(
            pipeline=PIPELINE, epoch=5, rows=1, malformed=0, duration_s=1.0,
            committed_at=time.time(), source_offset={}, per_vnode={}, mapping_versions={},
            per_pu=[PuLoad(FRAGMENT, 0, 1, 1, 1, executor="1", host="h1")],
        )
    )  # fmt: skip
    now = timezone.now()
    Worker.objects.filter(name="w1").update(
        notice_at=now, notice_deadline=now + timezone.timedelta(minutes=2), notice_origin="api"
    )
    fragment = Fragment.objects.get(name=FRAGMENT)
    VnodeMapping.objects.filter(fragment=fragment).update(mapping=[0] * 8 + [9] * 8)

    with mock.patch.object(cluster_selectors, "_age_s", lambda at: 0.25):  # the same in both
        expected = ClusterSerializer(cluster_info()).data
        response = viewer_client.get(URL)
    assert response.status_code == 200
    assert response.content == JSONRenderer().render(expected)
    per_pu = response.json()["fragments"][1]["load"]["per_parallel_unit"]
    assert [(r["parallel_unit"], r["vnodes"]) for r in per_pu] == [(0, 8), (1, 0), (2, 0), (9, 8)]
    assert b'"duration_s":1.0' in response.content


@pytest.mark.parametrize(
    ("load", "keys", "nbytes"),
    [
        ({}, 0, 0),  # nothing reported yet
        ({"0": [3, 30], "5": [], "6": None, "99": [1, 1]}, 3, 30),  # odd rows count nothing
    ],
)
def test_the_load_per_pu_is_summed_from_what_was_reported(
    viewer_client: APIClient, db: None, load: dict[str, Any], keys: int, nbytes: int
) -> None:
    from rescaler.cluster.models import Fragment

    register_cluster()
    Fragment.objects.filter(name=FRAGMENT).update(vnode_load=load)
    (fragment,) = [f for f in viewer_client.get(URL).json()["fragments"] if f["name"] == FRAGMENT]
    rows = fragment["load"]["per_parallel_unit"]
    assert [(r["parallel_unit"], r["vnodes"]) for r in rows] == [(0, 8), (1, 8)]
    assert (rows[0]["keys"], rows[0]["bytes"], rows[1]["keys"], rows[1]["bytes"]) == (
        keys, nbytes, 0, 0,
    )  # fmt: skip
    assert (fragment["load"]["keys"], fragment["load"]["bytes"]) == (keys, nbytes)
