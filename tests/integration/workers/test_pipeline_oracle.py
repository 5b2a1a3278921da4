"""The data plane on real Spark (local[2]): every key of every stateful fragment against the oracle."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.integration.workers.fixtures import assert_matches_oracle, start_runner
from workers.oracle import expected_from_directory, expected_from_generator
from workers.pipeline.builtins import get_pipeline
from workers.sources.generator import GeneratorConfig

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ROWS = 5_000


def generator_config(pipeline: str, key_space: int) -> GeneratorConfig:
    return GeneratorConfig(kind=get_pipeline(pipeline).source_kind, key_space=key_space)


@pytest.mark.parametrize("pipeline", ["wordcount", "clickstream"])
def test_generator_run_matches_oracle(tmp_path: Path, pipeline: str) -> None:
    runner = start_runner(
        tmp_path, pipeline, "--epochs", "4", "--rows-per-epoch", str(ROWS), "--key-space", "3000"
    )
    runner.wait_exit()
    epochs = runner.epochs()
    assert [e["epoch"] for e in epochs] == [0, 1, 2, 3]
    assert all(e["rows"] == ROWS for e in epochs), [e["rows"] for e in epochs]
    assert epochs[-1]["source_offset"]["offset"] == 4 * ROWS
    assert {p["pu"] for p in epochs[-1]["per_pu"]} == {0, 1}, "one task per PU of the fragment"
    expected = expected_from_generator(pipeline, generator_config(pipeline, 3000), 4 * ROWS)
    assert_matches_oracle(tmp_path, pipeline, expected)


def test_kill_9_mid_run_then_restart_is_exact(tmp_path: Path) -> None:
    """kill -9 of the runner (driver, JVM and Python workers) at an arbitrary moment."""
    pipeline = "clickstream"
    args = ("--rows-per-epoch", str(ROWS), "--key-space", "3000")
    first = start_runner(tmp_path, pipeline, *args)  # unbounded: only the kill ends it
    first.wait_for(lambda: len(first.epochs()) >= 3, 240, "3 committed epochs")
    time.sleep(0.35)  # land somewhere inside a later epoch, not at a boundary
    first.kill()
    epochs = len(first.epochs()) + 3  # bounded after the kill: past every epoch it reached

    second = start_runner(tmp_path, pipeline, *args, "--epochs", str(epochs), log_name="restart")
    second.wait_exit()
    reported = sorted({e["epoch"] for e in second.epochs()})
    assert reported == list(range(epochs)), reported
    expected = expected_from_generator(pipeline, generator_config(pipeline, 3000), epochs * ROWS)
    assert_matches_oracle(tmp_path, pipeline, expected)


def _drop(directory: Path, name: str, lines: list[str]) -> None:
    """Write under a hidden name, then rename into place: the source never sees half a file."""
    tmp = directory / f".{name}"
    tmp.write_text("".join(line + "\n" for line in lines))
    os.replace(tmp, directory / name)


def test_directory_source_picks_up_late_files_and_reports_malformed(tmp_path: Path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    good = [
        {"user": f"u{i % 37}", "page": f"p{i % 11}", "ts": 1_000 + i * 100, "bytes": i}
        for i in range(400)
    ]
    _drop(inbox, "0001.jsonl", [json.dumps(r) for r in good[:200]] + ["{not json", "[1, 2]"])
    state = tmp_path / "state"
    runner = start_runner(state, "clickstream", "--source", f"dir:{inbox}", "--epochs", "2")
    runner.wait_for(lambda: len(runner.epochs()) >= 1, 180, "the first file's epoch")
    _drop(
        inbox,
        "0002.jsonl",
        [json.dumps(r) for r in good[200:]] + ['{"user": "u1", "page": "p1", "ts": "late"}'],
    )
    runner.wait_exit()
    epochs = runner.epochs()
    assert sum(e["malformed"] for e in epochs) == 3
    assert sum(e["rows"] for e in epochs) == 403
    samples = [s for e in epochs for s in e["malformed_samples"]]
    assert any("0002.jsonl:201" in s and "'ts' must be an integer" in s for s in samples), samples
    files = (state / "clickstream" / "source-manifest.txt").read_text().split()
    assert files == ["0001.jsonl", "0002.jsonl"]
    expected = expected_from_directory("clickstream", inbox, files)
    assert expected.malformed == 3
    assert_matches_oracle(state, "clickstream", expected)
