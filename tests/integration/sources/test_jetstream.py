"""The JetStream source against the real NATS server, without Spark: the reader's methods are
called the way Spark's micro-batch engine calls them (initialOffset, latestOffset, partitions,
read in fresh copies of the partitions, commit), and offsets go through JSON as in the offset
log. Every stream is created for one test and deleted after it."""

from __future__ import annotations

import asyncio
import json
import pickle
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from tests.integration.natsservice import create_stream, publish, stream_state, unique_name
from tests.integration.services import free_port
from workers.natsio import NatsUnavailable, close, connect
from workers.sources.generator import GeneratorConfig, generate
from workers.sources.jetstream import (
    JETSTREAM,
    DataLoss,
    JetStreamSource,
    JetStreamStreamReader,
    StreamMissing,
)
from workers.sources.jetstream_feed import feed, generated, generated_ids, main

pytestmark = [pytest.mark.integration]

EVENTS = "user string, page string, ts bigint, bytes bigint"
CONFIG = GeneratorConfig(kind="events", key_space=50, pages=20, seed=11)


def expected_events(start: int, end: int) -> list[dict[str, Any]]:
    """The generator's records as JSON objects, straight from workers/sources/generator.py."""
    rows = [row for batch in generate(CONFIG, start, end) for row in batch.to_pylist()]
    return [{k: v for k, v in row.items() if k != "seq"} for row in rows]


def new_stream(url: str, names: list[str], records: int, subject: str | None = None) -> str:
    stream = unique_name()
    names.append(stream)
    subject = subject or f"{stream.lower()}.events"
    stored = feed(
        url,
        stream,
        subject,
        generated(CONFIG, 0, records),
        msg_ids=generated_ids(CONFIG, 0, records),
    )
    assert stored == records
    return stream


def offset_log(offset: dict[str, Any]) -> dict[str, Any]:
    """What Spark's offset log gives back: the offset through JSON."""
    result: dict[str, Any] = json.loads(json.dumps(offset))
    return result


def read_epoch(
    reader: JetStreamStreamReader, start: dict[str, Any], end: dict[str, Any]
) -> pa.Table:
    """One micro-batch: every partition pickled (as to an executor) and read."""
    batches: list[pa.RecordBatch] = []
    for partition in reader.partitions(start, end):
        copy = pickle.loads(pickle.dumps(partition))
        batches.extend(reader.read(copy))
    schema = reader.options.arrow_schema()
    return pa.Table.from_batches(batches, schema=schema).sort_by("seq")


def run_epochs(
    reader: JetStreamStreamReader, start: dict[str, Any], limit: Any = None
) -> tuple[list[tuple[dict[str, Any], dict[str, Any], pa.Table]], dict[str, Any]]:
    """Micro-batches until the stream has nothing new: (start, end, records) of each."""
    epochs: list[tuple[dict[str, Any], dict[str, Any], pa.Table]] = []
    while True:
        end = offset_log(reader.latestOffset(start, limit))
        if end["seq"] == start["seq"]:
            return epochs, start
        epochs.append((start, end, read_epoch(reader, start, end)))
        reader.commit(end)
        start = end


def test_every_record_is_read_exactly_once_across_epochs(
    nats_service: str, stream_names: list[str]
) -> None:
    n = 2345
    stream = new_stream(nats_service, stream_names, n)
    reader = JetStreamStreamReader(
        {"url": nats_service, "stream": stream, "max_records_per_epoch": "500", "schema": EVENTS}
    )
    start = offset_log(reader.initialOffset())
    assert start["seq"] == 0
    epochs, last = run_epochs(reader, start)
    assert last["seq"] == n
    assert len(epochs) == 5  # 500 sequences per epoch at most
    for lo, hi, records in epochs:
        assert hi["seq"] - lo["seq"] <= 500
        assert records.column("seq").to_pylist() == list(range(lo["seq"] + 1, hi["seq"] + 1))
    records = pa.concat_tables(t for _, _, t in epochs)
    assert records.column("seq").to_pylist() == list(range(1, n + 1))  # each once, in order
    expected = expected_events(0, n)
    assert [json.loads(d) for d in records.column("data").to_pylist()] == expected
    assert records.select(["user", "page", "ts", "bytes"]).to_pylist() == expected
    assert records.column("_malformed").null_count == n
    assert set(records.column("subject").to_pylist()) == {f"{stream.lower()}.events"}


def test_rereading_an_epoch_yields_the_same_records(
    nats_service: str, stream_names: list[str]
) -> None:
    stream = new_stream(nats_service, stream_names, 1000)
    options = {"url": nats_service, "stream": stream, "max_records_per_epoch": "400"}
    reader = JetStreamStreamReader(options)
    start = offset_log(reader.initialOffset())
    first_end = offset_log(reader.latestOffset(start, None))
    second_end = offset_log(reader.latestOffset(first_end, None))
    epoch = read_epoch(reader, first_end, second_end)
    assert epoch.num_rows == 400

    # the stream grows, the runner crashes, and Spark re-runs the epoch from its offset log
    # in a new reader: exactly the same records
    feed(nats_service, stream, f"{stream.lower()}.events", generated(CONFIG, 1000, 1300))
    again = read_epoch(JetStreamStreamReader(options), first_end, second_end)
    assert again.equals(epoch)
    assert again.column("seq").to_pylist() == list(range(401, 801))


def test_a_restarted_reader_resumes_from_the_given_offset(
    nats_service: str, stream_names: list[str]
) -> None:
    n = 1500
    stream = new_stream(nats_service, stream_names, n)
    options = {"url": nats_service, "stream": stream, "max_records_per_epoch": "300"}
    first = JetStreamStreamReader(options)
    start = offset_log(first.initialOffset())
    before = []
    for _ in range(2):
        end = offset_log(first.latestOffset(start, None))
        before.append(read_epoch(first, start, end))
        start = end
    assert start["seq"] == 600

    restarted = JetStreamStreamReader(options)  # a new runner process, the same checkpoint
    epochs, last = run_epochs(restarted, start)
    after = [t for _, _, t in epochs]
    seqs = pa.concat_tables(before + after).column("seq").to_pylist()
    assert seqs == list(range(1, n + 1))
    assert last["seq"] == n


def test_one_partition_per_subject(nats_service: str, stream_names: list[str]) -> None:
    stream = unique_name()
    stream_names.append(stream)
    base = stream.lower()
    create_stream(nats_service, stream, [f"{base}.>"])
    subjects = [f"{base}.a", f"{base}.b", f"{base}.other"]
    sent: dict[str, list[tuple[int, bytes]]] = {s: [] for s in subjects}
    for i in range(90):
        subject = subjects[i % 3]
        payload = json.dumps({"i": i}).encode()
        (seq,) = publish(nats_service, subject, [payload])
        sent[subject].append((seq, payload))

    reader = JetStreamStreamReader(
        {
            "url": nats_service,
            "stream": stream,
            "subjects": f"{base}.a, {base}.b",
            "max_records_per_epoch": "40",
        }
    )
    start = offset_log(reader.initialOffset())
    end = offset_log(reader.latestOffset(start, None))
    parts = reader.partitions(start, end)
    assert [(p.start, p.end, p.subject) for p in parts] == [  # type: ignore[attr-defined]
        (0, 40, f"{base}.a"),
        (0, 40, f"{base}.b"),
    ]
    for part in parts:
        got = pa.Table.from_batches(list(reader.read(part)))
        subject = part.subject  # type: ignore[attr-defined]
        assert got.column("subject").to_pylist() == [subject] * got.num_rows
        assert got.column("seq").to_pylist() == [s for s, _ in sent[subject] if s <= 40]

    epochs, _ = run_epochs(reader, start)
    records = pa.concat_tables(t for _, _, t in epochs)
    wanted = sorted(
        (seq, payload.decode()) for s in subjects[:2] for seq, payload in sent[s]
    )  # every a and b message once, no "other"
    assert list(zip(records.column("seq").to_pylist(), records.column("data").to_pylist())) == (
        wanted
    )


def test_bad_payloads_are_reported_in_malformed_not_dropped(
    nats_service: str, stream_names: list[str]
) -> None:
    stream = unique_name()
    stream_names.append(stream)
    subject = f"{stream.lower()}.events"
    create_stream(nats_service, stream, [subject])
    good = {"user": "u1", "page": "p1", "ts": 5, "bytes": 10}
    payloads = [
        json.dumps(good).encode(),
        b"{not json",
        json.dumps({"user": "u2", "page": "p2", "ts": 6}).encode(),
        json.dumps({**good, "ts": "soon"}).encode(),
        b"\xff\xfe not utf-8",
        b"[1, 2]",
        json.dumps({**good, "page": None}).encode(),
    ]
    publish(nats_service, subject, payloads)
    reader = JetStreamStreamReader({"url": nats_service, "stream": stream, "schema": EVENTS})
    start = offset_log(reader.initialOffset())
    records = read_epoch(reader, start, offset_log(reader.latestOffset(start, None)))
    assert records.num_rows == len(payloads)
    malformed = records.column("_malformed").to_pylist()
    assert malformed[0] is None and malformed[6] is None
    reasons = [
        "invalid JSON",
        "missing field 'bytes'",
        "field 'ts' must be a number",
        "payload is not UTF-8",
        "not a JSON object",
    ]
    for i, reason in zip(range(1, 6), reasons):
        assert malformed[i].startswith(f"{stream}:{i + 1}: {reason}"), malformed[i]
    rows = records.select(["user", "page", "ts", "bytes"]).to_pylist()
    assert rows[0] == good
    assert rows[6] == {**good, "page": None}
    assert all(set(rows[i].values()) == {None} for i in range(1, 6))
    assert records.column("data").to_pylist()[1] == "{not json"


def test_the_read_limit_and_the_start_option(nats_service: str, stream_names: list[str]) -> None:
    stream = new_stream(nats_service, stream_names, 100)
    options = {"url": nats_service, "stream": stream, "max_records_per_epoch": "30"}
    reader = JetStreamStreamReader(options)
    assert reader.getDefaultReadLimit() == ReadMaxRows(30)
    start = {"seq": 10, "tick": 0}
    assert reader.latestOffset(start, reader.getDefaultReadLimit())["seq"] == 40
    assert reader.latestOffset(start, ReadMaxRows(7))["seq"] == 17
    assert reader.latestOffset(start, ReadAllAvailable())["seq"] == 100
    assert JetStreamStreamReader({**options, "start": "latest"}).initialOffset()["seq"] == 100
    assert JetStreamStreamReader({**options, "start": "42"}).initialOffset()["seq"] == 41


def test_the_backlog_is_what_the_stream_holds_past_an_epoch(
    nats_service: str, stream_names: list[str]
) -> None:
    """The autoscaler's signal: the messages past an epoch's end, as the stream holds them when
    asked (more land, it grows; the last epoch read, it is 0)."""
    stream = new_stream(nats_service, stream_names, 100)
    reader = JetStreamStreamReader(
        {"url": nats_service, "stream": stream, "max_records_per_epoch": "30"}
    )
    end = offset_log(reader.latestOffset({"seq": 0}, reader.getDefaultReadLimit()))
    assert reader.backlog(end) == 70
    feed(nats_service, stream, f"{stream.lower()}.events", generated(CONFIG, 100, 120))
    assert reader.backlog(end) == 90
    assert reader.backlog({"seq": 120}) == 0


def test_commit_shows_progress_on_a_durable_consumer(
    nats_service: str, stream_names: list[str]
) -> None:
    stream = new_stream(nats_service, stream_names, 250)
    reader = JetStreamStreamReader(
        {
            "url": nats_service,
            "stream": stream,
            "max_records_per_epoch": "100",
            "consumer": "rescaler_progress",
        }
    )

    async def info() -> Any:
        nc = await connect(nats_service)
        try:
            return await nc.jetstream().consumer_info(stream, "rescaler_progress")
        finally:
            await close(nc)

    start = offset_log(reader.initialOffset())
    for expected in (100, 200, 250):
        end = offset_log(reader.latestOffset(start, None))
        reader.commit(end)
        consumer = asyncio.run(info())
        assert consumer.ack_floor.stream_seq == expected
        assert consumer.num_pending == 250 - expected
        start = end


def test_messages_gone_before_they_were_read_are_data_loss(
    nats_service: str, stream_names: list[str]
) -> None:
    stream = new_stream(nats_service, stream_names, 100)
    options = {"url": nats_service, "stream": stream}
    reader = JetStreamStreamReader(options)
    start = offset_log(reader.initialOffset())
    end = offset_log(reader.latestOffset(start, ReadAllAvailable()))

    async def purge_below_41() -> None:
        nc = await connect(nats_service)
        try:
            await nc.jetstream().purge_stream(stream, seq=41)
        finally:
            await close(nc)

    asyncio.run(purge_below_41())
    assert stream_state(nats_service, stream).first_seq == 41
    with pytest.raises(DataLoss, match=r"no longer has sequences 1\.\.40"):
        read_epoch(reader, start, end)
    lenient = JetStreamStreamReader({**options, "fail_on_data_loss": "false"})
    assert read_epoch(lenient, start, end).column("seq").to_pylist() == list(range(41, 101))


def test_a_server_that_does_not_answer_is_a_clear_error() -> None:
    reader = JetStreamStreamReader({"url": f"nats://127.0.0.1:{free_port()}", "stream": "ANY"})
    with pytest.raises(NatsUnavailable, match="did not answer") as error:
        reader.initialOffset()
    assert (
        "start it with `start-stop-daemon --start --oknodo --background --exec "
        "/usr/sbin/nats-server -- -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server`"
    ) in str(error.value)


def test_a_missing_stream_is_a_clear_error(nats_service: str) -> None:
    stream = unique_name()
    reader = JetStreamStreamReader({"url": nats_service, "stream": stream})
    for call in (
        reader.initialOffset,
        lambda: reader.latestOffset({"seq": 0, "tick": 0}, None),
        lambda: list(reader.read(reader.partitions({"seq": 0}, {"seq": 10})[0])),
    ):
        with pytest.raises(StreamMissing, match=f"stream '{stream}' does not exist") as error:
            call()
        assert f"--stream {stream}" in str(error.value)
        assert f"nats stream add {stream}" in str(error.value)


def test_the_data_source_and_its_options() -> None:
    assert JetStreamSource.name() == JETSTREAM == "rescaler_jetstream"
    source = JetStreamSource({"stream": "CLICKS", "schema": "`user` string, n long, ok boolean"})
    assert source.schema() == (
        "`seq` bigint, `subject` string, `data` string, `user` string, `n` bigint, "
        "`ok` boolean, `_malformed` string"
    )
    bad = [
        ({}, "needs option stream"),
        ({"stream": "a.b"}, "not a valid JetStream stream name"),
        ({"stream": "S", "subjects": "x.*,x.y"}, "overlap"),
        ({"stream": "S", "subjects": "x.>,y.>"}, None),
        ({"stream": "S", "schema": "seq bigint"}, "sets itself"),
        ({"stream": "S", "schema": "a map<string,int>"}, "cannot read"),
        ({"stream": "S", "schema": "a decimal"}, "has type 'decimal'"),
        ({"stream": "S", "start": "yesterday"}, "option start"),
        ({"stream": "S", "max_records_per_epoch": "0"}, "at least 1"),
    ]
    for options, message in bad:
        if message is None:
            JetStreamStreamReader(options)
            continue
        with pytest.raises(ValueError, match=message):
            JetStreamStreamReader(options)


def test_the_feeder_cli_publishes_the_generator_once(
    nats_service: str, stream_names: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    stream = unique_name()
    stream_names.append(stream)
    argv = ["--url", nats_service, "--stream", stream, "--rows", "300", "--kind", "lines"]
    assert main(argv) == 0
    out = capsys.readouterr()
    assert f"300 records stored on {stream}/{stream.lower()}.lines" in out.out
    assert "300/300 published" in out.err
    assert main(argv) == 0  # again: the server drops every record as a duplicate
    assert "300 were already there" in capsys.readouterr().out
    assert main([*argv[:-4], "--rows", "100", "--start", "300", "--kind", "lines"]) == 0
    assert stream_state(nats_service, stream).messages == 400

    reader = JetStreamStreamReader(
        {"url": nats_service, "stream": stream, "max_records_per_epoch": "1000"}
    )
    start = offset_log(reader.initialOffset())
    records = read_epoch(reader, start, offset_log(reader.latestOffset(start, None)))
    lines = GeneratorConfig(kind="lines")
    expected = [r["line"] for b in generate(lines, 0, 400) for r in b.to_pylist()]
    assert [json.loads(d)["line"] for d in records.column("data").to_pylist()] == expected

    assert main(["--url", f"nats://127.0.0.1:{free_port()}", "--stream", "X", "--rows", "1"]) == 1
    assert "did not answer" in capsys.readouterr().err
    missing = unique_name()
    assert main(["--url", nats_service, "--stream", missing, "--rows", "1", "--no-create"]) == 1
    assert f"stream '{missing}' does not exist" in capsys.readouterr().err
