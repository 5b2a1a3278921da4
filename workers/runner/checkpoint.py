"""Spark's checkpoint of the runner's streaming query, as the driver reads it: which epoch
Spark committed last, and the offsets it logged for an epoch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def checkpoint_dir(pipeline_dir: Path) -> Path:
    """Where the query's checkpoint lives (its offset and commit logs)."""
    return Path(pipeline_dir) / "checkpoint"


def committed_epoch(pipeline_dir: Path) -> int:
    """The last epoch Spark committed, -1 before the first."""
    commits = checkpoint_dir(pipeline_dir) / "commits"
    if not commits.is_dir():
        return -1
    epochs = [int(p.name) for p in commits.iterdir() if p.name.isdigit()]
    return max(epochs, default=-1)


def offsets_text(pipeline_dir: Path, epoch: int) -> str:
    """Spark's offset log entry of ``epoch``, as written (raises OSError if there is none)."""
    return (checkpoint_dir(pipeline_dir) / "offsets" / str(epoch)).read_text("utf-8")


def source_offset(pipeline_dir: Path, epoch: int) -> dict[str, Any]:
    """The pipeline's source offset after ``epoch``, from Spark's offset log: a version line,
    the batch's metadata, then one line per source, the pipeline's first (the control
    stream's second). Empty if the log has no such entry."""
    try:
        offset: dict[str, Any] = json.loads(offsets_text(pipeline_dir, epoch).splitlines()[2])
        return offset
    except (OSError, ValueError, IndexError):
        return {}
