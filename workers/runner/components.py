"""The parts of a runner that need its Spark session, made at its start."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from workers.config import RunnerConfig
from workers.pipeline.model import Pipeline
from workers.pipeline.placement import VnodeMapping
from workers.recovery.location import RecoveryLocation
from workers.recovery.snapshots import SnapshotEvery, Snapshots, recovery_partitions
from workers.rescale.executor import HoldQueueBounds, RescaleExecutor
from workers.rescale.protocol import ProgressAck
from workers.sinks.base import Sink


def make_snapshots(
    config: RunnerConfig,
    pipeline: Pipeline,
    spark: Any,
    homes: Callable[[], dict[int, str]] | None = None,
) -> Snapshots:
    """The pipeline's snapshots (docs/recovery.md), as the configuration asks for them.
    ``homes``: PU -> its home executor's location (None: local mode, nothing to pin)."""
    return Snapshots(
        homes=homes,
        spark=spark,
        pipeline=pipeline.name,
        pipeline_dir=config.pipeline_dir,
        location=RecoveryLocation(config.recovery_location),
        every=SnapshotEvery.parse(config.snapshot_every),
        partitions=recovery_partitions(config.pipeline_dir, config.recovery_partitions),
        keep=config.snapshots_kept,
        backend=config.backend,
    )


def make_executor(
    config: RunnerConfig,
    placements: dict[str, VnodeMapping],
    *,
    worker_pus: set[int],
    report: Callable[[dict[str, Any]], ProgressAck | None],
    spark: Any,
    should_stop: Callable[[], bool],
    homes: Callable[[], dict[int, str]] | None = None,
) -> RescaleExecutor:
    """What carries out the rescale operations the barrier takes (docs/rescale.md)."""
    return RescaleExecutor(
        config.pipeline_dir,
        placements,
        backend=config.backend,
        worker_pus=worker_pus,
        report=report,
        spark=spark,
        hold_queue_bounds=HoldQueueBounds(config.hold_queue_step_bytes, config.hold_queue_pu_bytes),
        should_stop=should_stop,
        durable=config.durable,
        homes=homes,
    )


def task_modules(config: RunnerConfig, sink: Sink) -> tuple[str, ...]:
    """What an epoch's task imports beyond the pipeline's module: the task itself, the state
    store's backend and the sink (the executors' import check loads them ahead)."""
    return ("workers.epoch", f"workers.state.{config.backend}_store", type(sink).__module__)
