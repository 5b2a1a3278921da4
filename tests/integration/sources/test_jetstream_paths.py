"""The JetStream source's two ways of pulling (its own socket for a plain server, nats-py for a
server with TLS or credentials) read the same records, and the fast one is the one taken."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from tests.integration.natsservice import create_stream, publish, unique_name
from workers.sources import jetstream, jetstream_wire
from workers.sources.jetstream import JetStreamStreamReader, SeqRange


def test_both_pull_paths_read_the_same_records(
    nats_service: str, stream_names: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = unique_name()
    stream_names.append(stream)
    base = stream.lower()
    create_stream(nats_service, stream, [f"{base}.>"])
    payloads = [json.dumps({"i": i, "pad": "x" * (i % 50)}).encode() for i in range(2_500)]
    publish(nats_service, f"{base}.a", payloads[:1_200])
    publish(nats_service, f"{base}.b", payloads[1_200:])
    options = {"url": nats_service, "stream": stream, "schema": "i bigint"}
    calls: list[str] = []
    real = jetstream.pull_range

    def spy(*args: object, **kwargs: object) -> object:
        calls.append("wire")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(jetstream, "pull_range", spy)
    monkeypatch.setattr(jetstream, "FETCH_BATCH", 700)  # several pull requests per range
    ranges = [
        SeqRange(0, 2_500, None),
        SeqRange(1_000, 2_100, None),
        SeqRange(0, 2_500, f"{base}.b"),
    ]
    fast = [pa.Table.from_batches(list(JetStreamStreamReader(options).read(r))) for r in ranges]
    assert calls == ["wire"] * 3
    monkeypatch.setattr(jetstream, "plain_address", lambda url: None)
    slow = [pa.Table.from_batches(list(JetStreamStreamReader(options).read(r))) for r in ranges]
    assert calls == ["wire"] * 3, "without a plain address, nats-py's path"
    for f, s in zip(fast, slow, strict=True):
        assert f.to_pylist() == s.to_pylist()
    assert fast[0].column("seq").to_pylist() == list(range(1, 2_501))
    assert fast[1].column("i").to_pylist() == list(range(1_000, 2_100))
    assert fast[2].column("i").to_pylist() == list(range(1_200, 2_500))


def test_plain_addresses() -> None:
    assert jetstream_wire.plain_address("nats://127.0.0.1:4222") == ("127.0.0.1", 4222)
    assert jetstream_wire.plain_address("nats://host") == ("host", 4222)
    assert jetstream_wire.plain_address("nats://u:p@host:4222") is None
    assert jetstream_wire.plain_address("tls://host:4222") is None
    assert jetstream_wire.plain_address("nats://a:1,nats://b:2") is None


def test_concurrent_reads_each_get_their_own_range(
    nats_service: str, stream_names: list[str]
) -> None:
    """Spark reads an epoch's partitions at the same time, each in its own process: every reader
    must get exactly its range (a shared reply subject once mixed them up)."""
    import concurrent.futures

    stream = unique_name()
    stream_names.append(stream)
    base = stream.lower()
    create_stream(nats_service, stream, [f"{base}.>"])
    publish(nats_service, f"{base}.a", [json.dumps({"i": i}).encode() for i in range(6_000)])
    options = {"url": nats_service, "stream": stream, "schema": "i bigint"}
    ranges = [SeqRange(k * 1_500, (k + 1) * 1_500, None) for k in range(4)]

    def read(part: SeqRange) -> list[int]:
        table = pa.Table.from_batches(list(JetStreamStreamReader(options).read(part)))
        return table.column("seq").to_pylist()

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        got = list(pool.map(read, ranges))
    for part, seqs in zip(ranges, got, strict=True):
        assert seqs == list(range(part.start + 1, part.end + 1))
