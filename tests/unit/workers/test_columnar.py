"""``workers.columnar.binary_parts``, the one reading of a binary or string column's buffers (the
stores' checksums and vnodes, the operators' kernels): int64 offsets into uint8 bytes that give
each value back, whatever the column's width, slice or chunks, without copying the bytes."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from workers.columnar import binary_parts

TYPES = [pa.binary(), pa.large_binary(), pa.string(), pa.large_string()]


def read_back(array: pa.Array | pa.ChunkedArray) -> list[bytes]:
    offsets, data = binary_parts(array)
    assert offsets.dtype == np.int64 and data.dtype == np.uint8
    assert len(offsets) == len(array) + 1
    return [bytes(data[offsets[i] : offsets[i + 1]]) for i in range(len(array))]


@pytest.mark.parametrize("kind", TYPES, ids=str)
@given(
    values=st.lists(st.text(max_size=12), max_size=40),
    cut=st.tuples(st.integers(0, 40), st.integers(0, 40)),
)
def test_every_value_is_read_back_from_the_buffers(
    kind: pa.DataType, values: list[str], cut: tuple[int, int]
) -> None:
    items = values if pa.types.is_string(kind) or pa.types.is_large_string(kind) else None
    array = pa.array(items if items is not None else [v.encode() for v in values], kind)
    expected = [v.encode() for v in values]
    start, stop = sorted(min(c, len(values)) for c in cut)
    assert read_back(array) == expected
    assert read_back(array.slice(start, stop - start)) == expected[start:stop]
    chunked = pa.chunked_array([array.slice(0, start), array.slice(start)], kind)
    assert read_back(chunked) == expected


def test_the_bytes_are_not_copied() -> None:
    array = pa.array([b"ab", b"cde"], pa.binary()).slice(1)
    _, data = binary_parts(array)
    assert data.ctypes.data == array.buffers()[2].address


def test_a_null_column_reads_as_empty_values() -> None:
    offsets, _ = binary_parts(pa.nulls(3))
    assert offsets.tolist() == [0, 0, 0, 0]
