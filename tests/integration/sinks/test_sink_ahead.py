"""What each sink says it holds (``last_epoch``), and a runner refusing to write into a target
that holds a later epoch than its state directory has committed (another run's target)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa

from tests.integration.natsservice import unique_name
from workers.layout import sink_path
from workers.sinks import EpochOutputs, FanOut, sink_from_uri
from workers.sinks.delta import DeltaSink
from workers.sinks.files import FileSink
from workers.sinks.nats import NatsSink
from workers.sinks.postgres import PostgresSink

REPO = Path(__file__).resolve().parents[3]


def outputs(fragment: str, epoch: int, pu: int) -> EpochOutputs:
    return EpochOutputs(fragment, epoch, pu, pa.table({"key": ["a", "b"], "seq": [1, 2]}))


def test_each_sink_knows_its_newest_epoch(
    tmp_path: Path, sink_database: str, nats_service: str, stream_names: list[str]
) -> None:
    stream = unique_name("RESCALER_AHEAD")
    stream_names.append(stream)
    sinks = [
        PostgresSink(sink_database, "ahead"),
        DeltaSink(str(tmp_path / "delta")),
        NatsSink(nats_service, f"{stream.lower()}.out", stream),
        FileSink(tmp_path / "files"),
    ]
    try:
        for sink in sinks:
            assert sink.last_epoch("frag") is None, sink.describe()
            for epoch, pu in ((3, 0), (3, 1), (4, 1), (5, 0)):  # epochs in order
                sink.write(outputs("frag", epoch, pu))
            assert sink.last_epoch("frag") == 5, sink.describe()
            assert sink.last_epoch("other") is None, sink.describe()
        assert FanOut(sinks[:2]).last_epoch("frag") == 5
    finally:
        for sink in sinks:
            sink.close()


def test_a_runner_on_a_fresh_state_refuses_a_sink_ahead_of_it(tmp_path: Path) -> None:
    """The files sink holds epoch 9 of word_count; the state directory has no checkpoint."""
    state = tmp_path / "state"
    FileSink(state / "wordcount").write(outputs("word_count", 9, 0))
    assert sink_path(state / "wordcount", "word_count", 9, 0).exists()
    assert sink_from_uri("files").bound(state / "wordcount").last_epoch("word_count") == 9
    done = subprocess.run(
        [sys.executable, "-m", "workers", "run", "--pipeline", "wordcount", "--state-dir", str(state)],
        cwd=REPO, env=dict(os.environ), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "already holds epoch 9 of word_count" in done.stderr
    assert "committed only up to epoch -1" in done.stderr and "Traceback" not in done.stderr
