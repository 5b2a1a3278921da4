"""The debugging sink: each (fragment, epoch, PU)'s outputs as an Arrow file in the state directory.

``STATE_DIR/<pipeline>/sink/<fragment>/epoch=<epoch>/pu=<pu>.arrow``, the last ``retention``
epochs kept. A replay writes the same file again (atomic replace), so it is exactly-once in the
sense the other sinks are, but it is not a place to keep results: it is what the built-in demo
pipelines write unless told otherwise, and what ``--sink files`` chooses for any pipeline, to look
at an epoch's outputs (``pyarrow.ipc.open_file``) while debugging.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa

from workers.layout import sink_path
from workers.sinks.base import EpochOutputs, Sink

DEFAULT_RETENTION = 50


class FileSink(Sink):
    """Arrow files under ``state_root`` (the pipeline's directory), ``retention`` epochs kept.

    ``FileSink()`` in a pipeline's definition means the state directory the runner is given: the
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
        where = Path(self.state_root) / "sink" if self.state_root else "the state directory"
        return f"Arrow files in {where} (debugging)"

    def last_epoch(self, fragment: str) -> int | None:
        folder = Path(self.state_root) / "sink" / fragment
        if not self.state_root or not folder.is_dir():
            return None
        epochs = [int(p.name[6:]) for p in folder.iterdir() if p.name.startswith("epoch=")]
        return max(epochs, default=None)

    def write(self, outputs: EpochOutputs) -> bool:
        if not self.state_root:
            raise ValueError("FileSink() has no directory: the runner binds it (bound())")
        root = Path(self.state_root)
        path = sink_path(root, outputs.fragment, outputs.epoch, outputs.pu)
        existed = path.exists()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with pa.OSFile(str(tmp), "wb") as fh, pa.ipc.new_file(fh, outputs.table.schema) as writer:
            writer.write_table(outputs.table)
        os.replace(tmp, path)  # a replay writes the same file again
        old = sink_path(root, outputs.fragment, outputs.epoch - self.retention, outputs.pu)
        if old.exists():
            old.unlink()
            try:
                old.parent.rmdir()
            except OSError:
                pass
        return not existed
