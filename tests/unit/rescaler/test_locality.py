"""Truthful placement and locality: where each PU's task ran, counted once per (epoch, PU)
(rescaler.cluster.services.placement_record, called by epoch_record)."""

from __future__ import annotations

import time

import pytest

from rescaler.cluster import services as cluster_services
from rescaler.cluster.models import ParallelUnit, Pipeline
from rescaler.runner.workers import workers_record
from workers.control import EpochReport, PuLoad, Topology, WorkerInfo

pytestmark = pytest.mark.django_db

PIPELINE = "wordcount"


@pytest.fixture
def cluster() -> Pipeline:
    """Worker w1 (executor 1) has PUs 0, 1; w2 (executor 2) has PU 2."""
    cluster_services.topology_register(
        topology=Topology(
            pipeline=PIPELINE,
            workers={"w1": [0, 1], "w2": [2]},
            fragments={
                "word_count": {"kind": "stateful", "vnodes": 4, "parallel_units": [0, 1, 2]}
            },
            spark={},
        )
    )
    workers_record(
        pipeline=PIPELINE,
        epoch=0,
        workers=[
            WorkerInfo("w1", "1", "host-a", 2, (0, 1), True, 0),
            WorkerInfo("w2", "2", "host-b", 1, (2,), True, 0),
        ],
    )
    return Pipeline.objects.get(name=PIPELINE)


def report(epoch: int, *loads: PuLoad) -> EpochReport:
    return EpochReport(
        pipeline=PIPELINE,
        epoch=epoch,
        rows=10,
        malformed=0,
        duration_s=0.1,
        committed_at=time.time(),
        source_offset={},
        per_pu=list(loads),
        per_vnode={},
        mapping_versions={},
    )


def load(fragment: str, pu: int, executor: str, host: str = "") -> PuLoad:
    return PuLoad(fragment, pu, rows=1, keys=1, bytes=1, executor=executor, host=host)


def counters() -> dict[int, tuple[str, str, int, int]]:
    return {
        pu.number: (pu.last_executor, pu.last_host, pu.tasks_total, pu.tasks_home)
        for pu in ParallelUnit.objects.all()
    }


def test_each_pu_is_counted_once_per_epoch_at_home_or_not(cluster: Pipeline) -> None:
    cluster_services.epoch_record(
        report=report(
            1,
            load("source", 0, "1", "host-a"),
            load("word_count", 0, "2", "host-b"),  # a second fragment's row: not counted
            load("source", 1, "2", "host-b"),
            load("source", 2, "2", "host-b"),
        )
    )
    assert counters() == {
        0: ("1", "host-a", 1, 1),
        1: ("2", "host-b", 1, 0),
        2: ("2", "host-b", 1, 1),
    }


def test_a_repeated_report_or_a_rerun_epoch_counts_nothing_more(cluster: Pipeline) -> None:
    epoch_1 = report(1, load("source", 0, "1"), load("source", 2, "1"))
    for _ in range(3):
        cluster_services.epoch_record(report=epoch_1)
    cluster_services.epoch_record(report=report(1, load("source", 0, "2")))
    cluster_services.epoch_record(report=report(2, load("source", 0, "1")))
    assert counters()[0][2:] == (2, 2)
    assert counters()[2][2:] == (1, 0)


def test_rows_without_an_executor_count_nothing(cluster: Pipeline) -> None:
    cluster_services.epoch_record(report=report(1, PuLoad("source", 0, 1, 1, 1)))
    assert counters()[0] == ("", "", 0, 0)


def test_a_pu_whose_worker_has_no_executor_yet_is_never_at_home(db: None) -> None:
    cluster_services.topology_register(
        topology=Topology(pipeline=PIPELINE, workers={"local-0": [0]}, fragments={}, spark={})
    )
    cluster_services.epoch_record(report=report(1, load("source", 0, "driver")))
    assert counters()[0] == ("driver", "", 1, 0)
