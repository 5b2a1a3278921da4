"""A snapshot's jobs on the executors: the write job (one task per source PU writes its stores
into the recovery partitions) and the removal of a failed snapshot's staged copies, each task
on its PU's home executor. The driver's side of a snapshot is :mod:`workers.recovery.snapshots`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from workers.recovery.format import Segment, TaskRun
from workers.recovery.location import RecoveryLocation
from workers.recovery.tasks import (
    DropStagingTask,
    SnapshotTask,
    drop_pu_staging,
    write_snapshot_segments,
)
from workers.spark_tasks import run_tasks, task_location

log = logging.getLogger("workers.recovery")


def _snapshot_task(task: SnapshotTask) -> dict[str, Any]:
    run, segments = write_snapshot_segments(task, task_location())
    return {"run": run.to_json(), "segments": [s.to_json() for s in segments]}


def snapshot_stores(
    spark: Any,
    *,
    location: RecoveryLocation,
    pipeline: str,
    snapshot: str,
    partitions: int,
    backend: str,
    stores: dict[int, list[str]],
    state_root: Path | str,
    homes: dict[int, str] | None = None,
    live: bool = False,
) -> tuple[tuple[TaskRun, ...], list[Segment]]:
    """The write job: one task per source PU writes its stores (PU -> fragments) into the
    recovery partitions, on the PU's home executor when ``homes`` names it: the copies its epoch
    task staged for ``snapshot``, or (``live``, the query stopped) the stores themselves. Returns
    where each task ran and every segment written."""
    tasks = [
        SnapshotTask(
            location.uri,
            pipeline,
            snapshot,
            partitions,
            backend,
            pu,
            tuple(fragments),
            str(state_root),
            live,
        )
        for pu, fragments in sorted(stores.items())
    ]
    results = run_tasks(
        spark,
        tasks,
        _snapshot_task,
        f"rescaler snapshot {snapshot} ({len(tasks)} PU tasks)",
        locations=[(homes or {}).get(task.pu) for task in tasks],
    )
    runs = tuple(TaskRun.from_json(r["run"]) for r in results)
    return runs, [Segment.from_json(s) for r in results for s in r["segments"]]


def drop_copies(
    spark: Any, pipeline_dir: Path, pus: list[int], homes: dict[int, str], snapshot: str
) -> None:
    """The PUs' staged copies of a failed snapshot, removed on their home executors (what a
    task cannot remove now goes with the PU's next snapshot task)."""
    try:
        run_tasks(
            spark,
            [DropStagingTask(str(pipeline_dir), pu) for pu in pus],
            drop_pu_staging,
            f"rescaler snapshot {snapshot}: its copies removed",
            locations=[homes.get(pu) for pu in pus],
        )
    except Exception:
        log.warning("could not remove the copies of snapshot %s", snapshot)
