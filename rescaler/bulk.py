"""Writing many rows at once, where the control plane writes hundreds in one go (a barrier of a
large operation, a wave of step commands, their audit events).

Both helpers send one array per column (``unnest``), not one placeholder per value: with
hundreds of rows, building and parsing a statement of thousands of placeholders (Django's
``bulk_update`` ``CASE WHEN`` per field and row, ``bulk_create``'s ``VALUES`` lists, psycopg's
client-side binding of each) took several times longer than Postgres took to run it. JSON
values travel as text and are cast by Postgres."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, TypeVar, cast

from django.db import connection, models

M = TypeVar("M", bound=models.Model)


def _array(field: models.Field[Any, Any], values: list[Any]) -> tuple[str, list[Any]]:
    """One column's values as one parameter: (the parameter's SQL array type, the values)."""
    if isinstance(field, models.JSONField):
        encoder = field.encoder
        return "jsonb[]", [None if v is None else json.dumps(v, cls=encoder) for v in values]
    if field.get_internal_type() == "ArrayField":  # an array of arrays is not a column of rows
        raise TypeError(f"{field.name}: array columns are not written by rescaler.bulk")
    db_type = field.cast_db_type(connection)
    return f"{db_type}[]", [field.get_db_prep_save(v, connection) for v in values]


def rows_update(
    model: type[models.Model], names: list[str], rows: dict[Any, tuple[Any, ...]]
) -> None:
    """Write ``names`` of each row of ``model`` given as {primary key: its values, in the order
    of ``names``} in one ``UPDATE ... FROM unnest(...)``, each value typed as its column. A key
    without a row updates nothing."""
    if not rows:
        return
    meta = model._meta
    quote = connection.ops.quote_name
    pk = meta.pk
    assert pk is not None
    fields = [pk, *(cast("models.Field[Any, Any]", meta.get_field(name)) for name in names)]
    columns = [quote(str(f.column)) for f in fields]
    values = list(zip(*((k, *v) for k, v in rows.items()), strict=True))
    arrays = [_array(f, list(column)) for f, column in zip(fields, values, strict=True)]
    key, *written = columns
    sql = (
        f"UPDATE {quote(meta.db_table)} AS t SET "
        + ", ".join(f"{c} = v.{c}" for c in written)
        + f" FROM unnest({', '.join(f'%s::{t}' for t, _ in arrays)}) AS v({', '.join(columns)})"
        + f" WHERE t.{key} = v.{key}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [a for _, a in arrays])


def rows_insert(objs: Sequence[M]) -> list[M]:
    """Insert ``objs`` (of one model, not yet saved) in one ``INSERT ... SELECT FROM unnest``,
    in order, as ``bulk_create`` would: each field's ``pre_save`` runs (``auto_now_add``), and
    each object gets its primary key. No signals are sent (nor does ``bulk_create``)."""
    if not objs:
        return []
    model = type(objs[0])
    meta = model._meta
    quote = connection.ops.quote_name
    pk = meta.pk
    assert pk is not None
    fields = [f for f in meta.concrete_fields if f is not pk or not pk.db_returning]
    arrays = [_array(f, [f.pre_save(obj, True) for obj in objs]) for f in fields]
    columns = ", ".join(quote(str(f.column)) for f in fields)
    sql = (
        f"INSERT INTO {quote(meta.db_table)} ({columns}) SELECT * FROM "
        f"unnest({', '.join(f'%s::{t}' for t, _ in arrays)}) RETURNING {quote(str(pk.column))}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [a for _, a in arrays])
        keys = [row[0] for row in cursor.fetchall()]
    for obj, key in zip(objs, keys, strict=True):
        obj.pk = key
        obj._state.adding = False
        obj._state.db = connection.alias
    return list(objs)
