"""Spark's DDL for a processor's schemas (``"n long, tags array<string>, at timestamp"``), read
without Spark's JVM, which Spark's Python workers and a driver that has not started Spark yet do
not have: the same grammar as Spark's ``StructType.fromDDL`` for the types a processor can use,
nested ones included."""

from __future__ import annotations

import re
from typing import Any

#: Spark's names of each atomic type, as its DDL parser takes them (case-insensitive)
_ATOMIC = {
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
    "timestamp_ltz": "TimestampType",
    "timestamp_ntz": "TimestampNTZType",
    "date": "DateType",
}
_DECIMALS = ("decimal", "dec", "numeric")
_TOKEN = re.compile(r"\s*(`(?:[^`]|``)*`|[A-Za-z_][A-Za-z0-9_]*|\d+|'(?:[^'\\]|\\.)*'|[<>(),:])")


class DDLError(ValueError):
    """The schema is not DDL Spark reads; the message says where."""


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[str] = []
        at = 0
        while at < len(text):
            if text[at:].strip() == "":
                break
            m = _TOKEN.match(text, at)
            if m is None:
                raise DDLError(f"cannot read schema {text!r} at {text[at:].strip()[:20]!r}")
            self.tokens.append(m.group(1))
            at = m.end()
        self.at = 0

    def peek(self) -> str | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None or (expected is not None and token.lower() != expected):
            found = "the end" if token is None else repr(token)
            want = repr(expected) if expected else "more"
            raise DDLError(f"cannot read schema {self.text!r}: expected {want}, found {found}")
        self.at += 1
        return token

    def name(self) -> str:
        token = self.take()
        if token.startswith("`"):
            return token[1:-1].replace("``", "`")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", token):
            raise DDLError(f"cannot read schema {self.text!r}: {token!r} is not a column name")
        return token

    def number(self) -> int:
        token = self.peek()
        if token is None or not token.isdigit():
            found = "the end" if token is None else repr(token)
            raise DDLError(f"cannot read schema {self.text!r}: expected a number, found {found}")
        self.at += 1
        return int(token)

    def data_type(self) -> Any:
        from pyspark.sql import types as T

        word = self.take().lower()
        if word in _ATOMIC:
            return getattr(T, _ATOMIC[word])()
        if word in ("char", "varchar"):  # Spark's schemas read them as strings
            self.take("(")
            self.number()
            self.take(")")
            return T.StringType()
        if word in _DECIMALS:
            precision, scale = 10, 0
            if self.peek() == "(":
                self.take("(")
                precision = self.number()
                if self.peek() == ",":
                    self.take(",")
                    scale = self.number()
                self.take(")")
            return T.DecimalType(precision, scale)
        if word == "array":
            self.take("<")
            element = self.data_type()
            self.take(">")
            return T.ArrayType(element, True)
        if word == "map":
            self.take("<")
            key = self.data_type()
            self.take(",")
            value = self.data_type()
            self.take(">")
            return T.MapType(key, value, True)
        if word == "struct":
            self.take("<")
            fields = [] if self.peek() == ">" else self.fields(nested=True)
            self.take(">")
            return T.StructType(fields)
        raise DDLError(f"schema {self.text!r}: {word!r} is not a Spark SQL type Rescaler reads")

    def fields(self, *, nested: bool) -> list[Any]:
        from pyspark.sql import types as T

        out = []
        while True:
            name = self.name()
            if self.peek() == ":":
                self.take(":")
            typ = self.data_type()
            nullable = True
            if (self.peek() or "").lower() == "not":
                self.take("not")
                self.take("null")
                nullable = False
            if (self.peek() or "").lower() == "comment":
                self.take("comment")
                self.take()
            out.append(T.StructField(name, typ, nullable))
            if self.peek() != ",":
                return out
            self.take(",")


def parse_schema(text: str) -> Any:
    """A DDL schema (``"a long, b struct<c: int, d: string>"``; ``struct<...>`` around it is
    allowed too) as Spark's ``StructType``."""
    parser = _Parser(text)
    if (
        (parser.peek() or "").lower() == "struct"
        and len(parser.tokens) > 1
        and (parser.tokens[1] == "<")
    ):
        schema = parser.data_type()
    else:
        from pyspark.sql import types as T

        schema = T.StructType(parser.fields(nested=False)) if parser.tokens else T.StructType()
    if parser.peek() is not None:
        raise DDLError(f"cannot read schema {text!r}: unexpected {parser.peek()!r}")
    return schema
