"""Each epoch's plan and offsets kept in the replay log while a lost store could be rebuilt
from a snapshot (workers/recovery/rebuild.py)."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from workers.pipeline.placement import EpochPlan
from workers.recovery.replay import ReplayLog
from workers.recovery.snapshots import Snapshots
from workers.runner.checkpoint import offsets_text

log = logging.getLogger("workers.runner")


class ReplayRecording:
    """Records each epoch's plan before it runs, and prunes what the latest snapshot makes
    unneeded."""

    def __init__(self, pipeline_dir: Path, replay_log: ReplayLog) -> None:
        self.pipeline_dir = pipeline_dir
        self.replay_log = replay_log
        self._pruned: int | None = None  # the snapshot epoch the log was last pruned to

    def recorded(self, plan: EpochPlan, snapshots: Snapshots) -> EpochPlan:
        """Keep the epoch's plan and offsets in the replay log while there is a snapshot to
        rebuild a lost store from (or one is due), and have the stores keep their outputs of
        the epochs a rebuild would re-run."""
        replay_from = snapshots.replay_from()
        if replay_from is None and not snapshots.every.enabled:
            return plan
        try:
            self.replay_log.record(plan, offsets_text(self.pipeline_dir, plan.epoch))
        except OSError as exc:  # a rebuild will refuse for want of this epoch, saying so
            log.warning("epoch %d is not in the replay log: %s", plan.epoch, exc)
        latest = snapshots.latest_epoch
        if latest is not None and latest != self._pruned:
            self.replay_log.prune(before=latest)
            self._pruned = latest
        return dataclasses.replace(plan, outputs_from=replay_from)
