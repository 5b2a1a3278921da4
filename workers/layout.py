"""Where a pipeline's state directory keeps each PU's store and each epoch's sink output.

Free of the epoch task's dependencies, so that code which only finds these files (the rescale
executor, the readout, tests) need not import :mod:`workers.epoch`.
"""

from __future__ import annotations

from pathlib import Path


def store_path(state_root: Path, fragment: str, pu: int) -> Path:
    return Path(state_root) / "stores" / fragment / f"pu-{pu}"


def sink_file(fragment: str, epoch: int, pu: int) -> str:
    """The files sink's file of one epoch's outputs of one PU, relative to its location."""
    return f"sink/{fragment}/epoch={epoch:010d}/pu={pu}.arrow"


def sink_path(state_root: Path, fragment: str, epoch: int, pu: int) -> Path:
    """That file, when the sink's location is the directory ``state_root``."""
    return Path(state_root) / sink_file(fragment, epoch, pu)
