"""Writing many rows at once, where the control plane writes hundreds in one go (a barrier of a
large operation, the runner's acknowledgements)."""

from __future__ import annotations

from typing import Any, cast

from django.db import connection, models


def rows_update(
    model: type[models.Model], names: list[str], rows: dict[Any, tuple[Any, ...]]
) -> None:
    """Write ``names`` of each row of ``model`` given as {primary key: its values, in the order
    of ``names``} in one ``UPDATE ... FROM (VALUES ...)``, each value typed as its column. Not
    ``bulk_update``: its ``CASE WHEN`` per field and row takes Django longer to build than
    Postgres to run, about 10 ms a row at a few hundred rows (a barrier of a large operation
    changes that many). A key without a row updates nothing."""
    if not rows:
        return
    meta = model._meta
    quote = connection.ops.quote_name
    fields = [cast("models.Field[Any, Any]", meta.get_field(name)) for name in names]
    pk = meta.pk
    assert pk is not None
    columns = [quote(str(f.column)) for f in fields]
    key = quote(str(pk.column))
    casts = [pk.cast_db_type(connection), *(f.cast_db_type(connection) for f in fields)]
    row = "(" + ", ".join(f"%s::{db_type}" for db_type in casts) + ")"
    params: list[Any] = []
    for pk_value, values in rows.items():
        params.append(pk_value)
        params += [f.get_db_prep_save(v, connection) for f, v in zip(fields, values, strict=True)]
    sql = (
        f"UPDATE {quote(meta.db_table)} AS t SET "
        + ", ".join(f"{c} = v.{c}" for c in columns)
        + f" FROM (VALUES {', '.join([row] * len(rows))}) AS v({key}, {', '.join(columns)})"
        + f" WHERE t.{key} = v.{key}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
