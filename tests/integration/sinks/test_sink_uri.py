"""sink_from_uri, FunctionSink and the contract every sink shares (no service needed)."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest

from tests.integration.sinks.data import FRAGMENT, outputs
from workers.sinks import EpochOutputs, FunctionSink, sink_from_uri
from workers.sinks.delta import DeltaSink
from workers.sinks.nats import NatsSink
from workers.sinks.postgres import PostgresSink


def test_uris_name_their_sinks() -> None:
    pg = sink_from_uri("postgresql://app:secret@db:5433/analytics?table=out.stats&sslmode=prefer")
    assert isinstance(pg, PostgresSink)
    assert (pg.table, pg.key_columns) == ("out.stats", ("key",))
    assert pg.dsn == "postgresql://app:secret@db:5433/analytics?sslmode=prefer"
    assert "secret" not in pg.describe()

    delta = sink_from_uri("delta:s3://bucket/clicks")
    assert isinstance(delta, DeltaSink) and delta.uri == "s3://bucket/clicks"

    nats = sink_from_uri("nats://127.0.0.1:4222/clicks.out?stream=CLICKS&create_stream=false")
    assert isinstance(nats, NatsSink)
    assert (nats.url, nats.subject, nats.stream, nats.create_stream) == (
        "nats://127.0.0.1:4222",
        "clicks.out",
        "CLICKS",
        False,
    )
    assert nats.duplicate_window_s == 120.0


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("", "empty sink URI"),
        ("kafka://broker:9092/topic", "unsupported sink URI"),
        ("/tmp/out", "unsupported sink URI"),
        ("postgres://db/analytics", "names no table"),
        ("postgres://db/?table=t", "names no database"),
        ("postgres://db/a?table=t&key=", "key= names no column"),
        ("delta:", "names no table location"),
        ("nats://127.0.0.1:4222", "names no subject"),
        ("nats://127.0.0.1:4222/clicks.*", "wildcard"),
        ("nats://127.0.0.1:4222/a..b", "empty token"),
        ("nats://127.0.0.1:4222/a?stream=a.b", "not a valid JetStream stream name"),
        ("nats://127.0.0.1:4222/a?duplicate_window_s=soon", "number of seconds"),
        ("nats://127.0.0.1:4222/a?create_stream=maybe", "true or false"),
        ("nats://127.0.0.1:4222/a?window=1", "unknown option"),
    ],
)
def test_bad_uris_say_what_is_wrong(uri: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        sink_from_uri(uri)


calls: list[tuple[int, int, int]] = []


def seen(table: pa.Table, epoch: int, pu: int) -> None:
    calls.append((table.num_rows, epoch, pu))


def test_function_sink_calls_the_function_and_pickles() -> None:
    calls.clear()
    sink = pickle.loads(pickle.dumps(FunctionSink(seen)))
    out = outputs(3, 1)
    assert sink.write(out) is True
    assert calls == [(out.table.num_rows, 3, 1)]
    assert FunctionSink(lambda t, e, p: False).write(out) is False
    assert "seen" in sink.describe()


def test_epoch_outputs_are_checked() -> None:
    with pytest.raises(ValueError):
        EpochOutputs(FRAGMENT, -1, 0, outputs(0, 0).table)
    with pytest.raises(ValueError):
        EpochOutputs("", 0, 0, outputs(0, 0).table)
