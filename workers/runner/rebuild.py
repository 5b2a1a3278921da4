"""Lost stores found at a start and rebuilt (workers/recovery/rebuild.py): Spark re-runs the
committed epochs after the snapshot, and only those may start meanwhile."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workers.pipeline.placement import EpochPlan, VnodeMapping
from workers.recovery.startup import RunnerRecovery
from workers.runner.checkpoint import committed_epoch
from workers.runner.errors import RunnerError, StopRequested


class StoreRebuild:
    """Whether a rebuild runs, and the one epoch it lets Spark run."""

    def __init__(self, recovery: RunnerRecovery, pipeline_dir: Path) -> None:
        self.recovery = recovery
        self.pipeline_dir = pipeline_dir
        self.active = False
        self._rerun: EpochPlan | None = None

    def plan_of(self, epoch: int) -> EpochPlan:
        """The plan of the epoch being re-run; any other epoch may not start now."""
        plan = self._rerun
        if plan is None or plan.epoch != epoch:
            raise StopRequested(f"the rebuild re-runs committed epochs only, not {epoch}")
        return plan

    def check(
        self,
        spark: Any,
        placements: dict[str, VnodeMapping],
        *,
        start_query: Callable[[], Any],
        error: Callable[[], BaseException | None],
        ran: frozenset[tuple[str, int]] = frozenset(),
    ) -> bool:
        """Check every store against the epoch Spark committed last, and rebuild the lost ones
        (returns whether there were any). ``start_query`` starts the query that re-runs an
        epoch, ``error`` is what its batch raised; ``ran``: (fragment, PU) whose tasks committed
        epochs in this run, checked even when they own no vnode."""
        committed = committed_epoch(self.pipeline_dir)
        found = self.recovery.lost_stores(spark, placements, committed, ran)
        if found is None:
            return False

        def rerun(plan: EpochPlan) -> None:
            """Spark re-runs the committed epoch ``plan.epoch`` (the checkpoint was set for
            it); returns once it is committed again."""
            self._rerun = plan
            query = start_query()
            try:
                while committed_epoch(self.pipeline_dir) < plan.epoch:
                    if not query.isActive:
                        raise RunnerError(
                            f"re-running epoch {plan.epoch} to rebuild lost stores failed: "
                            f"{error() or query.exception()}; the next start tries again"
                        )
                    time.sleep(0.05)
            finally:
                self._rerun = None
                if query.isActive:
                    query.stop()

        self.active = True
        try:
            self.recovery.rebuild(found, spark, placements, rerun=rerun)
        finally:
            self.active = False
        return True
