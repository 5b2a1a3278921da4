"""A user pipeline on a source Rescaler did not write (Spark's own JSON file source): an idle
stream on which a live scale-out and a stop-start complete, records before and after, and the
state equal to the oracle key by key."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.integration.workers.fixtures import RunnerProcess, exported, start_runner
from workers.control import LocalControl
from workers.pipeline.placement import PlacementStore
from workers.rescale.local import rescale
from workers.rescale.protocol import OperationRequest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
REF, NAME, FRAGMENT = "userpipe.spark_files:build", "spark_files", "words"


@pytest.fixture(autouse=True)
def _user_module(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYTHONPATH", str(FIXTURES))
    monkeypatch.setenv("RESCALER_PARALLEL_UNITS", "4")
    monkeypatch.setenv("USERPIPE_INBOX", str(tmp_path / "inbox"))
    monkeypatch.syspath_prepend(str(FIXTURES))
    (tmp_path / "inbox").mkdir()


def drop(inbox: Path, name: str, words: list[str], first_seq: int) -> None:
    """Write a file under a hidden name, then rename it in: Spark lists only whole files."""
    tmp = inbox / f".{name}.tmp"
    tmp.write_text(
        "".join(json.dumps({"seq": first_seq + i, "word": w}) + "\n" for i, w in enumerate(words))
    )
    tmp.rename(inbox / f"{name}.json")


def operation(change: dict[str, list[int]], strategy: str) -> OperationRequest:
    return OperationRequest.parse(
        {"changes": {FRAGMENT: change}, "strategy": strategy, "granularity": "all_at_once"}
    )


def pus(state: Path) -> tuple[int, ...]:
    placements = PlacementStore(state / NAME).load()
    assert placements is not None
    return placements[FRAGMENT].parallel_units


def rows(runner: RunnerProcess) -> int:
    return sum(e["rows"] for e in runner.epochs())


def test_a_spark_file_source_rescales_idle_and_busy(tmp_path: Path) -> None:
    inbox = tmp_path / "inbox"
    runner = start_runner(tmp_path, NAME, ref=REF)
    runner.wait_for(lambda: len(runner.epochs()) >= 1, 240, "the first (empty) epoch")
    # idle: the file source has nothing and knows nothing of barriers
    result = rescale(
        tmp_path / NAME, operation({"added_parallel_units": [2]}, "live"), timeout_s=300
    )
    assert result.to_json()["status"] == "completed"
    assert pus(tmp_path) == (0, 1, 2) and rows(runner) == 0

    words = [f"w{(i * 7919) % 97}" for i in range(3_000)]
    for k in range(6):
        drop(inbox, f"part-{k}", words[k * 500 : (k + 1) * 500], k * 500)
    runner.wait_for(lambda: rows(runner) >= 3_000, 300, "every file")
    result = rescale(
        tmp_path / NAME, operation({"removed_parallel_units": [0]}, "stop_start"), timeout_s=300
    )
    assert result.to_json()["status"] == "completed"
    assert pus(tmp_path) == (1, 2)
    more = [f"v{i % 13}" for i in range(400)]
    drop(inbox, "part-late", more, 3_000)
    runner.wait_for(lambda: rows(runner) >= 3_400, 300, "the late file")
    LocalControl(runner.control_dir).submit("stop")
    runner.wait_exit()

    expected = Counter(words + more)
    state = {k: r["value"] for k, r in exported(tmp_path, NAME, FRAGMENT).items()}
    assert state == dict(expected)
    logged = tmp_path / NAME / "checkpoint" / "offsets"
    last = max(int(p.name) for p in logged.iterdir() if p.name.isdigit())
    own, control = (logged / str(last)).read_text().splitlines()[2:4]
    assert "logOffset" in own and "tick" not in own, "the file source's offsets are its own"
    assert json.loads(control)["logOffset"] >= 0, "the control stream is Spark's file source"
    ticks = list((tmp_path / NAME / "barrier-ticks.d").glob("tick-*"))
    assert ticks, "barriers were forced through the control stream"


def test_a_source_without_an_order_is_folded_in_the_order_its_files_hold(tmp_path: Path) -> None:
    """``Pipeline(order=None)``: Spark's JSON file source with no sequence in its records. The
    runner numbers them (``workers.source_order``); each key's records are folded in the order
    the files hold them, through a live scale-out (held records replayed with the acquiring
    epoch's) and a stop-start, and nothing is lost or counted twice."""
    inbox = tmp_path / "inbox"
    runner = start_runner(tmp_path, "spark_unordered", ref="userpipe.spark_files:unordered")
    runner.wait_for(lambda: len(runner.epochs()) >= 1, 240, "the first (empty) epoch")
    words = [f"w{(i * 7919) % 41}" for i in range(4_000)]

    def put(k: int) -> None:  # file k holds lines n = 500k .. 500k + 499, in that order
        lines = [
            {"word": w, "n": k * 500 + i} for i, w in enumerate(words[k * 500 : (k + 1) * 500])
        ]
        tmp = inbox / f".part-{k}.tmp"
        tmp.write_text("".join(json.dumps(line) + "\n" for line in lines))
        tmp.rename(inbox / f"part-{k}.json")

    for k in range(3):
        put(k)
    runner.wait_for(lambda: rows(runner) >= 1_500, 300, "the first files")

    # files keep arriving while the live scale-out holds and moves vnodes
    def feed() -> None:
        for k in range(3, 7):
            put(k)
            time.sleep(0.7)

    feeder = threading.Thread(target=feed)
    feeder.start()
    request = OperationRequest.parse({"changes": {"words": {"added_parallel_units": [2, 3]}}})
    result = rescale(tmp_path / "spark_unordered", request, timeout_s=300).to_json()
    feeder.join()
    assert result["status"] == "completed", result
    runner.wait_for(lambda: rows(runner) >= 3_500, 300, "the files sent during the scale-out")
    result = rescale(
        tmp_path / "spark_unordered",
        OperationRequest.parse(
            {"changes": {"words": {"removed_parallel_units": [0]}}, "strategy": "stop_start"}
        ),
        timeout_s=300,
    ).to_json()
    assert result["status"] == "completed", result
    put(7)
    runner.wait_for(lambda: rows(runner) >= 4_000, 300, "the last file")
    LocalControl(runner.control_dir).submit("stop")
    runner.wait_exit()

    last = {w: i for i, w in enumerate(words)}
    expected = {w: {"count": c, "last": last[w], "disorder": 0} for w, c in Counter(words).items()}
    state = {k: r["value"] for k, r in exported(tmp_path, "spark_unordered", "words").items()}
    assert state == expected
