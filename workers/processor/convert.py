"""Spark's own conversions around a processor: its input rows as Spark 4's workers build them
(``Row``s of ``as_py`` values, or Spark's ``to_pandas`` frames) and its outputs as they convert
them back to Arrow (``asDict`` for Rows, ``PandasToArrowConversion`` for frames)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from workers.processor.operator import ProcessorOperator
from workers.processor.schema import wire_name


def inputs_of(op: ProcessorOperator, ordered: pa.Table) -> Any:
    """The function from a key and its rows' positions to what ``handleInputRows`` gets, as
    Spark hands it over: ``Row``s of each column's Python values (``as_py``: structs as
    dicts, maps as lists of pairs) or one pandas frame (Spark's ``to_pandas`` of the
    rows)."""
    names = list(op.columns)
    key_column = op.key_column
    table = pa.table(
        {
            c: ordered.column("key") if c == key_column else ordered.column(wire_name(c))
            for c in names
        }
    )
    if op.interface == "pandas":
        frame = spark_frame(table, op.timezone)

        def frames(key: str, rows: list[int]) -> Iterator[Any]:
            return iter([frame.take(rows).reset_index(drop=True)])

        return frames
    from pyspark.sql import Row

    values = [table.column(c).to_pylist() for c in names]
    data_row = Row(*names)

    def spark_rows_of(key: str, rows: list[int]) -> Iterator[Any]:
        return iter([data_row(*(column[i] for column in values)) for i in rows])

    return spark_rows_of


def frame_rows(frame: Any, op: ProcessorOperator) -> list[tuple[Any, ...]]:
    """A pandas processor's output frame as rows of Python values: column by column where
    every output type is one Arrow takes as it is, else through Spark's own conversion
    (``PandasToArrowConversion``: timestamps in the session's time zone, nested types)."""
    names = [f.name for f in op.output_struct.fields]
    if op.simple_outputs:
        cols = [frame[n].tolist() if n in frame.columns else [None] * len(frame) for n in names]
        return [tuple(row) for row in zip(*cols, strict=True)]
    from pyspark.sql.conversion import PandasToArrowConversion
    from pyspark.sql.types import StructField, StructType

    batch = PandasToArrowConversion.convert(
        [frame],
        StructType([StructField("_0", op.output_struct)]),
        timezone=op.timezone,
        safecheck=False,
        arrow_cast=True,
        assign_cols_by_name=True,
    )
    values = batch.column(0).to_pylist()
    return [tuple(v.get(n) for n in names) for v in values]


def spark_rows(table: pa.Table) -> list[Any]:
    """A table's rows as PySpark's ``transformWithState`` gives them to a processor: ``Row``s
    of each column's ``as_py`` value (nested structs as dicts, maps as lists of pairs)."""
    from pyspark.sql import Row

    data_row = Row(*table.column_names)
    return [data_row(*row.values()) for row in table.to_pylist()]


def spark_frame(table: pa.Table, timezone: str) -> Any:
    """A table as the pandas frame ``transformWithStateInPandas`` gives a processor: Spark's
    ``to_pandas`` of its columns (timestamps naive in the session's time zone, arrays as numpy
    arrays, maps and structs as dicts), each column's dtype then as Spark's frame of one key's
    rows has it (it is rebuilt from Python values: narrow ints and floats widen to 64 bits)."""
    import pandas as pd  # type: ignore[import-untyped]
    from pyspark.sql.conversion import ArrowBatchTransformer

    series = ArrowBatchTransformer.to_pandas(table, timezone=timezone)
    frame = pd.concat(series, axis=1) if series else pd.DataFrame(index=range(table.num_rows))
    frame.columns = table.column_names
    for name, dtype in frame.dtypes.items():
        if dtype.kind in "iu" and dtype.itemsize < 8:
            frame[name] = frame[name].astype("int64")
        elif dtype.kind == "f" and dtype.itemsize < 8:
            frame[name] = frame[name].astype("float64")
    return frame
