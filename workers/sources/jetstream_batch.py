"""The JetStream source's records: the messages of one pulled range as one Arrow batch.

A batch has the columns ``seq``, ``subject``, ``data`` (the payload as text), the JSON fields of
the ``schema`` option and ``_malformed``. When every payload is a one-line UTF-8 JSON object with
every field present, non-null and of its type, Arrow's JSON reader parses them all in one call
(:func:`fast_batch`); otherwise each payload is checked on its own (:func:`checked_batch`), and a
bad one keeps its text with the reason in ``_malformed``, its fields null.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from workers.sources.jetstream_frames import Pulled
from workers.sources.jetstream_options import JetStreamOptions, JsonField

MALFORMED_SAMPLE = 200  # characters of a bad payload kept in its _malformed reason
_INT_RANGE = {"bigint": 2**63, "int": 2**31}


def _check_value(f: JsonField, value: Any) -> str | None:
    if value is None:
        return None
    if f.ddl_type == "string":
        return None if isinstance(value, str) else f"field {f.name!r} must be a string"
    if f.ddl_type == "boolean":
        return None if isinstance(value, bool) else f"field {f.name!r} must be true or false"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"field {f.name!r} must be a number"
    if f.ddl_type in _INT_RANGE:
        if not isinstance(value, int):
            return f"field {f.name!r} must be an integer"
        bound = _INT_RANGE[f.ddl_type]
        if not -bound <= value < bound:
            return f"field {f.name!r} is out of range for {f.ddl_type}"
    return None


def parse_payload(fields: tuple[JsonField, ...], text: str) -> tuple[list[Any] | None, str | None]:
    """(values of ``fields``, None) for a good JSON object, (None, reason) for a bad one. Every
    field must be present (JSON null is a null value) with its type: like the directory source,
    a record missing a field is malformed, never silently half-filled."""
    try:
        record = json.loads(text)
    except ValueError as exc:
        return None, f"invalid JSON: {getattr(exc, 'msg', exc)}"
    if not isinstance(record, dict):
        return None, "not a JSON object"
    values = []
    for f in fields:
        if f.name not in record:
            return None, f"missing field {f.name!r}"
        problem = _check_value(f, record[f.name])
        if problem:
            return None, problem
        value = record[f.name]
        values.append(
            float(value) if f.ddl_type in ("double", "float") and value is not None else value
        )
    return values, None


def to_batch(options: JetStreamOptions, messages: Pulled) -> pa.RecordBatch:
    """The messages as the source's batch: the fast path when it takes them all, else the
    checked one."""
    return fast_batch(options, messages) or checked_batch(options, messages)


def fast_batch(options: JetStreamOptions, messages: Pulled) -> pa.RecordBatch | None:
    """The batch parsed by Arrow's JSON reader in one call, when every payload is a one-line
    UTF-8 JSON object with every field present, non-null and of its type; None otherwise
    (then :func:`checked_batch` says, row by row, what is wrong with which)."""
    fields = options.schema
    payloads = messages.payloads
    if not fields or not len(payloads):
        return None
    doubtful = pc.or_(
        pc.match_substring(payloads, "\n"),
        pc.match_substring(
            payloads, "null"
        ),  # a missing field's null? only the checked path can tell
    )
    if pc.any(doubtful).as_py():
        return None
    import pyarrow.json as pajson

    try:
        datas = payloads.cast(pa.string())  # validates UTF-8
        lines = pc.binary_join_element_wise(payloads, b"", b"\n")  # each payload + "\n"
        ends = lines.buffers()[1]
        assert ends is not None
        size = int(np.frombuffer(ends, np.int32, count=len(lines) + 1, offset=lines.offset * 4)[-1])
        table = pajson.read_json(
            pa.BufferReader(lines.buffers()[2][:size]),
            parse_options=pajson.ParseOptions(
                explicit_schema=pa.schema([(f.name, f.arrow_type) for f in fields]),
                unexpected_field_behavior="ignore",
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    if table.num_rows != len(messages) or any(table.column(f.name).null_count for f in fields):
        return None  # a missing field reads as null: let the checked path name it
    arrays = [
        messages.seqs,
        messages.subjects,
        datas,
        *(table.column(f.name).combine_chunks() for f in fields),
        pa.nulls(len(messages), pa.string()),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=options.arrow_schema())


def checked_batch(options: JetStreamOptions, messages: Pulled) -> pa.RecordBatch:
    fields = options.schema
    seqs, subjects, datas, malformed = [], [], [], []
    parsed: list[list[Any]] = [[] for _ in fields]
    rows = zip(
        messages.seqs.to_pylist(),
        messages.subjects.to_pylist(),
        messages.payloads.to_pylist(),
        strict=True,
    )
    for seq, subject, payload in rows:
        seqs.append(seq)
        subjects.append(subject)
        problem: str | None = None
        try:
            text = payload.decode("utf-8")
        except UnicodeDecodeError:
            text = payload.decode("utf-8", errors="replace")
            problem = "payload is not UTF-8"
        datas.append(text)
        values: list[Any] | None = None
        if problem is None and fields:
            values, problem = parse_payload(fields, text)
        for column, value in zip(parsed, values or [None] * len(fields)):
            column.append(value)
        malformed.append(
            f"{options.stream}:{seq}: {problem}: {text.strip()[:MALFORMED_SAMPLE]}"
            if problem
            else None
        )
    arrays = [
        pa.array(seqs, pa.int64()),
        pa.array(subjects, pa.string()),
        pa.array(datas, pa.string()),
    ]
    arrays += [pa.array(col, f.arrow_type) for col, f in zip(parsed, fields)]
    arrays.append(pa.array(malformed, pa.string()))
    return pa.RecordBatch.from_arrays(arrays, schema=options.arrow_schema())
