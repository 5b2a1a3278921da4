"""Rebuilding lost PU stores in place: the newest snapshot, then the epochs after it re-run.

When the runner starts, every store of the placement is checked (:mod:`workers.recovery.stores`).
The lost ones (missing, corrupt, or not at the epoch Spark committed last, E) are rebuilt:

1. From the newest complete snapshot S (epoch <= E), one Spark task per PU refills each lost
   store with the vnodes its PU owns, and marks it at epoch S.
2. Epochs S+1..E are re-run one by one through Spark's own re-run of an epoch: the checkpoint is
   set so that the epoch's offset log entry is the newest and the epoch before it the newest
   commit, so Spark reads the same source records again. Each runs with the plan it first ran
   with (placement and clock, from the replay log), so it computes the same state and outputs:
   a lost store folds the epoch's records again; a whole store is already past the epoch and
   re-emits the outputs it recorded then (kept since the newest snapshot for this), so that a
   later fragment's lost store gets exactly its inputs again. The sink already holds every
   (fragment, epoch, PU) of those epochs and writes nothing.
3. The offset entries Spark had logged after E are put back, and the job runs on from E.

Only the lost stores change: the others are at E throughout. A runner killed during a rebuild
leaves ``rebuild-pending.json`` (written before the checkpoint is touched), and the next start
finishes the same rebuild. What cannot be rebuilt this way is refused before anything is written:
no snapshot, a replay log that does not reach back to it, a placement change no live step made
(a stop-start's), or a live step whose exports and hold queues are gone (its operation settled
since; while it is in flight they are in the durable location, and its re-run reads them again).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from workers.faults import crash_point
from workers.pinning import executor_of
from workers.pipeline.placement import EpochPlan, VnodeMapping, write_json_atomic
from workers.recovery.checkpoint_rerun import put_back, set_rerun
from workers.recovery.format import SnapshotError, SnapshotManifest, TaskRun
from workers.recovery.location import RecoveryLocation
from workers.recovery.replay import ReplayEntry, ReplayLog
from workers.recovery.restore import restore_task
from workers.recovery.stores import CheckTask, SealTask, StoreState, check_pu, seal_pu
from workers.recovery.tasks import RestoreTask
from workers.spark_tasks import run_tasks, task_location
from workers.storage import Location

REBUILD_PENDING = "rebuild-pending.json"
REBUILT = "rebuilt.json"


class RebuildRefused(SnapshotError):
    """A lost store that cannot be rebuilt in place; the message names it and what to do."""


@dataclass(frozen=True)
class Rebuild:
    """What a rebuild restores and re-runs."""

    manifest: SnapshotManifest
    target: int  # E: the newest epoch Spark committed before the loss
    lost: tuple[StoreState, ...]
    entries: tuple[ReplayEntry, ...]  # epochs S+1..E as they first ran
    later_offsets: dict[int, str]  # Spark's offset entries after E, put back at the end

    @property
    def epochs(self) -> list[int]:
        return [e.plan.epoch for e in self.entries]

    def placements(self, current: dict[str, VnodeMapping]) -> dict[str, VnodeMapping]:
        """The placement the lost stores are refilled under: the first re-run epoch's."""
        return dict(self.entries[0].plan.placements) if self.entries else dict(current)

    def restore_tasks(
        self, location: str, state_root: Path, backend: str, current: dict[str, VnodeMapping]
    ) -> list[RestoreTask]:
        """One task per PU with a lost store: its vnodes of each lost fragment, into a fresh
        store (whatever is left of the lost one goes first)."""
        placements = self.placements(current)
        by_pu: dict[int, list[tuple[str, tuple[int, ...]]]] = {}
        for state in self.lost:
            owned = tuple(placements[state.fragment].vnodes_of(state.pu))
            by_pu.setdefault(state.pu, []).append((state.fragment, owned))
        return [
            RestoreTask(
                location, self.manifest, str(state_root), backend, pu, tuple(owned), fresh=True
            )
            for pu, owned in sorted(by_pu.items())
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "snapshot_id": self.manifest.snapshot_id,
            "target": self.target,
            "lost": [s.to_json() for s in self.lost],
            "later_offsets": {str(k): v for k, v in self.later_offsets.items()},
        }


def plan_rebuild(
    *,
    location: RecoveryLocation,
    pipeline: str,
    fragments: dict[str, int],
    lost: list[StoreState],
    target: int,
    replay: ReplayLog,
    later_offsets: dict[int, str],
    lineage: str,
    durable: Location | None = None,
) -> Rebuild:
    """The rebuild of ``lost`` up to epoch ``target``, or RebuildRefused saying why not.
    ``lineage``: Spark's checkpoint metadata (the query's id); only snapshots of this job count
    (a state directory started afresh with the same pipeline name is another job).
    ``durable``: where the exports and hold queues of a live operation still in flight are,
    which the re-runs of its steps read again (None: a step in the window is refused)."""
    names = ", ".join(s.describe() for s in lost)
    fallback = (
        "put the store back from a copy of your own, or bring the whole job back from a snapshot "
        "into an empty state directory with --restore-from (its sink must not hold later epochs)"
    )
    try:
        ids = location.snapshot_ids(pipeline)
    except OSError as exc:
        raise RebuildRefused(f"lost stores ({names}); the recovery location: {exc}") from exc
    manifests = [location.manifest(pipeline, i) for i in reversed(ids)]
    usable = [m for m in manifests if m.epoch <= target and m.checkpoint.get("metadata") == lineage]
    if not usable:
        raise RebuildRefused(
            f"lost stores ({names}) and no snapshot of {pipeline!r} at or before epoch {target} in "
            f"{location.uri} to rebuild them from (RESCALER_SNAPSHOT_EVERY takes them): {fallback}"
        )
    manifest = usable[0]
    if {n: f.vnodes for n, f in manifest.fragments.items()} != fragments:
        raise RebuildRefused(
            f"lost stores ({names}); the newest snapshot {manifest.snapshot_id} is of another "
            f"topology ({sorted(manifest.fragments)}): {fallback}"
        )
    entries: list[ReplayEntry] = []
    versions = {name: f.mapping_version for name, f in manifest.fragments.items()}
    for epoch in range(manifest.epoch + 1, target + 1):
        entry = replay.entry(epoch)
        if entry is None:
            raise RebuildRefused(
                f"lost stores ({names}); the replay log ({replay.dir}) has no record of epoch "
                f"{epoch}, after snapshot {manifest.snapshot_id} of epoch {manifest.epoch}: "
                f"{fallback}"
            )
        _refuse_unrepeatable(entry.plan, versions, durable, names, manifest, fallback)
        versions.update({name: p.version for name, p in entry.plan.placements.items()})
        entries.append(entry)
    return Rebuild(manifest, target, tuple(lost), tuple(entries), dict(later_offsets))


def step_exports(plan: EpochPlan) -> list[str]:
    """The exports an epoch's step actions ingest."""
    return [
        path
        for actions in plan.actions.values()
        for slot in actions.slots.values()
        for path in slot.ingest
    ]


def _refuse_unrepeatable(
    plan: EpochPlan,
    versions: dict[str, int],
    durable: Location | None,
    names: str,
    manifest: SnapshotManifest,
    fallback: str,
) -> None:
    """Whether a re-run of ``plan`` computes what its first run did. Its step actions (seal,
    ingest, replay, drop) are idempotent and run only on a store behind the epoch, so a live
    step re-runs exactly while the exports and hold queues it reads are still in the durable
    location (until its operation settles). A placement change is one a live step made only in
    an epoch whose plan acquires vnodes of that fragment (an ingest); any other (a stop-start's)
    moved state that no re-run moves again."""
    epoch = plan.epoch
    acquiring = {
        name
        for name, actions in plan.actions.items()
        if any(slot.ingest for slot in actions.slots.values())
    }
    moved = sorted(
        name
        for name, placement in plan.placements.items()
        if name in versions and placement.version != versions[name] and name not in acquiring
    )
    if moved:
        raise RebuildRefused(
            f"lost stores ({names}); the placement of {', '.join(moved)} changed at epoch "
            f"{epoch}, after snapshot {manifest.snapshot_id} (epoch {manifest.epoch}), with no "
            f"live step: a rescale moved state the re-runs would not move again: {fallback}"
        )
    stepped = any(a.held or a.slots or a.cut for a in plan.actions.values())
    if not stepped:
        return
    returned = sorted(
        name
        for name, actions in plan.actions.items()
        if any(slot.replay_files and not slot.ingest for slot in actions.slots.values())
    )
    if returned:  # a hold queue read without an export: a missing file then reads as "none held"
        raise RebuildRefused(
            f"lost stores ({names}); a cancelled step of {', '.join(returned)} gave its vnodes "
            f"back at epoch {epoch}, after snapshot {manifest.snapshot_id} (epoch "
            f"{manifest.epoch}), and a re-run cannot tell its hold queues from none: {fallback}"
        )
    if durable is None:
        raise RebuildRefused(
            f"lost stores ({names}); a rescale step ran at epoch {epoch}, after snapshot "
            f"{manifest.snapshot_id} (epoch {manifest.epoch}), and no durable location was "
            f"given to find its exports and hold queues in: {fallback}"
        )
    # an operation's exports are deleted when it settles, before its hold queues (an epoch
    # that held no record of a vnode wrote no hold queue file): while they are all there, so is
    # every hold queue the re-runs read
    gone = [path for path in step_exports(plan) if not durable.exists(path)]
    if gone:
        raise RebuildRefused(
            f"lost stores ({names}); a rescale step ran at epoch {epoch}, after snapshot "
            f"{manifest.snapshot_id} (epoch {manifest.epoch}), and its exports and hold queues "
            f"are gone from {durable} (its operation settled since: {gone[0]}, "
            f"{len(gone)} files): {fallback}"
        )


def pending_rebuild(pipeline_dir: Path) -> dict[str, Any] | None:
    path = Path(pipeline_dir) / REBUILD_PENDING
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text("utf-8"))
    return data


def begin_rebuild(pipeline_dir: Path, rebuild: Rebuild) -> None:
    write_json_atomic(Path(pipeline_dir) / REBUILD_PENDING, rebuild.to_json())


def finish_rebuild(pipeline_dir: Path, rebuild: Rebuild, record: dict[str, Any]) -> None:
    write_json_atomic(Path(pipeline_dir) / REBUILT, record)
    (Path(pipeline_dir) / REBUILD_PENDING).unlink(missing_ok=True)


# -- the driver's side -----------------------------------------------------------------------
def _check_task(task: CheckTask) -> list[dict[str, Any]]:
    return [s.to_json() for s in check_pu(task, task_location()[0])]


def _seal_task(task: SealTask) -> int:
    return seal_pu(task)


def check_stores(
    spark: Any,
    *,
    pipeline_dir: Path,
    backend: str,
    reference: dict[str, VnodeMapping],
    committed: int,
    skip: frozenset[tuple[str, int]] = frozenset(),
    homes: dict[int, str] | None = None,
    ran: frozenset[tuple[str, int]] = frozenset(),
) -> list[StoreState]:
    """One task per PU checks the stores that hold vnodes under ``reference`` (the placement of
    epoch ``committed``; a PU that owns no vnode has nothing to lose), and those in ``ran``:
    (fragment, PU) whose tasks committed epochs in this run, whose next task needs the store at
    ``committed`` whatever it holds (a live step's target before it acquires anything).
    ``skip``: stores an epoch planned after it may have just created. ``homes``: PU -> its home
    executor's location, where its store is and its task runs."""
    by_pu: dict[int, list[str]] = {}
    for name, placement in sorted(reference.items()):
        for pu in placement.parallel_units:
            if (placement.vnodes_of(pu) or (name, pu) in ran) and (name, pu) not in skip:
                by_pu.setdefault(pu, []).append(name)
    tasks = [
        CheckTask(
            str(pipeline_dir),
            backend,
            pu,
            tuple(names),
            committed,
            executor_of((homes or {}).get(pu, "")),
        )
        for pu, names in sorted(by_pu.items())
    ]
    if not tasks:
        return []
    results = run_tasks(
        spark,
        tasks,
        _check_task,
        f"rescaler store check ({len(tasks)} PU tasks)",
        locations=[(homes or {}).get(task.pu) for task in tasks],
    )
    return [StoreState.from_json(s) for states in results for s in states]


def seal_stores(
    spark: Any,
    *,
    pipeline_dir: Path,
    backend: str,
    placements: dict[str, VnodeMapping],
    homes: dict[int, str] | None = None,
) -> int:
    """One task per PU writes its stores' checksums (a clean stop), on its home executor;
    returns how many."""
    by_pu: dict[int, list[str]] = {}
    for name, placement in sorted(placements.items()):
        for pu in placement.parallel_units:
            by_pu.setdefault(pu, []).append(name)
    tasks = [
        SealTask(str(pipeline_dir), backend, pu, tuple(names))
        for pu, names in sorted(by_pu.items())
    ]
    done = run_tasks(
        spark,
        tasks,
        _seal_task,
        f"rescaler store checksums ({len(tasks)} PUs)",
        locations=[(homes or {}).get(task.pu) for task in tasks],
    )
    return sum(done)


def run_rebuild(
    rebuild: Rebuild,
    *,
    spark: Any,
    location: RecoveryLocation,
    pipeline_dir: Path,
    backend: str,
    placements: dict[str, VnodeMapping],
    rerun: Callable[[EpochPlan], None],
    homes: dict[int, str] | None = None,
) -> dict[str, Any]:
    """Refill the lost stores from the snapshot, re-run the epochs after it (``rerun`` runs one
    epoch's plan through Spark's re-run of the epoch), put the checkpoint back; returns the
    record written to ``rebuilt.json``."""
    started = time.time()
    manifest = rebuild.manifest
    begin_rebuild(pipeline_dir, rebuild)
    tasks = [
        replace(task, home=executor_of((homes or {}).get(task.pu, "")))
        for task in rebuild.restore_tasks(location.uri, pipeline_dir, backend, placements)
    ]
    results = run_tasks(
        spark,
        tasks,
        restore_task,
        f"rescaler rebuild of {len(rebuild.lost)} stores from {manifest.snapshot_id}",
        locations=[(homes or {}).get(task.pu) for task in tasks],
    )
    runs = [TaskRun.from_json(r) for r in results]
    checkpoint = Path(pipeline_dir) / "checkpoint"
    before = manifest.checkpoint["offsets"]
    for entry in rebuild.entries:
        set_rerun(
            checkpoint, entry.plan.epoch, before, entry.offsets, manifest.checkpoint["commits"]
        )
        rerun(replace(entry.plan, rebuilding=True, outputs_from=manifest.epoch + 1))
        crash_point("rebuild", str(pipeline_dir))
        before = entry.offsets
    put_back(checkpoint, rebuild.target, rebuild.later_offsets)
    record = {
        "snapshot_id": manifest.snapshot_id,
        "snapshot_epoch": manifest.epoch,
        "epoch": rebuild.target,
        "lost": [s.to_json() for s in rebuild.lost],
        "rerun_epochs": rebuild.epochs,
        "started_at": started,
        "duration_s": round(time.time() - started, 3),
        "keys": sum(r.keys for r in runs),
        "tasks": [r.to_json() for r in runs],
    }
    finish_rebuild(pipeline_dir, rebuild, record)
    return record
