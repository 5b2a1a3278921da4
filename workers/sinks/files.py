"""The debugging sink: each (fragment, epoch, PU)'s outputs as an Arrow file in the pipeline's
durable location (by default its state directory).

``<location>/sink/<fragment>/epoch=<epoch>/pu=<pu>.arrow``, the last ``retention`` epochs kept.
A replay writes the same file again (atomic replace, or one object put), so it is exactly-once
in the sense the other sinks are, but it is not a place to keep results: it is what the built-in
demo pipelines write unless told otherwise, and what ``--sink files`` chooses for any pipeline,
to look at an epoch's outputs (``pyarrow.ipc.open_file``) while debugging.
"""

from __future__ import annotations

from pathlib import Path

from workers.layout import sink_file
from workers.sinks.base import EpochOutputs, Sink
from workers.storage import location

DEFAULT_RETENTION = 50


class FileSink(Sink):
    """Arrow files under ``state_root`` (a directory or a ``pyarrow.fs`` URI: the pipeline's
    durable location), ``retention`` epochs kept.

    ``FileSink()`` in a pipeline's definition means the location the runner is given: the
    runner binds it (:meth:`bound`)."""

    writes_empty = True  # an empty file tells a reader the epoch ran on that PU

    def __init__(self, state_root: str | Path = "", retention: int = DEFAULT_RETENTION) -> None:
        if retention < 1:
            raise ValueError("retention must be at least 1 epoch")
        self.state_root = str(state_root)
        self.retention = retention

    def bound(self, state_root: str | Path) -> Sink:
        """This sink in ``state_root`` unless it names its own directory."""
        return self if self.state_root else FileSink(state_root, self.retention)

    def describe(self) -> str:
        if not self.state_root:
            return "Arrow files in the state directory (debugging)"
        return f"Arrow files in {location(self.state_root).uri_of('sink')} (debugging)"

    def last_epoch(self, fragment: str) -> int | None:
        if not self.state_root:
            return None
        epochs = {
            int(path.split("/")[-2].removeprefix("epoch="))
            for path in location(self.state_root).files(f"sink/{fragment}")
            if path.split("/")[-2].startswith("epoch=")
        }
        return max(epochs, default=None)

    def write(self, outputs: EpochOutputs) -> bool:
        if not self.state_root:
            raise ValueError("FileSink() has no directory: the runner binds it (bound())")
        at = location(self.state_root)
        path = sink_file(outputs.fragment, outputs.epoch, outputs.pu)
        existed = at.exists(path)
        at.write_table(path, outputs.table)  # a replay writes the same file again
        if outputs.epoch >= self.retention:
            old = sink_file(outputs.fragment, outputs.epoch - self.retention, outputs.pu)
            at.delete(old)
            at.delete_empty_dir(old.rsplit("/", 1)[0])  # once the epoch's last PU file went
        return not existed
