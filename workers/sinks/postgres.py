"""An exactly-once Postgres sink: upsert by key, each (epoch, PU) applied in one transaction once.

Why it is exactly-once: the bookkeeping row ``rescaler_sink_epochs(sink_table, fragment, epoch,
pu)`` is inserted *first* in the same transaction as the rows, with ``ON CONFLICT DO NOTHING``.
A replay finds the row and changes nothing; two attempts running at once (a zombie task and its
retry) serialise on that primary key, so one writes and the other, once the first commits, sees
the row and skips (had the first rolled back, the second writes). Nothing is half-applied: a crash
at any point rolls the whole transaction back, bookkeeping row included, and the replay writes it.

What the table holds: one row per key, the latest value. Within an epoch's table the last row of
a key wins (the operator emits a key's outputs in order); across epochs the upsert only replaces
a row whose ``epoch`` is not newer (``WHERE target.epoch <= EXCLUDED.epoch``), so a late write of
an older epoch never overwrites a newer value. Rows are loaded with ``COPY`` into a temporary table
and applied with one ``INSERT ... SELECT DISTINCT ON (keys) ... ON CONFLICT`` statement.
"""

from __future__ import annotations

import json
import re
import weakref
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pyarrow as pa
from psycopg import sql
from psycopg.types.json import Jsonb

from workers.sinks.base import EpochOutputs, Sink, SinkError, json_default

BOOKKEEPING = "rescaler_sink_epochs"
START_POSTGRES_HINT = (
    "start it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start "
    "(Debian), or `sudo service postgresql start`"
)
_ORD = "_rescaler_ord"
_TEMP = "_rescaler_sink_rows"
_SETUP_LOCK = "rescaler_sink_setup"  # serialises CREATE TABLE IF NOT EXISTS across PUs


def _redact(dsn: str) -> str:
    """The DSN without its password (URL or ``key=value`` form)."""
    if "://" in dsn:
        parts = urlsplit(dsn)
        if parts.password is None:
            return dsn
        netloc = parts.netloc.rsplit("@", 1)[1]
        user = f"{parts.username}:***@" if parts.username else ":***@"
        return urlunsplit((parts.scheme, user + netloc, parts.path, parts.query, parts.fragment))
    return re.sub(r"(password\s*=\s*)(\S+)", r"\1***", dsn)


def pg_type(dtype: pa.DataType) -> str:
    """The Postgres column type an Arrow column is stored as (SinkError for one it cannot be)."""
    t = pa.types
    if t.is_boolean(dtype):
        return "boolean"
    if t.is_int8(dtype) or t.is_int16(dtype) or t.is_uint8(dtype):
        return "smallint"
    if t.is_int32(dtype) or t.is_uint16(dtype):
        return "integer"
    if t.is_int64(dtype) or t.is_uint32(dtype):
        return "bigint"
    if t.is_uint64(dtype):
        return "numeric(20, 0)"
    if t.is_float16(dtype) or t.is_float32(dtype):
        return "real"
    if t.is_float64(dtype):
        return "double precision"
    if t.is_decimal(dtype):
        return f"numeric({dtype.precision}, {dtype.scale})"
    if t.is_string(dtype) or t.is_large_string(dtype) or t.is_string_view(dtype):
        return "text"
    if t.is_binary(dtype) or t.is_large_binary(dtype) or t.is_fixed_size_binary(dtype):
        return "bytea"
    if t.is_date(dtype):
        return "date"
    if t.is_timestamp(dtype):
        return "timestamptz" if dtype.tz else "timestamp"
    if _nested(dtype):
        return "jsonb"
    raise SinkError(f"the Postgres sink cannot store Arrow type {dtype}")


def _column_values(column: pa.ChunkedArray) -> list[Any]:
    values: list[Any] = column.to_pylist()
    if not _nested(column.type):
        return values
    return [None if v is None else Jsonb(json_value(v, column.type)) for v in values]


def _nested(dtype: pa.DataType) -> bool:
    t = pa.types
    return bool(
        t.is_list(dtype)
        or t.is_large_list(dtype)
        or t.is_fixed_size_list(dtype)
        or t.is_struct(dtype)
        or t.is_map(dtype)
    )


def json_value(value: Any, dtype: pa.DataType) -> Any:
    """A nested value (array, map, struct) as the JSON its ``jsonb`` column holds: arrays as
    arrays, structs as objects, maps as objects when their keys are strings (else as arrays of
    ``[key, value]`` pairs); times in ISO 8601, decimals as strings, binaries in base64."""
    if value is None:
        return None
    t = pa.types
    if t.is_struct(dtype):
        return {f.name: json_value(value.get(f.name), f.type) for f in dtype}
    if t.is_map(dtype):
        pairs = [(k, json_value(v, dtype.item_type)) for k, v in value]
        if t.is_string(dtype.key_type) or t.is_large_string(dtype.key_type):
            return dict(pairs)
        return [[json_value(k, dtype.key_type), v] for k, v in pairs]
    if t.is_list(dtype) or t.is_large_list(dtype) or t.is_fixed_size_list(dtype):
        return [json_value(v, dtype.value_type) for v in value]
    return json.loads(json.dumps(value, default=json_default))


class PostgresSink(Sink):
    """Upserts each epoch's outputs into ``table`` by ``key_columns``, once per (epoch, PU).

    ``table`` (``name`` or ``schema.name``) is created at the first write if missing: one column
    per output column (``pg_type``), ``epoch bigint NOT NULL`` (the epoch that last wrote the
    row), primary key ``key_columns``. An existing table must have those columns and a unique
    index on exactly ``key_columns``; it may have more columns (with defaults).
    """

    def __init__(
        self,
        dsn: str,
        table: str,
        key_columns: Sequence[str] = ("key",),
        *,
        connect_timeout_s: int = 5,
    ) -> None:
        parts = table.split(".")
        if not table or len(parts) > 2 or not all(parts):
            raise ValueError(f"Postgres sink table must be NAME or SCHEMA.NAME, not {table!r}")
        if isinstance(key_columns, str) or not key_columns:
            raise ValueError("key_columns must be a non-empty sequence of column names")
        if "epoch" in key_columns:
            raise ValueError("'epoch' is the sink's own column; it cannot be a key column")
        self.dsn = dsn
        self.table = table
        self.key_columns = tuple(key_columns)
        self.connect_timeout_s = connect_timeout_s
        self._conn: psycopg.Connection[Any] | None = None
        self._ready: pa.Schema | None = None  # the output schema the table was checked for

    def describe(self) -> str:
        return (
            f"postgres {_redact(self.dsn)} table {self.table} (key {', '.join(self.key_columns)})"
        )

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None
                self._ready = None

    # --- connection and tables -------------------------------------------------------------

    def _ident(self) -> sql.Identifier:
        return sql.Identifier(*self.table.split("."))

    def _connect(self) -> psycopg.Connection[Any]:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        self._ready = None
        try:
            self._conn = psycopg.connect(
                self.dsn, autocommit=True, connect_timeout=self.connect_timeout_s
            )
        except psycopg.OperationalError as exc:
            text = str(exc).strip()
            found = re.search(r'database "([^"]+)" does not exist', text)
            if found:
                raise SinkError(
                    f"Postgres at {_redact(self.dsn)}: database {found.group(1)!r} does not "
                    f"exist: create it (createdb {found.group(1)}, or CREATE DATABASE "
                    f'"{found.group(1)}") or point the sink at another'
                ) from exc
            raise SinkError(
                f"Postgres at {_redact(self.dsn)} did not answer ({text}); {START_POSTGRES_HINT}"
            ) from exc
        weakref.finalize(self, self._conn.close)  # a sink dropped without close() disconnects
        return self._conn

    def _ensure_tables(self, conn: psycopg.Connection[Any], schema: pa.Schema) -> None:
        if self._ready is not None and self._ready.equals(schema):
            return
        names = schema.names
        if "epoch" in names or _ORD in names:
            raise SinkError(
                f"{self.describe()}: the outputs have a column named 'epoch' or {_ORD!r}, which "
                f"the sink adds itself; rename it in the operator's output_fields"
            )
        missing_keys = [k for k in self.key_columns if k not in names]
        if missing_keys:
            raise SinkError(
                f"{self.describe()}: key column(s) {', '.join(missing_keys)} are not among the "
                f"outputs' columns ({', '.join(names)})"
            )
        types = {f.name: pg_type(f.type) for f in schema}
        target = self._ident()
        quoted = target.as_string(conn)
        with conn.transaction(), conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (_SETUP_LOCK,))
            cur.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} ("
                    "sink_table text NOT NULL, fragment text NOT NULL, epoch bigint NOT NULL, "
                    "pu integer NOT NULL, rows bigint NOT NULL, "
                    "written_at timestamptz NOT NULL DEFAULT now(), "
                    "PRIMARY KEY (sink_table, fragment, epoch, pu))"
                ).format(sql.Identifier(BOOKKEEPING))
            )
            cur.execute("SELECT to_regclass(%s)::oid", (quoted,))
            row = cur.fetchone()
            oid = row[0] if row else None
            if oid is None:
                columns: list[sql.Composable] = [
                    sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(types[n])) for n in names
                ]
                columns.append(sql.SQL("epoch bigint NOT NULL"))
                cur.execute(
                    sql.SQL("CREATE TABLE {} ({}, PRIMARY KEY ({}))").format(
                        target,
                        sql.SQL(", ").join(columns),
                        sql.SQL(", ").join(map(sql.Identifier, self.key_columns)),
                    )
                )
            else:
                self._check_existing(cur, oid, [*names, "epoch"], types)
        self._ready = schema

    def _check_existing(
        self, cur: psycopg.Cursor[Any], oid: int, needed: list[str], types: dict[str, str]
    ) -> None:
        cur.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = %s AND attnum > 0 "
            "AND NOT attisdropped",
            (oid,),
        )
        have = {r[0] for r in cur.fetchall()}
        absent = [n for n in needed if n not in have]
        if absent:
            fixes = "; ".join(
                f"ALTER TABLE {self.table} ADD COLUMN {n} "
                f"{'bigint NOT NULL DEFAULT -1' if n == 'epoch' else types[n]}"
                for n in absent
            )
            raise SinkError(
                f"{self.describe()}: the existing table lacks column(s) {', '.join(absent)}: "
                f"{fixes}"
            )
        cur.execute(
            "SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_index i "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
            "WHERE i.indrelid = %s AND i.indisunique AND i.indpred IS NULL "
            "GROUP BY i.indexrelid",
            (oid,),
        )
        wanted = sorted(self.key_columns)
        if not any(sorted(r[0]) == wanted for r in cur.fetchall()):
            raise SinkError(
                f"{self.describe()}: the existing table has no primary key or unique index on "
                f"exactly ({', '.join(self.key_columns)}), which the upsert needs: "
                f"ALTER TABLE {self.table} ADD PRIMARY KEY ({', '.join(self.key_columns)})"
            )

    def last_epoch(self, fragment: str) -> int | None:
        conn = self._connect()
        try:
            with conn.transaction(), conn.cursor() as cur:
                cur.execute("SELECT to_regclass(%s)", (BOOKKEEPING,))
                row = cur.fetchone()
                if row is None or row[0] is None:
                    return None
                cur.execute(
                    sql.SQL(
                        "SELECT max(epoch) FROM {} WHERE sink_table = %s AND fragment = %s"
                    ).format(sql.Identifier(BOOKKEEPING)),
                    (self.table, fragment),
                )
                found = cur.fetchone()
        except psycopg.Error as exc:
            self.close()
            raise SinkError(f"{self.describe()}: cannot read what it holds: {exc}") from exc
        return None if found is None or found[0] is None else int(found[0])

    # --- writing ---------------------------------------------------------------------------

    def write(self, outputs: EpochOutputs) -> bool:
        table = outputs.table
        for k in self.key_columns:
            if k in table.column_names and table.column(k).null_count:
                raise SinkError(
                    f"{self.describe()}: {outputs.fragment} epoch {outputs.epoch} PU "
                    f"{outputs.pu} has null values in key column {k!r}"
                )
        conn = self._connect()
        try:
            self._ensure_tables(conn, table.schema)
            return self._write(conn, outputs)
        except psycopg.OperationalError as exc:  # the connection broke: reconnect next time
            self.close()
            raise SinkError(
                f"{self.describe()}: writing {outputs.fragment} epoch {outputs.epoch} PU "
                f"{outputs.pu} failed, nothing was written ({exc}); {START_POSTGRES_HINT} "
                f"if the server is down"
            ) from exc
        except psycopg.Error as exc:
            raise SinkError(
                f"{self.describe()}: writing {outputs.fragment} epoch {outputs.epoch} PU "
                f"{outputs.pu} failed, nothing was written: {exc}"
            ) from exc

    def _write(self, conn: psycopg.Connection[Any], outputs: EpochOutputs) -> bool:
        table = outputs.table
        names = table.column_names
        cols = sql.SQL(", ").join(map(sql.Identifier, names))
        keys = sql.SQL(", ").join(map(sql.Identifier, self.key_columns))
        temp = sql.Identifier(_TEMP)
        with conn.transaction(), conn.cursor() as cur:
            # claim (fragment, epoch, pu) first: a replay, or a concurrent attempt once the
            # first commits, finds the row and leaves everything as it is
            cur.execute(
                sql.SQL(
                    "INSERT INTO {} (sink_table, fragment, epoch, pu, rows) "
                    "VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING 1"
                ).format(sql.Identifier(BOOKKEEPING)),
                (self.table, outputs.fragment, outputs.epoch, outputs.pu, table.num_rows),
            )
            if cur.fetchone() is None:
                return False
            if table.num_rows == 0:
                return True
            definitions: list[sql.Composable] = [
                sql.SQL("{} {}").format(sql.Identifier(f.name), sql.SQL(pg_type(f.type)))
                for f in table.schema
            ]
            definitions.append(sql.SQL("{} bigint").format(sql.Identifier(_ORD)))
            cur.execute(
                sql.SQL("CREATE TEMP TABLE {} ({}) ON COMMIT DROP").format(
                    temp, sql.SQL(", ").join(definitions)
                )
            )
            copy_sql = sql.SQL("COPY {} ({}, {}) FROM STDIN").format(
                temp, cols, sql.Identifier(_ORD)
            )
            columns = [_column_values(table.column(n)) for n in names]
            with cur.copy(copy_sql) as copy:
                for row in zip(*columns, range(table.num_rows)):
                    copy.write_row(row)
            updates: list[sql.Composable] = [
                sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(n))
                for n in names
                if n not in self.key_columns
            ]
            updates.append(sql.SQL("epoch = EXCLUDED.epoch"))
            cur.execute(
                sql.SQL(
                    "INSERT INTO {target} AS target ({cols}, epoch) "
                    "SELECT DISTINCT ON ({keys}) {cols}, %s::bigint FROM {temp} "
                    "ORDER BY {keys}, {ord} DESC "
                    "ON CONFLICT ({keys}) DO UPDATE SET {updates} "
                    "WHERE target.epoch <= EXCLUDED.epoch"
                ).format(
                    target=self._ident(),
                    cols=cols,
                    keys=keys,
                    temp=temp,
                    ord=sql.Identifier(_ORD),
                    updates=sql.SQL(", ").join(updates),
                ),
                (outputs.epoch,),
            )
        return True
