"""The rows an epoch task emits (outputs, passed-through rows, its stat row) and the outputs' bytes
as its store records them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from workers.operators.base import KeyedOperator, arrow_type


def ipc_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression="lz4")
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    data: bytes = sink.getvalue().to_pybytes()
    return data


def from_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def output_batches(schema: pa.Schema, kind: str, outputs: pa.Table) -> list[pa.RecordBatch]:
    n = outputs.num_rows
    arrays = []
    for field in schema:
        if field.name == "kind":
            arrays.append(pa.array([kind] * n, pa.string()))
        elif field.name == "info":
            arrays.append(pa.nulls(n, pa.string()))
        else:
            arrays.append(outputs.column(field.name).cast(field.type))
    batches: list[pa.RecordBatch] = pa.Table.from_arrays(arrays, schema=schema).to_batches()
    return batches


def info_row(schema: pa.Schema, kind: str, info: dict[str, Any]) -> pa.RecordBatch:
    arrays = [
        pa.array([kind])
        if f.name == "kind"
        else pa.array([json.dumps(info)])
        if f.name == "info"
        else pa.nulls(1, f.type)
        for f in schema
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def passthrough(schema: pa.Schema, table: pa.Table) -> Iterator[pa.RecordBatch]:
    if table.num_rows == 0:
        return
    arrays = []
    for field in schema:
        if field.name in ("kind", "info", "seq"):
            arrays.append(table.column(field.name).cast(field.type))
        else:
            arrays.append(pa.nulls(table.num_rows, field.type))
    yield from pa.Table.from_arrays(arrays, schema=schema).to_batches()


def empty_outputs(operator: KeyedOperator) -> pa.Table:
    names = ["key", "seq", *(n for n, _ in operator.output_fields)]
    types = [pa.string(), pa.int64(), *(arrow_type(t) for _, t in operator.output_fields)]
    return pa.Table.from_arrays([pa.array([], t) for t in types], names=names)
