"""What a processor's state and outputs may be: Spark's types, read from a StructType or a flat
DDL string without Spark's JVM, and the refusal every unsupported use raises."""

from __future__ import annotations

from typing import Any

TIME_MODES = ("none", "processingtime", "eventtime")
INTERFACES = ("row", "pandas")
#: Spark types a state variable may hold, and the Arrow type name of an output column
_PLAIN_STATE_TYPES = (
    "string",
    "long",
    "bigint",
    "int",
    "integer",
    "short",
    "smallint",
    "byte",
    "tinyint",
    "double",
    "float",
    "boolean",
    "binary",
    "timestamp",
    "timestamp_ntz",
    "date",
)
OUTPUT_TYPES = {
    "string": "string",
    "long": "int64",
    "bigint": "int64",
    "int": "int32",
    "integer": "int32",
    "double": "double",
    "boolean": "boolean",
}
#: the columns Rescaler's own tables carry beside the user's: every task's rows, a
#: pre-aggregated fragment's (workers.partials), a held row's clock, an initial state's
INTERNAL_COLUMNS = frozenset(
    {"kind", "key", "seq", "info", "src", "vnode", "slot", "_own", "_records"}
    | {"_batch_ms", "_watermark_ms", "_late_ms"}
)
_ESCAPE = "~"


def _internal_name(name: str) -> bool:
    return name in INTERNAL_COLUMNS or (name.startswith("_init") and name[5:].isdigit())


def wire_name(name: str) -> str:
    """What a user's column is called in Rescaler's own tables (the epoch's DataFrame, a task's
    Arrow tables, the stores' recorded outputs, the hold queues): its own name, unless that is
    one of Rescaler's columns or starts with ``~``, then ``~`` and its name. One-to-one, so a
    user's names are all free and never meet Rescaler's."""
    return _ESCAPE + name if _internal_name(name) or name.startswith(_ESCAPE) else name


def user_name(wire: str) -> str:
    """The user's name of a column of Rescaler's tables (the inverse of :func:`wire_name`)."""
    return wire[len(_ESCAPE) :] if wire.startswith(_ESCAPE) else wire


class UnsupportedProcessor(ValueError):
    """The processor uses something Rescaler does not support; the message names it."""


def type_name(schema: Any) -> str:
    """A Spark type's simple name (``bigint``, ``string``, ...)."""
    return str(schema.simpleString() if hasattr(schema, "simpleString") else schema).lower()


_DDL_TYPES = {
    "string": "StringType",
    "long": "LongType",
    "bigint": "LongType",
    "int": "IntegerType",
    "integer": "IntegerType",
    "short": "ShortType",
    "smallint": "ShortType",
    "byte": "ByteType",
    "tinyint": "ByteType",
    "double": "DoubleType",
    "float": "FloatType",
    "real": "FloatType",
    "boolean": "BooleanType",
    "binary": "BinaryType",
    "timestamp": "TimestampType",
    "timestamp_ntz": "TimestampNTZType",
    "date": "DateType",
}


def _top_level_fields(ddl: str) -> list[str]:
    """``a long, b decimal(10,2), c map<string,int>`` -> its three fields."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(ddl):
        depth += ch in "(<"
        depth -= ch in ")>"
        if ch == "," and depth == 0:
            parts.append(ddl[start:i])
            start = i + 1
    parts.append(ddl[start:])
    return parts


def struct_of(schema: Any) -> Any:
    """A state or output schema (StructType or flat DDL string) as a StructType.

    Spark parses DDL in its JVM, which Spark's Python workers and a driver that has not started
    Spark yet do not have; the flat schemas a processor's state and output use are parsed here.
    """
    from pyspark.sql import types as T

    if isinstance(schema, T.StructType):
        return schema
    if not isinstance(schema, str):
        raise UnsupportedProcessor(f"a schema must be a StructType or a DDL string, not {schema!r}")
    fields = []
    for part in _top_level_fields(schema):
        words = part.replace(":", " ").split()
        if len(words) < 2:
            raise UnsupportedProcessor(f"cannot read schema {schema!r}: {part.strip()!r}")
        name, typ = words[0].strip("`"), " ".join(words[1:]).lower()
        nullable = not typ.endswith("not null")
        typ = typ.removesuffix("not null").strip()
        if typ not in _DDL_TYPES:
            raise UnsupportedProcessor(
                f"schema {schema!r}: field {name!r} has type {typ}; Rescaler takes flat schemas "
                f"of {', '.join(sorted(_DDL_TYPES))}"
            )
        fields.append(T.StructField(name, getattr(T, _DDL_TYPES[typ])(), nullable))
    return T.StructType(fields)


def check_plain(what: str, schema: Any) -> Any:
    struct_type = struct_of(schema)
    for f in struct_type.fields:
        name = type_name(f.dataType)
        if name not in _PLAIN_STATE_TYPES:
            raise UnsupportedProcessor(
                f"{what}: field {f.name!r} has type {name}; Rescaler stores state fields of "
                f"types {', '.join(_PLAIN_STATE_TYPES)}"
            )
    return struct_type
