"""The runner's Structured Streaming query: started on the epoch job's stream, one
``foreachBatch`` call per epoch, and its status read back from the JVM."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from workers.config import RunnerConfig
from workers.job import EpochJob
from workers.runner.checkpoint import checkpoint_dir


def start_query(
    job: EpochJob, on_batch: Callable[[Any, int], None], config: RunnerConfig, pipeline: str
) -> Any:
    """Start the query: every micro-batch is one epoch, handed to ``on_batch``."""
    return (
        job.stream()
        .writeStream.foreachBatch(on_batch)
        .option("checkpointLocation", str(checkpoint_dir(config.pipeline_dir)))
        .trigger(processingTime=f"{config.trigger_interval_s} seconds")
        .queryName(f"rescaler_{pipeline}")
        .start()
    )


def query_status(query: Any, flag: str, *, default: bool = False) -> bool:
    """One flag of the streaming query's status (a call into the JVM)."""
    try:
        return bool(query.status.get(flag, default))
    except Exception:  # the query is stopping or the JVM is gone: the caller's loop ends soon
        return default
