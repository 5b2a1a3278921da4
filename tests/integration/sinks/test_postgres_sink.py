"""PostgresSink against the real Postgres server, in a database created for each test."""

from __future__ import annotations

import pickle
import threading
from typing import Any

import psycopg
import pyarrow as pa
import pytest

from tests.integration.services import free_port
from tests.integration.sinks.data import FRAGMENT, WRITES, expected_upsert, outputs
from workers.sinks import EpochOutputs, SinkError, sink_from_uri
from workers.sinks.postgres import BOOKKEEPING, PostgresSink

pytestmark = [pytest.mark.integration]

TABLE = "page_stats_out"


def table_rows(dsn: str, table: str = TABLE) -> dict[str, dict[str, Any]]:
    with psycopg.connect(dsn) as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        cur.execute(f"SELECT key, seq, count, share, page, epoch FROM {table} ORDER BY key")
        return {row["key"]: dict(row) for row in cur.fetchall()}


def bookkeeping(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            f"SELECT sink_table, fragment, epoch, pu, rows FROM {BOOKKEEPING} ORDER BY epoch, pu"
        ).fetchall()


def test_two_epochs_two_pus_then_replays_change_nothing(sink_database: str) -> None:
    sink = PostgresSink(sink_database, TABLE)
    assert sink._conn is None  # lazy: nothing opened before the first write
    writes = [outputs(epoch, pu) for epoch, pu in WRITES]
    assert [sink.write(out) for out in writes] == [True] * len(writes)
    expected = expected_upsert(writes)

    # a crash after the sink wrote epoch 2 but before Spark committed it: the re-run epoch
    # writes the same (epoch, pu)s again, from sinks unpickled in fresh executors
    for pu in (1, 0):
        replayed = pickle.loads(pickle.dumps(sink))
        assert replayed._conn is None
        assert replayed.write(outputs(2, pu)) is False
        replayed.close()
    assert sink.write(outputs(1, 0)) is False
    sink.close()

    assert table_rows(sink_database) == expected
    assert {int(key[1:]) % 2 for key in expected} == {0, 1}  # keys of both PUs
    assert bookkeeping(sink_database) == [
        (TABLE, FRAGMENT, epoch, pu, outputs(epoch, pu).table.num_rows)
        for epoch, pu in sorted(WRITES)
    ]


def test_the_last_row_of_a_key_wins_within_an_epoch(sink_database: str) -> None:
    table = pa.table(
        {
            "key": ["a", "b", "a", "a", "b"],
            "seq": pa.array([1, 2, 3, 4, 5], pa.int64()),
            "count": pa.array([10, 20, 30, 40, 50], pa.int64()),
            "share": [0.1, 0.2, 0.3, 0.4, 0.5],
            "page": ["x", "y", "z", "w", "v"],
        }
    )
    with PostgresSink(sink_database, TABLE) as sink:
        assert sink.write(EpochOutputs(FRAGMENT, 7, 0, table))
    rows = table_rows(sink_database)
    assert {k: (r["count"], r["page"], r["epoch"]) for k, r in rows.items()} == {
        "a": (40, "w", 7),
        "b": (50, "v", 7),
    }


def test_an_older_epoch_written_late_does_not_overwrite_a_newer_value(sink_database: str) -> None:
    def one(epoch: int, pu: int, count: int) -> EpochOutputs:
        return EpochOutputs(
            FRAGMENT,
            epoch,
            pu,
            pa.table(
                {
                    "key": ["k"],
                    "seq": pa.array([epoch], pa.int64()),
                    "count": pa.array([count], pa.int64()),
                    "share": [0.0],
                    "page": ["p"],
                }
            ),
        )

    with PostgresSink(sink_database, TABLE) as sink:
        assert sink.write(one(5, 1, 500))
        assert sink.write(one(3, 0, 300))  # written (its own bookkeeping row) but older
    assert table_rows(sink_database)["k"]["count"] == 500
    assert table_rows(sink_database)["k"]["epoch"] == 5


def test_a_failed_write_leaves_nothing_and_its_retry_writes_everything(sink_database: str) -> None:
    first = outputs(0, 0)
    with PostgresSink(sink_database, TABLE) as sink:
        assert sink.write(first)
    with psycopg.connect(sink_database, autocommit=True) as conn:
        conn.execute(f"ALTER TABLE {TABLE} ADD CONSTRAINT small CHECK (seq < 100)")
    second = outputs(0, 1)
    assert min(second.table.column("seq").to_pylist()) > 100  # PU 1: seq from 101
    with PostgresSink(sink_database, TABLE) as sink:
        with pytest.raises(SinkError, match="nothing was written"):
            sink.write(second)
        assert table_rows(sink_database) == expected_upsert([first])
        assert len(bookkeeping(sink_database)) == 1  # the claim rolled back with the rows
        with psycopg.connect(sink_database, autocommit=True) as conn:
            conn.execute(f"ALTER TABLE {TABLE} DROP CONSTRAINT small")
        assert sink.write(second) is True
    assert table_rows(sink_database) == expected_upsert([first, second])


def test_concurrent_attempts_of_one_epoch_write_once(sink_database: str) -> None:
    out = outputs(4, 1)
    with PostgresSink(sink_database, TABLE) as warm:  # tables exist: the race is on the write
        assert warm.write(outputs(0, 0))
    results: list[bool] = []
    barrier = threading.Barrier(4)

    def attempt() -> None:
        sink = PostgresSink(sink_database, TABLE)
        barrier.wait()
        results.append(sink.write(out))
        sink.close()

    threads = [threading.Thread(target=attempt) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False, False, False, True]
    assert table_rows(sink_database) == expected_upsert([outputs(0, 0), out])


def test_an_empty_epoch_is_recorded_and_its_replay_skipped(sink_database: str) -> None:
    empty = EpochOutputs(FRAGMENT, 3, 0, outputs(0, 0).table.slice(0, 0))
    with PostgresSink(sink_database, TABLE) as sink:
        assert sink.write(empty) is True
        assert sink.write(empty) is False
    assert table_rows(sink_database) == {}


def test_from_uri_with_key_columns_and_schema(sink_database: str) -> None:
    with psycopg.connect(sink_database, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA out")
    sink = sink_from_uri(f"{sink_database}?table=out.stats&key=key,page")
    assert isinstance(sink, PostgresSink)
    assert sink.key_columns == ("key", "page")
    writes = [outputs(epoch, pu) for epoch, pu in WRITES[:2]]
    for out in writes:
        assert sink.write(out)
    sink.close()
    with psycopg.connect(sink_database) as conn:
        got = conn.execute("SELECT key, page, count FROM out.stats").fetchall()
    expected: dict[tuple[str, str], int] = {}
    for out in writes:
        for row in out.table.to_pylist():
            expected[(row["key"], row["page"])] = row["count"]
    assert {(k, p): c for k, p, c in got} == expected


def test_a_server_that_does_not_answer_is_a_clear_error() -> None:
    sink = PostgresSink(f"postgres://postgres@127.0.0.1:{free_port()}/nowhere", TABLE)
    with pytest.raises(SinkError, match="did not answer") as error:
        sink.write(outputs(0, 0))
    assert "pg_ctlcluster" in str(error.value)


def test_a_missing_database_is_a_clear_error(postgres_service: str, sink_database: str) -> None:
    missing = sink_database.rsplit("/", 1)[0] + "/rescaler_sinks_test_missing"
    with pytest.raises(SinkError, match="'rescaler_sinks_test_missing' does not exist"):
        PostgresSink(missing, TABLE).write(outputs(0, 0))


def test_an_existing_table_without_a_key_index_is_a_clear_error(sink_database: str) -> None:
    with psycopg.connect(sink_database, autocommit=True) as conn:
        conn.execute(
            f"CREATE TABLE {TABLE} (key text, seq bigint, count bigint, share double precision, "
            "page text, epoch bigint)"
        )
    with (
        PostgresSink(sink_database, TABLE) as sink,
        pytest.raises(SinkError, match=r"no primary key or unique index on exactly \(key\)"),
    ):
        sink.write(outputs(0, 0))
    with psycopg.connect(sink_database, autocommit=True) as conn:
        conn.execute(f"ALTER TABLE {TABLE} DROP COLUMN page")
    with PostgresSink(sink_database, TABLE) as sink, pytest.raises(SinkError, match="lacks column"):
        sink.write(outputs(0, 0))


def test_every_type_a_processor_outputs_is_stored(sink_database: str) -> None:
    """Timestamps, dates, decimals and binaries as Postgres's own types; arrays, maps and
    structs as jsonb (maps with string keys as objects)."""
    import datetime as dt
    from decimal import Decimal

    schema = pa.schema(
        [
            ("key", pa.string()),
            ("at", pa.timestamp("us", tz="UTC")),
            ("day", pa.date32()),
            ("total", pa.decimal128(12, 2)),
            ("blob", pa.binary()),
            ("tags", pa.list_(pa.string())),
            ("attrs", pa.map_(pa.string(), pa.int32())),
            ("by_id", pa.map_(pa.int64(), pa.timestamp("us", tz="UTC"))),
            ("point", pa.struct([("x", pa.float64()), ("y", pa.float64())])),
        ]
    )
    at = dt.datetime(2024, 3, 1, 12, 0, 1, 250000, tzinfo=dt.UTC)
    rows = [
        {
            "key": "a",
            "at": at,
            "day": dt.date(2024, 3, 1),
            "total": Decimal("12.50"),
            "blob": b"\x00\xff",
            "tags": ["x", None],
            "attrs": [("m", 1), ("z", None)],
            "by_id": [(7, at)],
            "point": {"x": 1.5, "y": -2.0},
        },
        {k: None for k in schema.names} | {"key": "b"},
    ]
    sink = PostgresSink(sink_database, "typed", key_columns=("key",))
    assert sink.write(EpochOutputs(FRAGMENT, 0, 0, pa.Table.from_pylist(rows, schema=schema)))
    sink.close()
    with psycopg.connect(sink_database) as conn:
        found = conn.execute(
            "SELECT key, at, day, total, blob, tags, attrs, by_id, point FROM typed ORDER BY key"
        ).fetchall()
        types = dict(
            conn.execute(
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_name = 'typed'"
            ).fetchall()
        )
    assert found == [
        (
            "a",
            at,
            dt.date(2024, 3, 1),
            Decimal("12.50"),
            b"\x00\xff",
            ["x", None],
            {"m": 1, "z": None},
            [[7, "2024-03-01T12:00:01.250000+00:00"]],
            {"x": 1.5, "y": -2.0},
        ),
        ("b", None, None, None, None, None, None, None, None),
    ]
    assert types["at"] == "timestamp with time zone" and types["point"] == "jsonb"
