"""What a processor's state keeps of a value and gives back, as Spark does (the compatibility
suite's every-type case checks the same against Spark itself), and Spark's DDL read without
its JVM."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd
import pytest
from pyspark.sql import Row
from pyspark.sql import types as T

from workers.processor.ddl import DDLError, parse_schema
from workers.processor.state import KeyState
from workers.processor.values import packed, reader, store_value, unpacked


def kept(ddl: str, value: tuple[Any, ...]) -> tuple[Any, ...]:
    """What ``get`` gives after ``update(value)``, through a store entry's bytes."""
    schema = parse_schema(ddl)
    stored = unpacked(packed(store_value(schema)(value)))
    return reader(schema)(stored)


@pytest.mark.parametrize(
    ("ddl", "value", "expected"),
    [
        ("n long", (5,), (5,)),
        ("n long", (True,), (None,)),  # a bool is Java's Boolean: null in a long field
        ("n long", (2**70,), (None,)),  # a BigInteger: null
        ("n double", (5,), (None,)),  # an int is not a Double: null
        ("n double", (np.float64(1.5),), (1.5,)),  # numpy scalars are made Python's first
        ("n float", (1.1,), (1.100000023841858,)),  # 32 bits
        ("n tinyint", (300,), (44,)),  # Java narrows
        ("n int", (2**40 + 7,), (7,)),
        ("s string", (12,), ("12",)),  # Java's toString
        ("s string", (1e20,), ("1.0E20",)),
        ("s string", (False,), ("false",)),
        ("b binary", ("hé",), ("hé".encode(),)),
        ("d decimal(10,2)", (Decimal("1.005"),), (Decimal("1.01"),)),  # set to its scale
        ("d decimal(10,2)", (1,), (None,)),
        (
            "t timestamp",
            (dt.datetime(2024, 1, 2, 3, 4, 5, 6),),
            (dt.datetime(2024, 1, 2, 3, 4, 5, 6),),
        ),
        (
            "t timestamp",
            (pd.Timestamp("2024-01-02 03:04:05.000006"),),
            (dt.datetime(2024, 1, 2, 3, 4, 5, 6),),
        ),
        ("d date", (dt.date(1960, 5, 6),), (dt.date(1960, 5, 6),)),
        ("a array<int>", ([1, None, 3],), ([1, None, 3],)),
        ("a array<int>", ("123",), (None,)),
        ("m map<string,int>", ({"x": 1},), ({"x": 1},)),
        ("m map<string,int>", ([("x", 1)],), (None,)),  # not a dict: null, as Spark keeps it
        ("p struct<x: int, y: string>", ({"x": 1, "y": "q"},), (Row(x=1, y="q"),)),
        ("p struct<x: int, y: string>", ((1, "q"),), (Row(x=1, y="q"),)),
        (
            "m map<struct<a: int>, array<decimal(4,1)>>",
            ({(1,): [Decimal("2.25")]},),
            ({Row(a=1): [Decimal("2.3")]},),
        ),
        ("a long, b string", (1, "x", "extra"), (1, "x")),  # as Spark's client: zip
    ],
)
def test_a_stored_value_reads_back_as_under_spark(
    ddl: str, value: tuple[Any, ...], expected: tuple[Any, ...]
) -> None:
    assert kept(ddl, value) == expected


@pytest.mark.parametrize(
    ("ddl", "value", "message"),
    [
        ("d decimal(4,2)", (Decimal("123.4"),), "does not fit in decimal"),
        ("p struct<x: int, y: string>", ((1,),), "STRUCT_ARRAY_LENGTH_MISMATCH"),
        ("a array<int>", (np.array([1, 2]),), "cannot be stored in state"),
        ("a long, b string", (1,), "has 1 items for the 2 fields"),
        ("s string", ([1],), "store str"),
    ],
)
def test_what_fails_a_batch_under_spark_fails_the_epoch(
    ddl: str, value: tuple[Any, ...], message: str
) -> None:
    with pytest.raises((TypeError, ValueError), match=message):
        kept(ddl, value)


def test_a_key_s_state_with_decimals_and_struct_keyed_maps_round_trips() -> None:
    schema = parse_schema("m map<struct<a: int, b: string>, decimal(6,2)>")
    value = store_value(schema)(({(1, "x"): Decimal("3.5")},))
    state = KeyState({"v": [value, None]}, {}, {}, {5})
    again = KeyState.decode(state.encode())
    assert again.timers == {5}
    assert reader(schema)(again.values["v"][0]) == ({Row(a=1, b="x"): Decimal("3.50")},)


def test_spark_s_ddl_is_read_without_its_jvm() -> None:
    assert parse_schema(
        "`a b` LONG NOT NULL, t: timestamp_ntz, d DEC(5, 1), c char(3), "
        "m map<string, array<struct<x: int, `y`: binary>>> comment 'x'"
    ) == T.StructType(
        [
            T.StructField("a b", T.LongType(), False),
            T.StructField("t", T.TimestampNTZType()),
            T.StructField("d", T.DecimalType(5, 1)),
            T.StructField("c", T.StringType()),
            T.StructField(
                "m",
                T.MapType(
                    T.StringType(),
                    T.ArrayType(
                        T.StructType(
                            [
                                T.StructField("x", T.IntegerType()),
                                T.StructField("y", T.BinaryType()),
                            ]
                        )
                    ),
                ),
            ),
        ]
    )
    assert parse_schema("struct<a: int>") == T.StructType([T.StructField("a", T.IntegerType())])
    assert parse_schema("d decimal") == T.StructType([T.StructField("d", T.DecimalType(10, 0))])
    with pytest.raises(DDLError, match="expected '>'"):
        parse_schema("a array<int")
    with pytest.raises(DDLError, match="unexpected"):
        parse_schema("a int b")
