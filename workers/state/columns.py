"""A store's keys and values as Arrow binary columns, built from and read as buffers.

:func:`binary_array` builds a column from two buffers (the offsets and the joined bytes), and
:func:`row_vnodes` takes each store key's vnode from a column's buffers (read by
:func:`workers.columnar.binary_parts`, without copying them): what a snapshot's runs, an
export's verification and the vectorised epoch work on, with no step per row in Python.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np
import pyarrow as pa

from workers.columnar import binary_parts

# a binary array's offsets are 32-bit: past this many bytes, pa.array makes the array
_BINARY_MAX_BYTES = (1 << 31) - 1


def binary_array(items: Sequence[bytes | memoryview]) -> pa.BinaryArray:
    """``pa.array(items, pa.binary())``, built from two buffers (the offsets and the joined
    bytes). The same array, without what ``pa.array`` of a Python list does first: check whether
    the list is a pandas object, which imports pandas on the first call in a process (0.19 s of
    a Spark Python worker's first export, docs/benchmarks.md, "Hot vnodes first, or last")."""
    offsets = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, items), dtype=np.int64, count=len(items)), out=offsets[1:])
    if offsets[-1] > _BINARY_MAX_BYTES:
        return cast(pa.BinaryArray, pa.array(items, pa.binary()))
    data = b"".join(items)
    return cast(
        pa.BinaryArray,
        pa.Array.from_buffers(
            pa.binary(),
            len(items),
            [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)],
        ),
    )


def row_vnodes(keys: pa.Array) -> np.ndarray:
    """Each store key's vnode (its first two bytes, big-endian)."""
    offsets, raw = binary_parts(keys)
    starts = offsets[:-1]
    vnodes: np.ndarray = raw[starts].astype(np.int32) * 256 + raw[starts + 1]
    return vnodes
