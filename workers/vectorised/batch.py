"""What a vectorised kernel takes and gives: a reader of stored values, and the slice's result."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa

from workers.operators.base import KeyedOperator
from workers.state.base import ColumnUpdates

Reader = Callable[[pa.Array], pa.LargeBinaryArray]  # store keys -> values (StateStore.get_column)


@dataclass(frozen=True)
class BatchResult:
    """What one epoch's slice does to the store: the updates to commit and the outputs."""

    updates: ColumnUpdates
    outputs: pa.Table  # key, seq, *output fields, as the per-key path builds them


#: an operator's kernel: its fold of one slice on arrays, or None when the slice must take the
#: per-key path
Kernel = Callable[[KeyedOperator, pa.Table, Reader], BatchResult | None]
