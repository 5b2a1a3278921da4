"""Where a pipeline's state directory keeps each PU's store and each epoch's sink output.

Free of the epoch task's dependencies, so that code which only finds these files (the rescale
executor, the readout, tests) need not import :mod:`workers.epoch`.
"""

from __future__ import annotations

from pathlib import Path


def store_path(state_root: Path, fragment: str, pu: int) -> Path:
    return Path(state_root) / "stores" / fragment / f"pu-{pu}"


def sink_path(state_root: Path, fragment: str, epoch: int, pu: int) -> Path:
    return Path(state_root) / "sink" / fragment / f"epoch={epoch:010d}" / f"pu={pu}.arrow"
