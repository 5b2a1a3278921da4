"""Array helpers for the vectorised epoch: variable-width binary columns as numpy buffers.

Arrow keeps a binary column as one offsets buffer and one data buffer. Reading many store values
at once, or writing many at once, is then a matter of index arithmetic on those buffers: these
helpers do that arithmetic, so that neither the stores nor the operator kernels loop in Python
per key.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = [
    "binary_from_parts",
    "binary_parts",
    "gather_segments",
    "segment_starts",
    "segmented_cummax",
    "store_keys",
    "string_from_parts",
]


def binary_parts(array: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, data) of a binary or string column: value i is ``data[offsets[i]:offsets[i+1]]``.

    Offsets are int64 (32-bit ones widened) and index ``data``, the column's bytes as uint8,
    directly: the array's own slice offset is applied, and the bytes are not copied. A column of
    another type is cast to large_binary first. A null value's bytes are unspecified (usually
    empty): callers mask nulls themselves.
    """
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    kind = array.type
    wide = pa.types.is_large_binary(kind) or pa.types.is_large_string(kind)
    if not (wide or pa.types.is_binary(kind) or pa.types.is_string(kind)):
        array, wide = array.cast(pa.large_binary()), True
    n = len(array)
    buffers = array.buffers()
    if n == 0:
        offsets = np.zeros(1, np.int64)
    else:
        offsets = np.frombuffer(buffers[1], np.int64 if wide else np.int32)
        offsets = offsets[array.offset : array.offset + n + 1].astype(np.int64, copy=False)
    data = np.frombuffer(buffers[2], np.uint8) if buffers[2] is not None else np.empty(0, np.uint8)
    return offsets, data


def gather_segments(src: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The segments ``src[starts[i] : starts[i] + lengths[i]]`` concatenated, in one gather."""
    lengths = np.asarray(lengths, np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.empty(0, src.dtype)
    out_starts = np.cumsum(lengths) - lengths
    index = np.arange(total, dtype=np.int64)
    index += np.repeat(np.asarray(starts, np.int64) - out_starts, lengths)
    result: np.ndarray = src[index]
    return result


def _offsets_of(lengths: np.ndarray) -> np.ndarray:
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def binary_from_parts(lengths: np.ndarray, data: np.ndarray) -> pa.LargeBinaryArray:
    """A large_binary column whose value i is the next ``lengths[i]`` bytes of ``data``."""
    offsets = _offsets_of(np.asarray(lengths, np.int64))
    array: pa.LargeBinaryArray = pa.Array.from_buffers(
        pa.large_binary(),
        len(lengths),
        [None, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(data, np.uint8))],
    )
    return array


def string_from_parts(lengths: np.ndarray, data: np.ndarray) -> pa.LargeStringArray:
    """As :func:`binary_from_parts`, for UTF-8 text; the bytes are validated."""
    offsets = _offsets_of(np.asarray(lengths, np.int64))
    array: pa.LargeStringArray = pa.Array.from_buffers(
        pa.large_string(),
        len(lengths),
        [None, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(data, np.uint8))],
    )
    array.validate(full=True)  # state read back from a store must be valid UTF-8
    return array


def store_keys(vnodes: np.ndarray, keys: pa.Array) -> pa.LargeBinaryArray:
    """Store keys (two big-endian vnode bytes, then the UTF-8 key) of a column of keys."""
    offsets, data = binary_parts(keys)
    n = len(keys)
    lengths = np.diff(offsets)
    prefixes = np.asarray(vnodes, ">u2").view(np.uint8)
    # Interleave, per key, its 2 prefix bytes (from `prefixes`) and its own bytes (from `data`).
    src = np.concatenate([prefixes, data])
    starts = np.empty((n, 2), np.int64)
    starts[:, 0] = np.arange(n, dtype=np.int64) * 2
    starts[:, 1] = offsets[:-1] + len(prefixes)
    sizes = np.empty((n, 2), np.int64)
    sizes[:, 0] = 2
    sizes[:, 1] = lengths
    return binary_from_parts(lengths + 2, gather_segments(src, starts.ravel(), sizes.ravel()))


def segment_starts(group_ids: np.ndarray) -> np.ndarray:
    """Where each run of equal, sorted group ids starts (group ids 0..G-1, each present)."""
    if len(group_ids) == 0:
        return np.empty(0, np.int64)
    change = np.empty(len(group_ids), bool)
    change[0] = True
    np.not_equal(group_ids[1:], group_ids[:-1], out=change[1:])
    starts: np.ndarray = np.flatnonzero(change)
    return starts


def segmented_cummax(values: np.ndarray, group_ids: np.ndarray) -> np.ndarray:
    """Running maximum of ``values`` restarting at each group (``group_ids`` sorted ascending).

    Values are replaced by their dense ranks and each group's ranks are lifted above every
    earlier group's, so one ``maximum.accumulate`` over the whole array never carries a maximum
    across a group boundary.
    """
    if len(values) == 0:
        return values.copy()
    distinct, ranks = np.unique(values, return_inverse=True)
    lift = np.asarray(group_ids, np.int64) * len(distinct)
    running = np.maximum.accumulate(ranks.astype(np.int64) + lift) - lift
    result: np.ndarray = distinct[running]
    return result
