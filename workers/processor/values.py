"""A state variable's values as Spark keeps them: what ``update`` stores and what ``get`` gives.

Under Spark a value the processor stores goes through PySpark's client (numpy and pandas
scalars made Python's, then ``StructType.toInternal``), is pickled to the JVM and read there by
``EvaluatePython.makeFromJava``, which keeps a value only where its Python type is the one the
field's type expects and makes anything else null (an int in a double field, a bool in a long
field, a list in a map field); integers are narrowed as Java narrows them, floats rounded to
32 bits, decimals set to their scale. ``get`` gives ``fromInternal`` of what was kept: top-level
tuples, nested structs as ``Row``, timestamps as naive local datetimes. :func:`converter` does
the same in Python, once per field type, so a processor reads back under Rescaler exactly what
it reads back under Spark; where Spark fails the batch (a decimal too wide, a struct of the
wrong length, a numpy array) the epoch fails with the same reason.
"""

from __future__ import annotations

import decimal
import struct
from collections.abc import Callable
from typing import Any

import msgpack

_INT_BITS = {"ByteType": 8, "ShortType": 16, "IntegerType": 32, "LongType": 64}
_LONG = 1 << 63


def _python(value: Any) -> Any:
    """PySpark's ``normalize_value``: numpy scalars, pandas timestamps and timedeltas as
    Python's own, inside lists, tuples, dicts and Rows too."""
    kind = type(value)
    if kind in (int, str, float, bool) or value is None:
        return value
    module = kind.__module__
    if module == "numpy" or module.startswith("numpy."):
        import numpy as np

        if isinstance(value, np.generic):
            return value.item()
        raise TypeError(
            f"a numpy {kind.__name__} cannot be stored in state (Spark cannot pickle it either): "
            f"store a list, for example value.tolist()"
        )
    if hasattr(value, "_fields") or _is_row(value):
        return type(value)(*[_python(v) for v in value])
    if isinstance(value, list | tuple):
        return type(value)(_python(v) for v in value)
    if isinstance(value, dict):
        return {_python(k): _python(v) for k, v in value.items()}
    if hasattr(value, "to_pytimedelta"):
        return value.to_pytimedelta()
    if hasattr(value, "to_pydatetime"):
        return value.to_pydatetime()
    return value


def _is_row(value: Any) -> bool:
    from pyspark.sql import Row

    return isinstance(value, Row)


def _java_double(value: float) -> str:
    """``Double.toString`` of a Python float, as a string field stores a float under Spark."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if struct.pack(">d", value)[0] & 0x80 else "0.0"
    if 1e-3 <= abs(value) < 1e7:
        return repr(value)
    exact = decimal.Decimal(repr(value))  # the shortest digits that read back as the float
    sign, digits, _ = exact.as_tuple()
    shown = "".join(map(str, digits)).rstrip("0") or "0"
    mantissa = shown[0] + "." + (shown[1:] or "0")
    return f"{'-' if sign else ''}{mantissa}E{exact.adjusted()}"


def _to_string(value: Any) -> str:
    """What the JVM's ``toString`` makes of a value stored in a string field."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _java_double(value)
    if isinstance(value, decimal.Decimal):
        return str(value)  # BigDecimal.toString and Decimal's follow the same rules
    raise TypeError(
        f"a {type(value).__name__} stored in a string field: Spark would store the JVM's "
        f"toString of it, which Rescaler does not imitate; store str(value)"
    )


def converter(data_type: Any) -> Callable[[Any], Any]:
    """The function from a value the processor stores in a field of ``data_type`` to what Spark
    keeps of it (its internal form: micros for timestamps, days for dates, lists for arrays and
    structs, dicts for maps, None for a value of another type)."""
    from pyspark.sql import types as T

    name = type(data_type).__name__
    if name in _INT_BITS:
        bits = _INT_BITS[name]

        def integer(v: Any) -> Any:
            if type(v) is not int or not -_LONG <= v < _LONG:
                return None  # a bool, a float, a BigInteger: null in the JVM
            if bits == 64:
                return v
            half = 1 << (bits - 1)
            return ((v + half) % (1 << bits)) - half  # Java's narrowing

        return integer
    if name == "BooleanType":
        return lambda v: v if type(v) is bool else None
    if name == "DoubleType":
        return lambda v: v if type(v) is float else None
    if name == "FloatType":
        return lambda v: struct.unpack("f", struct.pack("f", v))[0] if type(v) is float else None
    if name == "StringType":
        return lambda v: None if v is None else _to_string(v)
    if name == "BinaryType":

        def binary(v: Any) -> Any:
            if isinstance(v, str):
                return v.encode("utf-8")
            return bytes(v) if isinstance(v, bytes | bytearray) else None

        return binary
    if isinstance(data_type, T.DecimalType):
        precision, scale = data_type.precision, data_type.scale
        quantum = decimal.Decimal(1).scaleb(-scale)

        def as_decimal(v: Any) -> Any:
            if not isinstance(v, decimal.Decimal):
                return None
            if not v.is_finite():
                raise ValueError(f"{v} cannot be stored in a decimal({precision},{scale}) field")
            kept = v.quantize(quantum, rounding=decimal.ROUND_HALF_UP, context=_WIDE)
            if len(kept.as_tuple().digits) > precision and kept != 0:
                raise ValueError(
                    f"{v} does not fit in decimal({precision},{scale}) (Spark fails the batch too)"
                )
            return kept

        return as_decimal
    if name in ("DateType", "TimestampType", "TimestampNTZType"):
        to_internal = data_type.toInternal
        return lambda v: None if v is None else to_internal(v)
    if isinstance(data_type, T.ArrayType):
        element = converter(data_type.elementType)

        def array(v: Any) -> Any:
            if isinstance(v, list | tuple):
                return [None if e is None else element(e) for e in v]
            return None

        return array
    if isinstance(data_type, T.MapType):
        key_of, value_of = converter(data_type.keyType), converter(data_type.valueType)

        def mapping(v: Any) -> Any:
            if not isinstance(v, dict):
                if data_type.needConversion() and v is not None:
                    raise TypeError(f"a map field takes a dict, not {type(v).__name__}")
                return None
            out = SparkMap()
            for k, item in v.items():
                if k is None:
                    raise ValueError("a map's key cannot be null (Spark fails the batch too)")
                out[_hashable(key_of(k))] = None if item is None else value_of(item)
            return out

        return mapping
    if isinstance(data_type, T.StructType):
        return struct_converter(data_type, top=False)
    raise TypeError(f"Rescaler does not store state of type {data_type.simpleString()}")


_WIDE = decimal.Context(prec=100)


def struct_converter(schema: Any, *, top: bool) -> Callable[[Any], Any]:
    """A struct's converter (``top``: a state variable's whole value, given as a tuple whose
    items are the fields in order, as Spark's client takes it)."""
    names = [f.name for f in schema.fields]
    fields = [converter(f.dataType) for f in schema.fields]

    def convert(value: Any) -> Any:
        if value is None:
            return None
        if top:
            if not isinstance(value, tuple | list):
                raise TypeError(
                    f"state values are tuples (one item per schema field), not {value!r}"
                )
            if len(value) < len(names):
                raise ValueError(
                    f"{value!r} has {len(value)} items for the {len(names)} fields "
                    f"{', '.join(names)}"
                )
            items = list(value)[: len(names)]  # as Spark's client: zip(fields, value)
        elif isinstance(value, dict):
            items = [value.get(n) for n in names]
        elif _is_row(value) and getattr(value, "__from_dict__", False):
            items = [value[n] for n in names]
        elif isinstance(value, tuple | list):
            items = list(value)
            if len(items) != len(names):
                raise ValueError(
                    f"a struct of {len(names)} fields ({', '.join(names)}) given {len(items)} "
                    f"values (STRUCT_ARRAY_LENGTH_MISMATCH under Spark)"
                )
        elif hasattr(value, "__dict__"):
            items = [value.__dict__.get(n) for n in names]
        else:
            return None
        return [None if v is None else f(_python(v)) for f, v in zip(fields, items)]

    return convert


def _hashable(value: Any) -> Any:
    return tuple(_hashable(v) for v in value) if isinstance(value, list) else value


def reader(schema: Any) -> Callable[[Any], tuple[Any, ...]]:
    """From what :func:`converter` kept of a state value to what Spark's ``get`` gives: a tuple
    of the fields, each ``fromInternal`` (nested structs as ``Row``)."""
    if not schema.needConversion() or not any(_converts(f.dataType) for f in schema.fields):
        return tuple
    from_internal = schema.fromInternal
    return lambda stored: tuple(from_internal(_internal_form(stored, schema)))


def _converts(data_type: Any) -> bool:
    from pyspark.sql import types as T

    return isinstance(
        data_type,
        T.StructType | T.ArrayType | T.MapType | T.DateType | T.TimestampType | T.TimestampNTZType,
    )


def _internal_form(stored: Any, data_type: Any) -> Any:
    """Stored lists back as the tuples and dicts ``fromInternal`` takes."""
    from pyspark.sql import types as T

    if stored is None:
        return None
    if isinstance(data_type, T.StructType):
        return tuple(
            _internal_form(v, f.dataType) for v, f in zip(stored, data_type.fields, strict=True)
        )
    if isinstance(data_type, T.ArrayType):
        return [_internal_form(v, data_type.elementType) for v in stored]
    if isinstance(data_type, T.MapType):
        return {
            _hashable(_internal_form(k, data_type.keyType)): _internal_form(v, data_type.valueType)
            for k, v in stored.items()
        }
    return stored


def store_value(schema: Any) -> Callable[[Any], list[Any]]:
    """A state variable's whole value (a tuple of its fields) as Spark keeps it."""
    convert = struct_converter(schema, top=True)

    def store(value: Any) -> list[Any]:
        kept: list[Any] = convert(_python_top(value))
        return kept

    return store


def _python_top(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_python(v) for v in value]
    return value


class SparkMap(dict):
    """A map field's value as kept: a dict, whose keys may be structs (tuples), which a store
    entry carries as its pairs (:func:`packed`)."""


_DECIMAL, _MAP = 1, 2


def _default(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        return msgpack.ExtType(_DECIMAL, str(value).encode("ascii"))
    if isinstance(value, SparkMap):
        return msgpack.ExtType(_MAP, packed(list(value.items())))
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"cannot store {type(value).__name__} in a processor's state")


def _ext(code: int, data: bytes) -> Any:
    if code == _DECIMAL:
        return decimal.Decimal(data.decode("ascii"))
    if code == _MAP:
        return SparkMap((_hashable(k), v) for k, v in unpacked(data))
    return msgpack.ExtType(code, data)


def packed(body: Any) -> bytes:
    """A key's state as its store entry holds it: msgpack, decimals and maps as extensions."""
    data: bytes = msgpack.packb(body, use_bin_type=True, strict_types=True, default=_default)
    return data


def unpacked(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=_ext)


def jsonable(stored: Any) -> Any:
    """A stored value as the key finder shows it in JSON: as kept (timestamps in microseconds,
    dates in days), decimals as strings, binaries in base64, maps as ``[key, value]`` pairs."""
    if isinstance(stored, dict):
        return [[jsonable(k), jsonable(v)] for k, v in stored.items()]
    if isinstance(stored, list | tuple):
        return [jsonable(v) for v in stored]
    if isinstance(stored, decimal.Decimal):
        return str(stored)
    if isinstance(stored, bytes):
        import base64

        return base64.b64encode(stored).decode("ascii")
    return stored
