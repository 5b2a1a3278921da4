"""The epoch report the runner builds from its PU tasks' stat rows (workers/runner/reports.py)."""

from __future__ import annotations

import time

import pytest

from workers.pipeline.builtins import wordcount
from workers.pipeline.placement import EpochPlan, VnodeMapping
from workers.runner.errors import RunnerError
from workers.runner.reports import check_reports, epoch_report


def _stat(pu: int, rows: int, seconds: float) -> dict[str, object]:
    return {
        "kind": "stat", "fragment": "word_count", "pu": pu, "records": rows, "source_rows": rows,
        "keys": 1, "bytes": 8, "vnodes": {"0": [1, 8]}, "seconds": seconds,
        "executor": "1", "host": "h",
    }  # fmt: skip


def _plan(pipeline: object) -> EpochPlan:
    frag = pipeline.fragments[0]  # type: ignore[attr-defined]
    return EpochPlan(epoch=3, placements={frag.name: VnodeMapping.initial(frag.name, 4, [0, 1])})


def test_each_pu_load_carries_its_tasks_busy_seconds() -> None:
    """The autoscaler's true processing rate is rows per busy second of a PU's task."""
    pipeline = wordcount(vnodes=4)
    stats = [_stat(0, 300, 0.6), _stat(1, 100, 0.2)]
    report = epoch_report(
        pipeline=pipeline,
        plan=_plan(pipeline),
        stats=stats,
        malformed=[],
        started=time.perf_counter(),
        source_offset={},
        records_per_vnode={},
    )
    assert [(p.pu, p.rows, p.busy_s) for p in report.per_pu] == [(0, 300, 0.6), (1, 100, 0.2)]
    assert report.rows == 400 and report.epoch == 3


def test_a_silent_pu_task_fails_the_epoch() -> None:
    pipeline = wordcount(vnodes=4)
    with pytest.raises(RunnerError, match=r"PU tasks \[1\] did not report"):
        check_reports(pipeline, _plan(pipeline), [_stat(0, 1, 0.1)])
