"""The runner restarts a failed streaming query, and counts failures in a row (real Spark).

A sink that fails once at each of six epochs (``flaky_sink.py``) fails the query six times, each
time after progress: the runner restarts it every time (it gave up at the fourth before), and
the re-run epochs leave the state exactly as the oracle says (the stores had committed them, the
sink is written again)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.workers.fixtures import assert_matches_oracle, start_runner
from tests.integration.workers.flaky_sink import FAIL_EPOCHS
from workers.control import LocalControl
from workers.oracle import expected_from_generator
from workers.sources.generator import GeneratorConfig

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ROWS, KEYS = 2_000, 1_000


def test_transient_failures_with_progress_between_them_never_stop_the_runner(
    tmp_path: Path,
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    runner = start_runner(
        tmp_path / "state",
        "wordcount",
        "--rows-per-epoch", str(ROWS), "--key-space", str(KEYS),
        ref="tests.integration.workers.flaky_sink:build",
        env={"FLAKY_SINK_DIR": str(marks)},
    )  # fmt: skip
    last = max(FAIL_EPOCHS) + 2
    runner.wait_for(lambda: len(runner.epochs()) > last, 600, f"epoch {last}")
    LocalControl(runner.control_dir).submit("stop")
    runner.wait_exit()
    failed = sorted(int(p.name.split("-")[1]) for p in marks.glob("failed-*"))
    assert failed == list(FAIL_EPOCHS), "every planned failure happened"
    log = runner.log_path.read_text(errors="replace")
    assert log.count("the streaming query failed") >= len(FAIL_EPOCHS), log[-3000:]
    assert "in a row; last" not in log
    epochs = runner.epochs()
    assert [e["epoch"] for e in epochs] == list(range(len(epochs))), "no epoch lost or repeated"
    end = epochs[-1]["source_offset"]["offset"]
    expected = expected_from_generator(
        "wordcount", GeneratorConfig(kind="lines", key_space=KEYS), end
    )
    assert_matches_oracle(tmp_path / "state", "wordcount", expected)
