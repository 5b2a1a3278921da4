"""The replay log: what a lost PU store needs to be rebuilt by re-running epochs.

A store is rebuilt from the last snapshot, then each epoch after the snapshot is run again, as
Spark re-runs an epoch after a crash: from the same source offsets, with the same plan (the
same placement and clock), so that it computes the same state and outputs. Spark keeps its own
offset log for ``minBatchesToRetain`` epochs only, and the runner keeps one plan; this log keeps
both for every epoch since the newest snapshot, and is pruned when a newer snapshot is written.

``<pipeline dir>/replay/<epoch>.json``: ``{"plan": EpochPlan, "offsets": <Spark's offset log
entry of the epoch>}``. Written at the barrier, before the epoch's job runs (a re-run of the
epoch writes the same again).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from workers.pipeline.placement import EpochPlan

REPLAY_DIR = "replay"


@dataclass(frozen=True)
class ReplayEntry:
    """One epoch as it first ran: its plan and its offset log entry."""

    plan: EpochPlan
    offsets: str


class ReplayLog:
    """Every epoch's plan and offsets since the newest snapshot, one small file each."""

    def __init__(self, pipeline_dir: Path) -> None:
        self.dir = Path(pipeline_dir) / REPLAY_DIR

    def record(self, plan: EpochPlan, offsets: str) -> None:
        """Atomic (a reader sees the whole entry or none) but not flushed to disk: this runs at
        every barrier, beside the plan store's own flushed write. A runner killed keeps it (the
        OS has it); a host crash may lose the newest entries, and a rebuild then refuses,
        naming the missing epoch."""
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / f"{plan.epoch}.json"
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps({"plan": plan.to_json(), "offsets": offsets}), "utf-8")
        os.replace(tmp, path)

    def epochs(self) -> list[int]:
        if not self.dir.is_dir():
            return []
        return sorted(int(p.stem) for p in self.dir.glob("*.json") if p.stem.isdigit())

    def entry(self, epoch: int) -> ReplayEntry | None:
        path = self.dir / f"{epoch}.json"
        try:
            data = json.loads(path.read_text("utf-8"))
        except FileNotFoundError:
            return None
        return ReplayEntry(EpochPlan.from_json(data["plan"]), str(data["offsets"]))

    def prune(self, before: int) -> None:
        """Forget the epochs before ``before`` (a snapshot of epoch ``before`` exists: a rebuild
        starts from it, and needs its offsets and the epochs after it)."""
        for epoch in self.epochs():
            if epoch < before:
                (self.dir / f"{epoch}.json").unlink(missing_ok=True)
