"""NatsSink against the real NATS server, in streams created and deleted by each test."""

from __future__ import annotations

import asyncio
import json
import pickle
import time
from typing import Any

import pytest

from tests.integration.natsservice import read_subject, stream_state, unique_name
from tests.integration.services import free_port
from tests.integration.sinks.data import FRAGMENT, WRITES, outputs
from workers.natsio import close, connect
from workers.sinks import EpochOutputs, SinkError, sink_from_uri
from workers.sinks.nats import NatsSink, encode_row, msg_id, parse_msg_id

pytestmark = [pytest.mark.integration]


def expected_messages(writes: list[EpochOutputs]) -> list[tuple[str, dict[str, Any]]]:
    """(Nats-Msg-Id, row) of every row of every write once, in write order."""
    return [
        (f"{out.fragment}:{out.epoch}:{out.pu}:{i}", row)
        for out in writes
        for i, row in enumerate(out.table.to_pylist())
    ]


def messages(url: str, stream: str, subject: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        (m["headers"]["Nats-Msg-Id"], json.loads(m["data"]))
        for m in read_subject(url, stream, subject)
    ]


def test_two_epochs_two_pus_then_replays_change_nothing(
    nats_service: str, stream_names: list[str]
) -> None:
    stream = unique_name()
    stream_names.append(stream)
    subject = f"rescaler.test.{stream.lower()}"
    sink = NatsSink(nats_service, subject, stream)
    assert sink._io is None  # lazy: nothing opened before the first write
    writes = [outputs(epoch, pu) for epoch, pu in WRITES]
    assert [sink.write(out) for out in writes] == [True] * len(writes)
    stored = stream_state(nats_service, stream).messages

    # a crash after the sink published epoch 2 but before Spark committed it: both PUs publish
    # again from sinks unpickled in fresh executors; PU 1 finished last, so the last message
    # on the subject shows its write complete, and PU 0's rows are dropped by the server
    for pu in (1, 0):
        replayed = pickle.loads(pickle.dumps(sink))
        assert replayed._io is None
        assert replayed.write(outputs(2, pu)) is False
        replayed.close()
    assert sink.write(outputs(1, 1)) is False
    sink.close()

    assert stream_state(nats_service, stream).messages == stored
    assert messages(nats_service, stream, subject) == expected_messages(writes)


def test_a_sink_creates_its_stream_with_the_duplicate_window(
    nats_service: str, stream_names: list[str]
) -> None:
    subject = f"rescaler.test.{unique_name().lower()}"
    sink = sink_from_uri(f"{nats_service}/{subject}?duplicate_window_s=30")
    assert isinstance(sink, NatsSink)
    assert sink.write(outputs(0, 0))
    assert sink._io is not None
    stream = sink._io.stream
    assert stream is not None and stream.startswith("RESCALER_RESCALER_TEST_")
    stream_names.append(stream)
    sink.close()

    async def window() -> float:
        nc = await connect(nats_service)
        try:
            return float((await nc.jetstream().stream_info(stream)).config.duplicate_window)
        finally:
            await close(nc)

    assert asyncio.run(window()) == 30.0
    assert messages(nats_service, stream, subject) == expected_messages([outputs(0, 0)])


def wait_until_ids_forgotten(url: str, probe_subject: str, timeout_s: float = 30.0) -> None:
    """Return once the server has forgotten every message id stored so far. The server purges
    ids on a timer, late under load, so a fixed sleep would be flaky: store a probe id now and
    re-publish it until the server no longer calls it a duplicate (ids expire in store order)."""

    async def go() -> None:
        nc = await connect(url)
        js = nc.jetstream()
        headers = {"Nats-Msg-Id": "probe"}
        try:
            assert not (await js.publish(probe_subject, b"", headers=headers)).duplicate
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                await asyncio.sleep(0.2)
                if not (await js.publish(probe_subject, b"", headers=headers)).duplicate:
                    return
            raise AssertionError(f"message ids still remembered after {timeout_s}s")
        finally:
            await close(nc)

    asyncio.run(go())


def test_a_replay_after_the_duplicate_window(nats_service: str, stream_names: list[str]) -> None:
    """What the docstring promises beyond the window: the PU whose write is the last message on
    the subject is still skipped; another PU's rows are published again (consumers see them
    twice, with the same Nats-Msg-Id)."""
    stream = unique_name()
    stream_names.append(stream)
    base = f"rescaler.test.{stream.lower()}"
    subject, probe = f"{base}.out", f"{base}.probe"

    async def create() -> None:
        nc = await connect(nats_service)
        try:
            await nc.jetstream().add_stream(
                name=stream, subjects=[subject, probe], duplicate_window=2.0
            )
        finally:
            await close(nc)

    asyncio.run(create())
    sink = NatsSink(nats_service, subject, stream, create_stream=False)
    first, last = outputs(0, 0), outputs(0, 1)
    assert sink.write(first) and sink.write(last)
    assert sink.write(first) is False  # within the window: every row a duplicate
    wait_until_ids_forgotten(nats_service, probe)
    assert sink.write(last) is False  # the last message on the subject is its last row
    assert sink.write(first) is True  # published again: the documented limit of the window
    sink.close()
    got = messages(nats_service, stream, subject)
    assert got == expected_messages([first, last]) + expected_messages([first])


def test_a_server_that_does_not_answer_is_a_clear_error() -> None:
    sink = NatsSink(f"nats://127.0.0.1:{free_port()}", "rescaler.test.nowhere")
    with pytest.raises(SinkError, match="did not answer") as error:
        sink.write(outputs(0, 0))
    assert "start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server" in str(
        error.value
    )


def test_a_missing_stream_is_a_clear_error_without_create(nats_service: str) -> None:
    stream = unique_name()
    sink = NatsSink(nats_service, f"rescaler.test.{stream.lower()}", stream, create_stream=False)
    with pytest.raises(SinkError, match=f"stream '{stream}' does not exist") as error:
        sink.write(outputs(0, 0))
    assert f"nats stream add {stream}" in str(error.value)
    sink.close()


def test_message_ids_and_rows() -> None:
    assert parse_msg_id(msg_id("a:b", 12, 3, 4)) == ("a:b", 12, 3, 4)
    assert parse_msg_id("something else") is None
    assert parse_msg_id(None) is None
    assert json.loads(encode_row({"k": "x", "v": float("nan"), "b": b"\x00"})) == {
        "k": "x",
        "v": None,
        "b": "AA==",
    }
    assert FRAGMENT in msg_id(FRAGMENT, 0, 0, 0)
