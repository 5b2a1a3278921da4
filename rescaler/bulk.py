"""Writing many rows at once, where the control plane writes hundreds in one go (a barrier of a
large operation, a wave of step commands, their audit events).

Both helpers send the rows as one JSON document that Postgres reads as a table
(``jsonb_to_recordset``), each column typed as the model's: not one placeholder per value.
With hundreds of rows, building and quoting a statement of thousands of placeholders (Django's
``bulk_update`` ``CASE WHEN`` per field and row, ``bulk_create``'s ``VALUES`` lists, psycopg's
client-side binding of each value) took several times longer than Postgres took to run it; one
``json.dumps`` and one quoted string cost a fraction of that."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import uuid
from collections.abc import Sequence
from typing import Any, TypeVar, cast

from django.db import connection, models

M = TypeVar("M", bound=models.Model)

# columns whose Python values are what Postgres takes: no per-value preparation
_PLAIN = {
    "AutoField", "BigAutoField", "BigIntegerField", "BooleanField", "CharField", "IntegerField",
    "PositiveBigIntegerField", "PositiveIntegerField", "PositiveSmallIntegerField",
    "SmallAutoField", "SmallIntegerField", "TextField",
}  # fmt: skip


def _json_default(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()  # every digit: Postgres reads it back to the microsecond
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not a column value rescaler.bulk can send")


def _prepare(field: models.Field[Any, Any]) -> Any:
    """How one column's value becomes the JSON the statement reads (None: as it is)."""
    kind = field.get_internal_type()
    if isinstance(field, models.ForeignKey):  # its value is the target's key
        kind = field.target_field.get_internal_type()
    if kind == "ArrayField":  # Postgres reads a JSON array as no array type
        raise TypeError(f"{field.name}: array columns are not written by rescaler.bulk")
    if isinstance(field, models.JSONField):
        if field.encoder is None:
            return None
        encoder = field.encoder
        return lambda v: None if v is None else json.loads(json.dumps(v, cls=encoder))
    if kind in _PLAIN:
        return None
    if kind == "DateTimeField":
        return lambda v: (
            v if v is None or v.tzinfo is not None else field.get_db_prep_save(v, connection)
        )
    return lambda v: field.get_db_prep_save(v, connection)


def _rows_json(fields: list[models.Field[Any, Any]], rows: list[tuple[Any, ...]]) -> str:
    """The rows as a JSON array of objects keyed by column."""
    columns = [str(f.column) for f in fields]
    prepare = [_prepare(f) for f in fields]
    if any(p is not None for p in prepare):
        rows = [
            tuple(v if p is None else p(v) for p, v in zip(prepare, row, strict=True))
            for row in rows
        ]
    return json.dumps(
        [dict(zip(columns, row, strict=True)) for row in rows],
        default=_json_default,
        separators=(",", ":"),
    )


def _recordset(fields: list[models.Field[Any, Any]]) -> str:
    """``jsonb_to_recordset(%s::jsonb) AS v(<column> <type>, ...)``."""
    quote = connection.ops.quote_name
    typed = ", ".join(f"{quote(str(f.column))} {f.cast_db_type(connection)}" for f in fields)
    return f"jsonb_to_recordset(%s::jsonb) AS v({typed})"


def rows_update(
    model: type[models.Model], names: list[str], rows: dict[Any, tuple[Any, ...]]
) -> None:
    """Write ``names`` of each row of ``model`` given as {primary key: its values, in the order
    of ``names``} in one ``UPDATE ... FROM`` the rows, each value typed as its column. A key
    without a row updates nothing."""
    if not rows:
        return
    meta = model._meta
    quote = connection.ops.quote_name
    pk = meta.pk
    assert pk is not None
    fields = [pk, *(cast("models.Field[Any, Any]", meta.get_field(name)) for name in names)]
    key, *written = [quote(str(f.column)) for f in fields]
    sql = (
        f"UPDATE {quote(meta.db_table)} AS t SET "
        + ", ".join(f"{c} = v.{c}" for c in written)
        + f" FROM {_recordset(fields)} WHERE t.{key} = v.{key}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [_rows_json(fields, [(k, *v) for k, v in rows.items()])])


def rows_insert(objs: Sequence[M]) -> list[M]:
    """Insert ``objs`` (of one model, not yet saved) in one ``INSERT ... SELECT``, in order, as
    ``bulk_create`` would: each field's ``pre_save`` runs (``auto_now_add``), and each object
    gets its primary key. No signals are sent (nor does ``bulk_create`` send any)."""
    if not objs:
        return []
    meta = type(objs[0])._meta
    quote = connection.ops.quote_name
    pk = meta.pk
    assert pk is not None
    fields = [f for f in meta.concrete_fields if f is not pk or not pk.db_returning]
    # a field's pre_save is its value, but for the times it sets (auto_now, auto_now_add)
    stamped = [
        i
        for i, f in enumerate(fields)
        if getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False)
    ]
    names = [f.attname for f in fields]
    rows = [tuple(getattr(obj, name) for name in names) for obj in objs]
    if stamped:
        rows = [
            tuple(fields[i].pre_save(obj, True) if i in stamped else v for i, v in enumerate(row))
            for obj, row in zip(objs, rows, strict=True)
        ]
    columns = ", ".join(quote(str(f.column)) for f in fields)
    sql = (
        f"INSERT INTO {quote(meta.db_table)} ({columns}) SELECT {columns} FROM "
        f"{_recordset(fields)} RETURNING {quote(str(pk.column))}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [_rows_json(fields, rows)])
        keys = [row[0] for row in cursor.fetchall()]
    for obj, key in zip(objs, keys, strict=True):
        obj.pk = key
        obj._state.adding = False
        obj._state.db = connection.alias
    return list(objs)
