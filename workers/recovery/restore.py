"""The driver's side of a restore: its checks, the placements it restores onto, its Spark job.

A restore (``--restore-from``, a stop-start, a rebuild) routes every vnode of a snapshot to its
owner under the placement the job restarts with, one task per target PU
(:func:`workers.recovery.tasks.restore_pu`). A ``--restore-from`` first refuses a state
directory that holds state or a snapshot of another topology (:func:`check_restorable`), marks
the directory (:func:`begin_restore`: a half-restored state never runs as if it were whole), and
once the stores are whole puts back the pipeline's files and Spark's log entries of the
snapshot's epoch (:func:`finish_restore`). A corrupt snapshot is refused with the snapshot
before it offered instead.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from workers.pinning import executor_of
from workers.pipeline.placement import VnodeMapping
from workers.recovery.format import SnapshotCorrupt, SnapshotError, SnapshotManifest, TaskRun
from workers.recovery.location import RecoveryLocation
from workers.recovery.tasks import RESTORE_PROGRESS, RestoreTask, restore_pu
from workers.sources.control import restored_offsets
from workers.spark_tasks import run_tasks, task_location
from workers.storage import location as storage_location

RESTORE_PENDING = "restore-pending.json"
__all__ = ["RESTORE_PENDING", "RESTORE_PROGRESS"]  # RESTORE_PROGRESS: in the durable location


class RestoreRefused(SnapshotError):
    """A restore cannot start here; the message says why and what to do."""


def restore_task(task: RestoreTask) -> dict[str, Any]:
    """One restore task as Spark runs it (a restore, a stop-start, a rebuild)."""
    return restore_pu(task, task_location()).to_json()


def check_restorable(
    pipeline_dir: Path, manifest: SnapshotManifest, fragments: dict[str, int]
) -> None:
    """Refuse, before anything is written, a restore into a state directory that holds state,
    or of a snapshot of another topology."""
    commits = Path(pipeline_dir) / "checkpoint" / "commits"
    pending = Path(pipeline_dir) / RESTORE_PENDING
    if (
        commits.is_dir()
        and any(p.name.isdigit() for p in commits.iterdir())
        and not pending.exists()
    ):
        raise RestoreRefused(
            f"{pipeline_dir} already holds a running job's state: a restore starts from an empty "
            f"state directory (move it away, or start without --restore-from)"
        )
    if set(manifest.fragments) != set(fragments):
        raise RestoreRefused(
            f"snapshot {manifest.snapshot_id} holds fragments {sorted(manifest.fragments)}, the "
            f"pipeline has {sorted(fragments)}"
        )
    for name, vnodes in fragments.items():
        if manifest.fragments[name].vnodes != vnodes:
            raise RestoreRefused(
                f"snapshot {manifest.snapshot_id}: fragment {name} has "
                f"{manifest.fragments[name].vnodes} vnodes, the pipeline {vnodes}; the vnode "
                f"count is fixed for the life of the state"
            )


def restore_placements(
    manifest: SnapshotManifest, pus: list[int], seen: dict[str, int] | None = None
) -> dict[str, VnodeMapping]:
    """The mappings the job restarts with: even ranges over ``pus``, one version past both the
    snapshot's and the newest the control plane has ``seen`` (the lost job may have rescaled
    after the snapshot), so no version number ever names two mappings."""
    seen = seen or {}
    return {
        name: replace(
            VnodeMapping.initial(name, frag.vnodes, pus),
            version=max(frag.mapping_version, seen.get(name, 0)) + 1,
        )
        for name, frag in manifest.fragments.items()
    }


def begin_restore(
    pipeline_dir: Path, manifest: SnapshotManifest, location: str, durable: str = ""
) -> None:
    """Mark the state directory as being restored: a start without --restore-from refuses it
    until the restore finished (a half-restored state must never run as if it were whole).
    ``durable``: the pipeline's durable location, where the tasks' progress goes ("": the
    pipeline's directory)."""
    Path(pipeline_dir).mkdir(parents=True, exist_ok=True)
    progress_at = durable or str(Path(pipeline_dir).absolute())
    storage_location(progress_at).delete_dir(RESTORE_PROGRESS)
    (Path(pipeline_dir) / RESTORE_PENDING).write_text(
        json.dumps(
            {"snapshot_id": manifest.snapshot_id, "location": location, "progress_at": progress_at}
        ),
        "utf-8",
    )


def restore_stores(
    spark: Any,
    *,
    location: RecoveryLocation,
    manifest: SnapshotManifest,
    pipeline_dir: Path,
    backend: str,
    placements: dict[str, VnodeMapping],
    report_progress: bool = False,
    fresh_from: dict[str, VnodeMapping] | None = None,
    homes: dict[int, str] | None = None,
    fresh: bool = False,
    durable: str = "",
) -> list[TaskRun]:
    """The restore job: one task per target PU fills its stores. ``report_progress``: each task
    writes how far it is into ``RESTORE_PROGRESS`` of ``durable``, the pipeline's durable
    location ("": the pipeline's directory; a --restore-from, shown by the console).
    ``fresh_from``: the placement the stores held until now (a stop-start): each task first
    removes its PU's stores of it, and PUs that are not targets get a task that only does that,
    so no separate clear job runs. ``fresh``: each task first removes what its PU's stores hold
    (a restore into a new state directory: an executor may keep an earlier run's). ``homes``:
    PU -> its home executor's location, where its task runs."""
    pus = {pu for p in placements.values() for pu in p.parallel_units}
    if fresh_from is not None:
        pus |= {pu for p in fresh_from.values() for pu in p.parallel_units}
    progress = (durable or str(pipeline_dir)) if report_progress else ""
    tasks = [
        RestoreTask(
            location.uri,
            manifest,
            str(pipeline_dir),
            backend,
            pu,
            tuple(
                (name, tuple(p.vnodes_of(pu)))
                for name, p in sorted(placements.items())
                if pu in p.parallel_units or (fresh_from and pu in fresh_from[name].parallel_units)
            ),
            fresh=fresh or fresh_from is not None,
            progress_at=progress,
            home=executor_of((homes or {}).get(pu, "")),
        )
        for pu in sorted(pus)
    ]
    try:
        results = run_tasks(
            spark,
            tasks,
            restore_task,
            f"rescaler restore {manifest.snapshot_id} onto {len(pus)} PUs",
            locations=[(homes or {}).get(task.pu) for task in tasks],
        )
    except Exception as exc:
        detail = corruption_in(exc)
        if detail is None:
            raise
        previous = location.previous(manifest.pipeline, manifest.snapshot_id)
        offer = (
            f"restore the snapshot before it instead: --restore-from {previous}"
            if previous
            else "no earlier snapshot is kept"
        )
        raise SnapshotCorrupt(f"{detail}; {offer}") from exc
    return [TaskRun.from_json(r) for r in results]


def corruption_in(exc: BaseException) -> str | None:
    """A corrupt snapshot's message, from the error itself or from the Spark task's error that
    carries it (an executor's exception reaches the driver as text)."""
    if isinstance(exc, SnapshotCorrupt):
        return str(exc)
    found = re.search(r"SnapshotCorrupt: (.+)", str(exc))
    return found.group(1).strip() if found else None


def finish_restore(
    pipeline_dir: Path, manifest: SnapshotManifest, runs: list[TaskRun], durable: str = ""
) -> None:
    """The stores are whole: put back the pipeline's files and Spark's log entries of the
    snapshot's epoch (the query resumes after it, from its offsets), then clear the mark."""
    root = Path(pipeline_dir)
    for name, text in manifest.files.items():
        (root / name).write_text(text, "utf-8")
    checkpoint = root / "checkpoint"
    for sub in ("offsets", "commits"):
        (checkpoint / sub).mkdir(parents=True, exist_ok=True)
    (checkpoint / "metadata").write_text(manifest.checkpoint["metadata"], "utf-8")
    (checkpoint / "offsets" / str(manifest.epoch)).write_text(
        restored_offsets(manifest.checkpoint["offsets"]), "utf-8"
    )
    if "previous_offsets" in manifest.checkpoint:
        (checkpoint / "offsets" / str(manifest.epoch - 1)).write_text(
            restored_offsets(manifest.checkpoint["previous_offsets"]), "utf-8"
        )
    (checkpoint / "commits" / str(manifest.epoch)).write_text(
        manifest.checkpoint["commits"], "utf-8"
    )
    record = {
        "snapshot_id": manifest.snapshot_id,
        "epoch": manifest.epoch,
        "restored_at": time.time(),
        "restored_by": restored_by(),
        "pus": sorted(r.pu for r in runs),
        "keys": sum(r.keys for r in runs),
        "bytes": sum(r.bytes for r in runs),
        "tasks": [r.to_json() for r in runs],
    }
    (root / "restored.json").write_text(json.dumps(record, indent=1), "utf-8")
    (root / RESTORE_PENDING).unlink(missing_ok=True)
    storage_location(durable or str(root)).delete_dir(RESTORE_PROGRESS)


def restored_by() -> str:
    """Who restored: RESCALER_ACTOR (a platform's user or job name), else the OS user."""
    import getpass

    actor = os.environ.get("RESCALER_ACTOR", "").strip()
    if actor:
        return actor
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def pending_restore(pipeline_dir: Path) -> dict[str, Any] | None:
    path = Path(pipeline_dir) / RESTORE_PENDING
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text("utf-8"))
    return data
