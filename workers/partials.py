"""Pre-aggregation: an epoch's records folded per key in Spark before they reach Python.

With ``RunnerConfig.preaggregate`` (``--preaggregate``), an operator that is not
order-sensitive and declares ``aggregates`` (``(column, function)`` pairs, the functions being
``count``, ``sum``, ``min`` and ``max``) has each PU's records of an epoch folded per key in
Spark SQL after the shuffle to the PUs, in the PU's own partition (a grouping that includes the
slot needs no exchange of its own), before the hand-off to the task. The task then receives
*partial rows*, one per key, and merges them (count → sum, sum → sum, min → min, max → max) as
it folds records. It is off by default: docs/data-plane.md, "Pre-aggregation", has what it was
measured to cost and save.

A partial row carries:

* ``key``, ``vnode`` and the routing columns, as a record does;
* ``seq``: the largest sequence number folded into it (what the key's output carries);
* ``src``: the source rows among them (the runner's per-epoch source count);
* ``_records``: how many records it folds (the PU's load and its hold queue's counts);
* one column per aggregate, named ``{column}_{function}`` as Arrow names its aggregates;
* the pipeline's event-time column, if it has one: the largest (the watermark's input).

Pre-aggregation is used only where it gives the same bits as folding every record on the PU:
counts always, sums, minima and maxima of integer columns (integer addition is associative).
A float column keeps the record path: a float sum depends on the order of its additions, and
Spark and Arrow order NaN differently.

Held rows of a pre-aggregated fragment are partial rows, and so is what their hold queue
replays. Rows of both forms can meet on one PU (a hold queue written before a restart that
turned pre-aggregation on or off): :func:`as_partials` makes record rows partial rows, which
are then merged like any other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

#: the column of a partial row counting the records it folds
RECORDS = "_records"
#: how partial aggregates of each function merge
MERGE = {"count": "sum", "sum": "sum", "min": "min", "max": "max"}
#: Spark SQL types whose sums, minima and maxima do not depend on the grouping
_INTEGRAL = frozenset({"tinyint", "smallint", "int", "bigint"})

Aggregates = Sequence[tuple[str, str]]


class PartialRowsError(Exception):
    """Partial rows reached an operator that cannot merge them."""


def column_name(column: str, function: str) -> str:
    """A partial aggregate's column, named as Arrow names an aggregate's output."""
    return f"{column}_{function}"


def aggregates_of(operator: object) -> Aggregates:
    """The operator's declared aggregates; () if it declares none or is order-sensitive."""
    if getattr(operator, "order_sensitive", True):
        return ()
    aggregates: Aggregates = tuple(getattr(operator, "aggregates", ()))
    return aggregates


def aggregates_for_partials(operator: object, where: str) -> Aggregates:
    """The aggregates that merge partial rows reaching ``operator``; PartialRowsError if it has
    none (``where``: what the message names first)."""
    aggregates = aggregates_of(operator)
    if not aggregates:
        describe = getattr(operator, "describe", lambda: type(operator).__name__)
        raise PartialRowsError(
            f"{where}: partial rows reached {describe()}, which declares no aggregates (was the "
            f"operator changed during a rescale?)"
        )
    return aggregates


def refusal(operator: object, types: Mapping[str, str]) -> str | None:
    """Why the operator's records are not pre-aggregated (None: they are). ``types``: the
    Spark SQL type (``simpleString``) of each column reaching the fragment."""
    aggregates = aggregates_of(operator)
    if not aggregates:
        return "the operator declares no aggregates, or is order-sensitive"
    for column, function in aggregates:
        if function not in MERGE:
            return f"aggregate {function}({column}) is not one of {', '.join(MERGE)}"
        if column not in types:
            return f"aggregate {function}({column}): no such column"
        if function != "count" and types[column] not in _INTEGRAL:
            return f"aggregate {function}({column}) over {types[column]} depends on the grouping"
    return None


def spark_aggregations(aggregates: Aggregates, event_time: str | None = None) -> list[str]:
    """The Spark SQL aggregate expressions making a partial row of a group of records; with
    the pipeline's ``event_time`` column, its largest value too (what the watermark reads)."""
    return [
        "max(seq) AS seq",
        "sum(src) AS src",
        f"count(1) AS {RECORDS}",
        *(
            f"{function}(`{column}`) AS `{column_name(column, function)}`"
            for column, function in aggregates
        ),
        *([f"max(`{event_time}`) AS `{event_time}`"] if event_time else []),
    ]


def is_partial(table: pa.Table) -> bool:
    return RECORDS in table.column_names


def records_in(table: pa.Table | None) -> int:
    """How many records the rows stand for (a partial row: those it folds)."""
    if table is None or table.num_rows == 0:
        return 0
    if is_partial(table):
        total: int = pc.sum(table.column(RECORDS)).as_py() or 0
        return total
    return int(table.num_rows)


def records_per_vnode(table: pa.Table) -> dict[int, int]:
    """vnode → the records its rows stand for."""
    if is_partial(table):
        counts = table.group_by("vnode").aggregate([(RECORDS, "sum")])
        return dict(
            zip(counts.column("vnode").to_pylist(), counts.column(f"{RECORDS}_sum").to_pylist())
        )
    found = pc.value_counts(table.column("vnode"))  # a row per record: count the rows
    return dict(zip(found.field("values").to_pylist(), found.field("counts").to_pylist()))


def partial_columns(aggregates: Aggregates) -> list[str]:
    """The columns of a partial row besides the routing ones, in a fixed order."""
    return ["key", "seq", "vnode", "src", RECORDS, *(column_name(c, f) for c, f in aggregates)]


def as_partials(records: pa.Table, aggregates: Aggregates) -> pa.Table:
    """Record rows (key, seq, vnode, src, the aggregated columns) as one partial row each."""
    n = records.num_rows
    columns: dict[str, pa.Array | pa.ChunkedArray] = {
        "key": records.column("key"),
        "seq": pc.cast(records.column("seq"), pa.int64()),
        "vnode": records.column("vnode"),
        "src": pc.cast(records.column("src"), pa.int64())
        if "src" in records.column_names
        else pa.array([0] * n, pa.int64()),
        RECORDS: pa.array([1] * n, pa.int64()),
    }
    for column, function in aggregates:
        values = records.column(column)
        if function == "count":
            part = pc.cast(pc.is_valid(values), pa.int64())
        elif function == "sum":
            part = pc.cast(values, pa.int64()) if pa.types.is_integer(values.type) else values
        else:
            part = values
        columns[column_name(column, function)] = part
    return pa.table(columns)


def merge(tables: Sequence[pa.Table], aggregates: Aggregates) -> pa.Table:
    """Rows of either form as partial rows, in one table (its columns: :func:`partial_columns`)."""
    names = partial_columns(aggregates)
    parts = [
        (t if is_partial(t) else as_partials(t, aggregates)).select(names)
        for t in tables
        if t is not None and t.num_rows
    ]
    if not parts:
        raise PartialRowsError("no rows to merge")
    first = parts[0].schema
    return pa.concat_tables([p.cast(first) for p in parts])


def fold(table: pa.Table, aggregates: Aggregates) -> pa.Table:
    """One row per key of record or partial rows: ``key``, one column per aggregate (named by
    :func:`column_name`, in ``aggregates`` order), ``seq`` (the largest) and, if the rows have
    one, ``vnode``.

    Keys come in the order of their first row (a single-threaded group-by), so the per-key and
    the vectorised path, and a re-run, emit outputs in the same order."""
    if is_partial(table):
        wanted = [(column_name(c, f), MERGE[f]) for c, f in aggregates]
        names = [f"{column_name(c, f)}_{MERGE[f]}" for c, f in aggregates]
    else:
        wanted = list(aggregates)
        names = [column_name(c, f) for c, f in aggregates]
    # seq and vnode under names no operator column can take (an operator may aggregate seq)
    extra = table.append_column("__seq", table.column("seq"))
    with_vnode = "vnode" in table.column_names
    if with_vnode:
        extra = extra.append_column("__vnode", table.column("vnode"))
    grouped = extra.group_by("key", use_threads=False).aggregate(
        [*wanted, ("__seq", "max"), *([("__vnode", "max")] if with_vnode else [])]
    )
    out = {"key": grouped.column("key")}
    for (column, function), name in zip(aggregates, names, strict=True):
        out[column_name(column, function)] = grouped.column(name)
    out["seq"] = grouped.column("__seq_max")
    if with_vnode:
        out["vnode"] = grouped.column("__vnode_max")
    return pa.table(out)
