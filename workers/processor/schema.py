"""What a processor's state and outputs may be: Spark's types, read from a StructType or DDL
without Spark's JVM (``workers.processor.ddl``), and the refusal every unsupported use raises."""

from __future__ import annotations

from typing import Any

TIME_MODES = ("none", "processingtime", "eventtime")
INTERFACES = ("row", "pandas")
#: Spark's types a processor's state and outputs may have (nested ones: of these)
SUPPORTED_TYPES = (
    "string, long/bigint, int/integer, short/smallint, byte/tinyint, double, float/real, "
    "boolean, binary, decimal(p,s), date, timestamp, timestamp_ntz, array<...>, map<...,...>, "
    "struct<...>"
)
#: output types whose values go from a processor's rows to Arrow without Spark's conversions
_SIMPLE_OUTPUTS = ("StringType", "LongType", "IntegerType", "DoubleType", "BooleanType")
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


def struct_of(schema: Any) -> Any:
    """A state or output schema (StructType or DDL string) as a StructType, read as Spark reads
    it (``workers.processor.ddl``: without the JVM, which Spark's Python workers lack)."""
    from pyspark.sql import types as T

    from workers.processor.ddl import DDLError, parse_schema

    if isinstance(schema, T.StructType):
        return schema
    if not isinstance(schema, str):
        raise UnsupportedProcessor(f"a schema must be a StructType or a DDL string, not {schema!r}")
    try:
        return parse_schema(schema)
    except DDLError as exc:
        raise UnsupportedProcessor(f"{exc}; Rescaler takes {SUPPORTED_TYPES}") from exc


def unsupported_type(data_type: Any) -> str | None:
    """The simple name of the first type in ``data_type`` Rescaler does not carry (an interval,
    a variant, ...), or None."""
    from pyspark.sql import types as T

    if isinstance(data_type, T.StructType):
        return next((u for f in data_type.fields if (u := unsupported_type(f.dataType))), None)
    if isinstance(data_type, T.ArrayType):
        return unsupported_type(data_type.elementType)
    if isinstance(data_type, T.MapType):
        return unsupported_type(data_type.keyType) or unsupported_type(data_type.valueType)
    atomic = (
        T.StringType, T.LongType, T.IntegerType, T.ShortType, T.ByteType, T.DoubleType,
        T.FloatType, T.BooleanType, T.BinaryType, T.DecimalType, T.DateType, T.TimestampType,
        T.TimestampNTZType,
    )  # fmt: skip
    return None if isinstance(data_type, atomic) else type_name(data_type)


def check_state(what: str, schema: Any) -> Any:
    """A state variable's schema, refused at start-up if it holds a type Rescaler does not."""
    struct_type = struct_of(schema)
    for f in struct_type.fields:
        bad = unsupported_type(f.dataType)
        if bad is not None:
            raise UnsupportedProcessor(
                f"{what}: field {f.name!r} has type {bad}; Rescaler stores state of types "
                f"{SUPPORTED_TYPES}"
            )
    return struct_type


def output_arrow_type(field: Any) -> Any:
    """An output column's Arrow type, as Spark's ``transformWithState`` converts it
    (``to_arrow_type``, timestamps in UTC); UnsupportedProcessor for a type Rescaler does not
    carry."""
    from pyspark.sql.pandas.types import to_arrow_type

    bad = unsupported_type(field.dataType)
    if bad is not None:
        raise UnsupportedProcessor(
            f"output column {field.name!r} has type {bad}; outputs may be {SUPPORTED_TYPES}"
        )
    return to_arrow_type(field.dataType, timezone="UTC")


def simple_output(field: Any) -> bool:
    """Whether an output column's values reach Arrow as they are (no Spark conversion)."""
    return type(field.dataType).__name__ in _SIMPLE_OUTPUTS
