"""The operator contract: what a keyed stateful operator is, how its state is encoded, and the
fixed-width form the built-in numeric operators write (``workers.operators``, the package's
docstring, says how to write one).

State is serialized as one version byte followed by msgpack, so it is compact and a future
encoding can read an old one. The built-in operators also run vectorised (``workers.vectorised``:
a whole epoch slice on arrays), so their encodings are laid out for arrays: the numeric ones
write msgpack's fixed-width forms (:class:`FixedForm`, still version 1: any msgpack reader reads
them), ``UserActivity`` a columnar layout of its own (``workers.operators.ordered``).
"""

from __future__ import annotations

import struct
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

import msgpack
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from workers.columnar import binary_from_parts, binary_parts, gather_segments
from workers.partials import aggregates_of, column_name, fold

Record = tuple[Any, ...]
Output = tuple[Any, ...]  # (output key, *output_fields)
#: the Arrow type of each name a built-in operator's output field may have
ARROW_TYPES = {
    "int64": pa.int64(),
    "double": pa.float64(),
    "string": pa.string(),
    "int32": pa.int32(),
    "boolean": pa.bool_(),
}


def arrow_type(typ: str | pa.DataType) -> pa.DataType:
    """An output field's Arrow type: a built-in operator's names one of ``ARROW_TYPES``, a
    processor's is an Arrow type already (any of Spark's, nested included)."""
    return typ if isinstance(typ, pa.DataType) else ARROW_TYPES[typ]


class OperatorError(Exception):
    """Base class of operator failures."""


class StateVersionError(OperatorError):
    """Stored state was written by an encoding this operator cannot read."""


class KeyedOperator(ABC):
    """A keyed stateful operator. Subclasses set the class attributes and implement update."""

    name: ClassVar[str] = ""
    state_version: ClassVar[int] = 1
    #: record columns the operator reads, besides the key and the sequence number
    columns: ClassVar[tuple[str, ...]] = ()
    #: (name, type) of each emitted field after the output key: a name of ``ARROW_TYPES``, or
    #: an Arrow type (:func:`arrow_type`)
    output_fields: ClassVar[tuple[tuple[str, str | pa.DataType], ...]] = ()
    #: whether a record's position matters (records then arrive in source order, uncombined)
    order_sensitive: ClassVar[bool] = True
    #: decomposable aggregates of a key's records, (column, function) with function one of
    #: count, sum, min, max. Declared by an operator that is not order-sensitive, they let the
    #: engine fold records per key in Spark as well as in the task (``workers.partials``);
    #: ``update`` then receives one row of them, in this order.
    aggregates: tuple[tuple[str, str], ...] = ()

    def combine(self, table: pa.Table) -> pa.Table | None:
        """Pre-aggregate one epoch's records per key in Arrow (columns: key + partials).

        The default folds the declared ``aggregates``; None (no aggregates, or order-sensitive)
        when the operator needs every record in order. Override it only in an operator without
        ``aggregates`` (the engine folds declared aggregates itself, and cannot merge what an
        override returns); it runs in the task.
        """
        aggregates = aggregates_of(self)
        if not aggregates:
            return None
        folded = fold(table, aggregates)
        return folded.select(["key", *(column_name(c, f) for c, f in aggregates)])

    @abstractmethod
    def update(self, key: str, state: Any, records: Sequence[Record]) -> tuple[Any, list[Output]]:
        """Fold the key's records (or its one combined row) into its state."""

    def to_json(self, state: Any) -> Any:
        """The state as operators and the API show it."""
        return state

    def sink_table(self, outputs: pa.Table) -> pa.Table:
        """The epoch's outputs as the sink gets them: ``key``, ``seq`` and the output fields."""
        return outputs

    def encode(self, state: Any) -> bytes:
        packed: bytes = msgpack.packb(state, use_bin_type=True)
        return bytes([self.state_version]) + packed

    def decode(self, data: bytes) -> Any:
        if data[0] != self.state_version:
            raise StateVersionError(
                f"{self.name}: state version {data[0]} stored, this operator reads "
                f"{self.state_version}"
            )
        return msgpack.unpackb(data[1:], raw=False, strict_map_key=False)

    def describe(self) -> str:
        return self.name


class FixedForm:
    """A state of a few int64/float64 numbers in msgpack's fixed-width forms.

    msgpack writes small integers in one byte and larger ones in 3, 5 or 9, so a column of
    compact values has no fixed stride. Always writing the 9-byte forms (``0xd3`` int 64,
    ``0xcb`` float 64, inside a ``fixarray`` when there are several) keeps the value valid
    msgpack that any reader (``KeyedOperator.decode``, older code) reads as before, and gives every
    value of an operator one width, so numpy reads a whole column of them as one record array.
    """

    _TAGS = {"i": 0xD3, "f": 0xCB}
    _TYPES = {"i": ">i8", "f": ">f8"}

    def __init__(self, version: int, kinds: str) -> None:
        """``kinds``: one letter per number, ``i`` (int64) or ``f`` (float64)."""
        self.version = version
        self.kinds = kinds
        fields: list[tuple[str, str]] = [("version", "u1")]
        codes = ">B"
        self.prefix: tuple[int, ...] = (version,)
        if len(kinds) > 1:
            fields.append(("array", "u1"))
            codes += "B"
            self.prefix += (0x90 | len(kinds),)
        for i, kind in enumerate(kinds):
            fields += [(f"tag{i}", "u1"), (f"v{i}", self._TYPES[kind])]
            codes += "Bq" if kind == "i" else "Bd"
        self.dtype = np.dtype(fields)
        self.struct = struct.Struct(codes)

    def pack(self, *values: float) -> bytes:
        """One state's bytes (the per-key path's encoding)."""
        args: list[Any] = list(self.prefix)
        for kind, value in zip(self.kinds, values, strict=True):
            args += [self._TAGS[kind], value]
        return self.struct.pack(*args)

    def pack_columns(self, columns: Sequence[np.ndarray]) -> pa.LargeBinaryArray:
        """The states of a batch of keys, one per row of ``columns``, as the bytes of :meth:`pack`."""
        n = len(columns[0])
        rows = np.empty(n, self.dtype)
        rows["version"] = self.version
        if len(self.kinds) > 1:
            rows["array"] = self.prefix[1]
        for i, (kind, column) in enumerate(zip(self.kinds, columns, strict=True)):
            rows[f"tag{i}"] = self._TAGS[kind]
            rows[f"v{i}"] = column
        return binary_from_parts(np.full(n, self.dtype.itemsize, np.int64), rows.view(np.uint8))

    def unpack_columns(self, values: pa.Array) -> tuple[np.ndarray, list[np.ndarray]]:
        """(in_form, columns): which values are in this fixed form, and their numbers.

        Null values and values in another form (msgpack's compact forms, written before the
        fixed form existed) are not in the form; their rows of ``columns`` are zero.
        """
        n = len(values)
        offsets, data = binary_parts(values)
        size = self.dtype.itemsize
        in_form = np.asarray(values.is_valid(), bool) & (np.diff(offsets) == size)
        rows = np.zeros(n, self.dtype)
        candidates = np.flatnonzero(in_form)
        if len(candidates):
            raw = gather_segments(data, offsets[candidates], np.full(len(candidates), size))
            found = raw.view(self.dtype)
            ok = found["version"] == self.version
            if len(self.kinds) > 1:
                ok &= found["array"] == self.prefix[1]
            for i, kind in enumerate(self.kinds):
                ok &= found[f"tag{i}"] == self._TAGS[kind]
            in_form[candidates[~ok]] = False
            rows[candidates[ok]] = found[ok]
        native = {"i": np.int64, "f": np.float64}
        return in_form, [rows[f"v{i}"].astype(native[k]) for i, k in enumerate(self.kinds)]


def sort_by_seq(table: pa.Table) -> pa.Table:
    """Records in source order (the sequence number is global and increasing)."""
    return table.take(pc.sort_indices(table, sort_keys=[("seq", "ascending")]))
