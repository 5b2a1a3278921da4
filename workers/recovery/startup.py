"""The runner's recovery around its epoch loop (docs/recovery.md): before the first epoch, a
restore from a snapshot into an empty state directory, or the check of every store against the
epoch Spark committed last with the rebuild of the lost ones; after a clean stop, the stores'
checksums for the next start to compare.

The runner decides when (:meth:`workers.runner.PipelineRunner.run`); this says how. The one
part that stays the runner's is re-running a committed epoch for a rebuild: that is its
streaming query, handed in as ``rerun``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workers.config import RunnerConfig
from workers.control import ControlInterface
from workers.pipeline.model import Pipeline
from workers.pipeline.placement import EpochPlan, PlacementStore, VnodeMapping
from workers.recovery.checkpoint_rerun import offsets_after
from workers.recovery.format import SnapshotManifest
from workers.recovery.location import RecoveryLocation
from workers.recovery.rebuild import (
    Rebuild,
    check_stores,
    pending_rebuild,
    plan_rebuild,
    run_rebuild,
    seal_stores,
)
from workers.recovery.replay import ReplayLog
from workers.recovery.restore import (
    RestoreRefused,
    begin_restore,
    check_restorable,
    finish_restore,
    pending_restore,
    restore_placements,
    restore_stores,
)
from workers.recovery.stores import StoreState
from workers.storage import location as durable_location

log = logging.getLogger("workers.runner")


@dataclass(frozen=True)
class LostStores:
    """Stores found lost at the start (or a rebuild a killed start left half done), and the
    rebuild that refills them."""

    lost: list[StoreState]
    rebuild: Rebuild


class RunnerRecovery:
    """Restore, check and rebuild, seal: one pipeline's state directory."""

    def __init__(
        self,
        config: RunnerConfig,
        pipeline: Pipeline,
        control: ControlInterface,
        placements_store: PlacementStore,
        replay_log: ReplayLog,
    ) -> None:
        self.config = config
        self.pipeline = pipeline
        self.control = control
        self.placements_store = placements_store
        self.replay_log = replay_log
        # PU -> its home executor's location, where its stores are (None: local mode)
        self.homes: Callable[[], dict[int, str]] | None = None

    def _homes(self) -> dict[int, str] | None:
        return self.homes() if self.homes is not None else None

    # -- a restore (--restore-from) ----------------------------------------------------------
    def restore_manifest(self) -> SnapshotManifest | None:
        """With --restore-from: the snapshot to start from, checked against this pipeline and
        this (empty) state directory, before anything is written. Without it: refuse a state
        directory whose restore did not finish."""
        cfg = self.config
        pending = pending_restore(cfg.pipeline_dir)
        if cfg.restore_from is None:
            if pending is not None:
                raise RestoreRefused(
                    f"{cfg.pipeline_dir} is half-restored from snapshot {pending['snapshot_id']}:"
                    f" run again with --restore-from {pending['snapshot_id']}"
                )
            return None
        location = RecoveryLocation(cfg.recovery_location)
        manifest = location.manifest(self.pipeline.name, cfg.restore_from)
        if pending is not None and pending["snapshot_id"] != manifest.snapshot_id:
            raise RestoreRefused(
                f"{cfg.pipeline_dir} is half-restored from snapshot {pending['snapshot_id']}: "
                f"finish that one (--restore-from {pending['snapshot_id']}) or empty the directory"
            )
        check_restorable(
            cfg.pipeline_dir, manifest, {f.name: f.vnodes for f in self.pipeline.fragments}
        )
        return manifest

    def begin_restore(self, manifest: SnapshotManifest) -> dict[str, VnodeMapping]:
        """Mark the directory as being restored and give it the new placement (the restore's
        tasks first remove whatever their PUs' stores hold on their executors: a crashed
        attempt's, or an earlier run's)."""
        cfg = self.config
        begin_restore(cfg.pipeline_dir, manifest, cfg.recovery_location, cfg.durable)
        (cfg.pipeline_dir / "recovery.json").write_text(
            json.dumps({"partitions": manifest.partitions}), "utf-8"
        )
        seen = self.control.mapping_versions(self.pipeline.name)
        placements = restore_placements(manifest, list(range(cfg.initial_pus)), seen)
        self.placements_store.save(placements)
        log.info(
            "restoring snapshot %s (epoch %d, %d keys) onto %d PUs",
            manifest.snapshot_id,
            manifest.epoch,
            manifest.keys,
            cfg.initial_pus,
        )
        return placements

    def restore(
        self, spark: Any, manifest: SnapshotManifest, placements: dict[str, VnodeMapping]
    ) -> None:
        """Write every vnode of the snapshot into its owner's store (one Spark task per PU)."""
        started = time.perf_counter()
        runs = restore_stores(
            spark,
            location=RecoveryLocation(self.config.recovery_location),
            manifest=manifest,
            pipeline_dir=self.config.pipeline_dir,
            backend=self.config.backend,
            placements=placements,
            report_progress=True,
            fresh=True,
            homes=self._homes(),
            durable=self.config.durable,
        )
        finish_restore(self.config.pipeline_dir, manifest, runs, self.config.durable)
        log.info(
            "restored snapshot %s: %d keys on %d PU tasks (%s) in %.2fs; resuming after epoch %d",
            manifest.snapshot_id,
            sum(r.keys for r in runs),
            len(runs),
            ", ".join(sorted({r.executor for r in runs})),
            time.perf_counter() - started,
            manifest.epoch,
        )

    # -- lost stores (workers/recovery/rebuild.py) -------------------------------------------
    def lost_stores(
        self,
        spark: Any,
        placements: dict[str, VnodeMapping],
        committed: int,
        ran: frozenset[tuple[str, int]] = frozenset(),
    ) -> LostStores | None:
        """Check every store holding vnodes, and those the PUs' tasks committed in this run
        (``ran``), against the epoch Spark committed last: None when none is lost, else the
        rebuild from the newest snapshot and the epochs after it (``RebuildRefused`` when there
        is none to rebuild from)."""
        cfg = self.config
        pending = pending_rebuild(cfg.pipeline_dir)
        target = committed
        if pending is not None:  # a rebuild was killed: the checkpoint is mid-way, finish it
            target = max(target, int(pending["target"]))
        if target < 0:
            return None
        reference, skip = self._placement_at(target, placements)
        states = check_stores(
            spark,
            pipeline_dir=cfg.pipeline_dir,
            backend=cfg.backend,
            reference=reference,
            committed=target,
            skip=skip,
            homes=self._homes(),
            ran=ran,
        )
        lost = [s for s in states if s.lost]
        if not lost and pending is None:
            return None
        checkpoint = cfg.pipeline_dir / "checkpoint"
        later = (
            {int(k): str(v) for k, v in pending["later_offsets"].items()}
            if pending is not None
            else offsets_after(checkpoint, target)
        )
        rebuild = plan_rebuild(
            location=RecoveryLocation(cfg.recovery_location),
            pipeline=self.pipeline.name,
            fragments={f.name: f.vnodes for f in self.pipeline.fragments},
            lost=lost,
            target=target,
            replay=self.replay_log,
            later_offsets=later,
            lineage=(checkpoint / "metadata").read_text("utf-8"),
            durable=durable_location(cfg.durable),
        )
        log.warning(
            "lost stores: %s; rebuilding them from snapshot %s (epoch %d) and re-running epochs "
            "%d..%d",
            "; ".join(s.describe() for s in lost) or "none (finishing a rebuild)",
            rebuild.manifest.snapshot_id,
            rebuild.manifest.epoch,
            rebuild.manifest.epoch + 1,
            target,
        )
        return LostStores(lost, rebuild)

    def rebuild(
        self,
        found: LostStores,
        spark: Any,
        placements: dict[str, VnodeMapping],
        rerun: Callable[[EpochPlan], None],
    ) -> None:
        """Refill the lost stores from the snapshot and re-run the epochs after it (``rerun``
        runs one committed epoch again through the runner's query)."""
        cfg = self.config
        record = run_rebuild(
            found.rebuild,
            spark=spark,
            location=RecoveryLocation(cfg.recovery_location),
            pipeline_dir=cfg.pipeline_dir,
            backend=cfg.backend,
            placements=placements,
            rerun=rerun,
            homes=self._homes(),
        )
        log.info(
            "rebuilt %d stores (%d keys) from snapshot %s and %d re-run epochs in %.2fs",
            len(found.lost),
            record["keys"],
            found.rebuild.manifest.snapshot_id,
            len(found.rebuild.entries),
            record["duration_s"],
        )

    def _placement_at(
        self, epoch: int, current: dict[str, VnodeMapping]
    ) -> tuple[dict[str, VnodeMapping], frozenset[tuple[str, int]]]:
        """The placement epoch ``epoch`` ran with, and the stores an epoch planned after it
        (not committed) may have created for PUs that joined then."""
        entry = self.replay_log.entry(epoch)
        if entry is not None:
            return entry.plan.placements, frozenset()
        last = self.placements_store.last_plan()
        if last is not None and last.epoch == epoch:
            return last.placements, frozenset()
        if last is not None and last.epoch == epoch + 1:
            joined = {(name, pu) for name, a in last.actions.items() for pu in a.slots}
            return last.placements, frozenset(joined)
        return current, frozenset()

    # -- a clean stop ------------------------------------------------------------------------
    def seal(self, spark: Any, placements: dict[str, VnodeMapping]) -> None:
        """Checksum every store, for the next start to compare; a failure is logged, and the
        stop goes on (the next start checks what the engine can)."""
        try:
            sealed = seal_stores(
                spark,
                pipeline_dir=self.config.pipeline_dir,
                backend=self.config.backend,
                placements=placements,
                homes=self._homes(),
            )
            log.info("checksums of %d stores written for the next start", sealed)
        except Exception:
            log.exception("writing the stores' checksums failed")
