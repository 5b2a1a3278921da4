"""The pools the runner's Spark session schedules in (``workers.spark_tasks``): the epochs first,
the work handed to the executors beside them in ``background``."""

from __future__ import annotations

import pickle
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pyarrow as pa
import pytest

from workers.spark_tasks import BACKGROUND_POOL, POOLS_XML, _each_task, run_tasks, scheduler_conf


def test_the_allocation_file_puts_the_epochs_first(tmp_path: Path) -> None:
    conf = scheduler_conf(tmp_path / "pipeline")
    assert conf["spark.scheduler.mode"] == "FAIR"
    path = Path(conf["spark.scheduler.allocation.file"])
    assert path == tmp_path / "pipeline" / "fairscheduler.xml"
    pools = {p.get("name"): p for p in ET.parse(path).getroot()}
    assert set(pools) == {"default", BACKGROUND_POOL}

    def number(pool: str, name: str) -> int:
        return int(pools[pool].findtext(name) or 0)

    # the epochs' pool stays "needy" (running tasks below its minShare) whatever runs
    assert number("default", "minShare") > 10_000 > number(BACKGROUND_POOL, "minShare")
    path.write_text("<allocations/>")  # an older or edited file is written again
    assert scheduler_conf(tmp_path / "pipeline") == conf and path.read_text() == POOLS_XML


def test_a_state_directory_that_cannot_be_written_takes_the_temporary_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = tmp_path / "read-only"
    blocked.write_text("a file where the directory would be")
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    conf = scheduler_conf(blocked / "pipeline")
    assert Path(conf["spark.scheduler.allocation.file"]) == tmp_path / "tmp" / "fairscheduler.xml"


def test_each_task_runs_the_task_its_row_names_and_returns_it_pickled_with_its_index() -> None:
    run = _each_task(["a", "b", "c"], str.upper)
    batches = [pa.RecordBatch.from_arrays([pa.array([2, 0], pa.int64())], names=["id"])]
    (out,) = list(run(iter(batches)))
    assert out.schema.names == ["result"] and out.schema.field(0).type == pa.binary()
    assert [pickle.loads(r) for r in out.column(0).to_pylist()] == [(2, "C"), (0, "A")]


def test_without_spark_the_tasks_run_here_in_order() -> None:
    assert run_tasks(None, [1, 2, 3], lambda n: n * 10, "here") == [10, 20, 30]
