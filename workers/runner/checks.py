"""What the runner checks of its state directory before it starts Spark: a sink that another
run wrote ahead of it, and the placements it starts from."""

from __future__ import annotations

from workers.config import RunnerConfig
from workers.pipeline.model import Pipeline
from workers.pipeline.placement import PlacementStore, VnodeMapping
from workers.recovery.rebuild import pending_rebuild
from workers.runner.checkpoint import committed_epoch
from workers.runner.errors import RunnerError
from workers.sinks.base import Sink, SinkError


def check_sink_not_ahead(
    config: RunnerConfig, pipeline: Pipeline, sink: Sink, committed: int | None = None
) -> None:
    """Refuse to write into another run's target. A sink's record of what it wrote is keyed
    by (fragment, epoch, PU), and a fresh state directory numbers epochs from 0 again, so its
    epochs would be taken for replays and never written. The sink may be one epoch ahead of
    the checkpoint (a crash between its write and Spark's commit), never more. ``committed``:
    the epoch the start resumes from (a restore's), else the checkpoint's."""
    fragment = pipeline.fragments[-1].name
    held = sink.last_epoch(fragment)
    if committed is None:
        committed = committed_epoch(config.pipeline_dir)
        pending = pending_rebuild(config.pipeline_dir)
        if pending is not None:  # the rebuild's re-runs rewound the checkpoint for a while
            committed = max(committed, int(pending["target"]))
    if held is not None and held > committed + 1:
        raise SinkError(
            f"{sink.describe()} already holds epoch {held} of {fragment}, but this "
            f"state directory ({config.pipeline_dir}) has committed only up to epoch "
            f"{committed}: its epochs {committed + 1}..{held} would be taken for replays and "
            f"never written. The sink belongs to an earlier run whose state is gone: point it "
            f"at a new table, Delta path or subject, or clear what it holds "
            f"(docs/sources-and-sinks.md, 'One identity per (fragment, epoch, PU)')"
        )


def load_placements(
    config: RunnerConfig, pipeline: Pipeline, store: PlacementStore
) -> dict[str, VnodeMapping]:
    """The placements saved in the state directory, or every fragment's initial one (saved)."""
    saved = store.load()
    if saved is not None:
        names = {f.name for f in pipeline.fragments}
        if set(saved) != names:
            raise RunnerError(
                f"state directory {config.pipeline_dir} holds fragments {sorted(saved)}, "
                f"pipeline {pipeline.name!r} has {sorted(names)}: use another STATE_DIR"
            )
        return saved
    initial = list(range(config.initial_pus))
    placements = {
        f.name: VnodeMapping.initial(f.name, f.vnodes, initial) for f in pipeline.fragments
    }
    store.save(placements)
    return placements
