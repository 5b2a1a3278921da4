"""The pipeline runner: a long-running Spark driver that runs one job per epoch.

Each epoch (a Structured Streaming micro-batch, handled in ``foreachBatch``):

1. the barrier (:mod:`workers.barrier`) applies pending commands and plans the epoch's placement
   durably, so a re-run of this epoch after a crash routes identically;
2. the epoch's Spark job (:mod:`workers.job`) routes every record to its PU's task, which folds
   it into the PU's store;
3. the runner checks that every PU task reported, then reports the epoch: rows, duration, per-PU
   and per-vnode load, malformed lines.

Between epochs it watches the query, and forces an empty epoch when control work waits on an idle
stream (:mod:`workers.idle`).

Exactly once comes from the stores (updates + applied-epoch marker in one atomic write) and from
Spark's offset log (a crashed epoch is re-run with the same offsets and the same plan).

The package: ``pipeline_runner`` (the driver's loop, :class:`PipelineRunner`) and, below it,
``batch`` (one epoch's batch: its plan, its job, what is booked and reported), ``checks`` (what a
start checks before Spark), ``components`` (the parts made at the start), ``checkpoint`` (Spark's
offset and commit logs, read), ``replay`` (the replay log kept for rebuilds), ``rebuild`` (lost
stores rebuilt at a start), ``query`` (the streaming query), ``reports`` (the PU tasks' reports
and the epoch's), ``topology`` (what is registered), ``heartbeat`` and ``errors``.
"""

from __future__ import annotations

from pathlib import Path

from workers.config import RunnerConfig
from workers.control import ControlInterface
from workers.runner.errors import RunnerError, StopRequested
from workers.runner.pipeline_runner import PipelineRunner
from workers.runner.reports import EpochTimings

__all__ = ["EpochTimings", "PipelineRunner", "RunnerError", "StopRequested", "run"]


def run(config: RunnerConfig, control: ControlInterface | None = None) -> int:
    """Run a pipeline with the file-backed control interface unless another is given."""
    from workers.control import LocalControl

    control = control or LocalControl(Path(config.pipeline_dir) / "control")
    return PipelineRunner(config, control).run()
