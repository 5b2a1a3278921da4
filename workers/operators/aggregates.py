"""The built-in decomposable operators: counts, sums, minima, maxima, means and the clickstream's
page statistics.

None of them depends on record order: each declares its ``aggregates``, so the engine folds a
key's records into one partial row (in Spark or in the task, ``workers.partials``) before
``update``, and each keeps a few numbers in a :class:`~workers.operators.base.FixedForm`, which
the vectorised epoch reads and writes a whole column at a time (``workers.vectorised.numeric``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from workers.operators.base import FixedForm, KeyedOperator, Output, Record


class Count(KeyedOperator):
    """Records per key."""

    name = "count"
    order_sensitive = False
    output_fields = (("count", "int64"),)
    form = FixedForm(1, "i")
    aggregates = (("seq", "count"),)

    def update(self, key: str, state: Any, records: Sequence[Record]) -> tuple[Any, list[Output]]:
        new = (state or 0) + records[0][0]
        return new, [(key, new)]

    def encode(self, state: Any) -> bytes:
        return self.form.pack(state)


def canonical_nan(value: float) -> float:
    """Every NaN as the one quiet NaN Python makes. IEEE 754 leaves the sign and payload of a
    NaN produced by arithmetic (inf - inf) unspecified, and Arrow's SIMD sums produce either
    sign from run to run: without this, a replayed or vectorised epoch could store other bytes
    for the same value (the vectorised path does the same, ``workers.vectorised.numeric``)."""
    return float("nan") if value != value else value


class _ColumnAggregate(KeyedOperator):
    """Sum/min/max of one numeric column per key, combined in Arrow first."""

    agg: ClassVar[str] = ""
    order_sensitive = False
    form = FixedForm(1, "f")

    def __init__(self, column: str) -> None:
        self.column = column
        self.columns = (column,)  # type: ignore[misc]
        self.output_fields = ((self.agg, "double"),)  # type: ignore[misc]
        self.aggregates = ((column, self.agg),)

    def encode(self, state: Any) -> bytes:
        return self.form.pack(state)

    def _fold(self, state: float, part: float) -> float:
        raise NotImplementedError

    def update(self, key: str, state: Any, records: Sequence[Record]) -> tuple[Any, list[Output]]:
        part = float(records[0][0])
        new = canonical_nan(part if state is None else self._fold(state, part))
        return new, [(key, new)]

    def describe(self) -> str:
        return f"{self.name}({self.column})"


class Sum(_ColumnAggregate):
    name = "sum"
    agg = "sum"

    def _fold(self, state: float, part: float) -> float:
        return state + part


class Min(_ColumnAggregate):
    name = "min"
    agg = "min"

    def _fold(self, state: float, part: float) -> float:
        return min(state, part)


class Max(_ColumnAggregate):
    name = "max"
    agg = "max"

    def _fold(self, state: float, part: float) -> float:
        return max(state, part)


class Mean(KeyedOperator):
    """Running mean of a column: state is [sum, count]."""

    name = "mean"
    order_sensitive = False
    form = FixedForm(1, "fi")

    def __init__(self, column: str) -> None:
        self.column = column
        self.columns = (column,)  # type: ignore[misc]
        self.output_fields = (("mean", "double"),)  # type: ignore[misc]
        self.aggregates = ((column, "sum"), (column, "count"))

    def encode(self, state: Any) -> bytes:
        return self.form.pack(*state)

    def update(self, key: str, state: Any, records: Sequence[Record]) -> tuple[Any, list[Output]]:
        total, count = state or (0.0, 0)
        total = canonical_nan(total + float(records[0][0]))
        count = count + int(records[0][1])
        return [total, count], [(key, total / count)]

    def to_json(self, state: Any) -> Any:
        total, count = state
        return {"sum": total, "count": count, "mean": total / count}

    def describe(self) -> str:
        return f"mean({self.column})"


class PageStats(KeyedOperator):
    """Clickstream, keyed by page: views and unique users (from UserActivity's first visits)."""

    name = "page_stats"
    order_sensitive = False
    columns = ("first_visit",)
    output_fields = (("views", "int64"), ("unique_users", "int64"))
    form = FixedForm(1, "ii")
    aggregates = (("seq", "count"), ("first_visit", "sum"))

    def encode(self, state: Any) -> bytes:
        return self.form.pack(*state)

    def update(self, key: str, state: Any, records: Sequence[Record]) -> tuple[Any, list[Output]]:
        views, uniques = state or (0, 0)
        views, uniques = views + int(records[0][0]), uniques + int(records[0][1])
        return [views, uniques], [(key, views, uniques)]

    def to_json(self, state: Any) -> Any:
        return {"views": state[0], "unique_users": state[1]}
