"""A user's own pipeline, from a module outside Rescaler, whose keyed state is a Spark
``StatefulProcessor``: run on real Spark, rescaled live, killed, restarted and rescaled by
stop-start, and checked against Spark's own ``transformWithState`` on the same input (an oracle
nobody here wrote), key by key and output by output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.integration.workers.fixtures import REPO, RunnerProcess, start_runner
from tests.integration.workers.tws_reference import normal_state
from workers.control import LocalControl
from workers.layout import sink_path
from workers.pipeline.placement import PlacementStore
from workers.readout import iter_state
from workers.rescale.local import LocalChannel, plan_local, rescale
from workers.rescale.orchestrator import Orchestrator
from workers.rescale.protocol import OperationRequest

pytestmark = [pytest.mark.integration, pytest.mark.spark]

FIXTURES = REPO / "tests" / "fixtures"
ROWS = 1_000
KEYS = 300
BATCHED = {"vnodes_per_step": 4, "steps_in_flight": 2}


@dataclass(frozen=True)
class Case:
    ref: str
    name: str  # the pipeline's name
    fragment: str
    #: the output column saying what closed a session ("gap" or "timer"), if there is one
    closed_by: int | None = None
    timers: bool = False  # every key with state keeps a timer


SESSIONS = Case("userpipe.sessions:build", "sessions", "sessions", closed_by=-1)
PAGES = Case("userpipe.pages:build", "pages", "page_views", timers=True)
REGION = Case("userpipe.region:build", "streaks", "by_user")
EXAMPLE = Case("examples.sessions.pipeline:build", "click_sessions", "sessions")
CASES = [
    pytest.param(SESSIONS, id="sessions-row-eventtime"),
    pytest.param(PAGES, id="pages-pandas-processingtime"),
    pytest.param(REGION, id="region-of-two-processors"),
]


@pytest.fixture(autouse=True)
def _user_module_on_the_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    # the runner's driver imports the user's module from its path; the executors get it from
    # the runner (addPyFile), not from this PYTHONPATH: local mode's Python workers are
    # started by Spark's daemon with the executor's own path
    monkeypatch.setenv("PYTHONPATH", str(FIXTURES))
    monkeypatch.setenv("RESCALER_PARALLEL_UNITS", "4")
    monkeypatch.delenv("RESCALER_VNODES", raising=False)
    sys.path.insert(0, str(FIXTURES))
    yield
    sys.path.remove(str(FIXTURES))


def launch(case: Case, state: Path, *args: str, log_name: str = "runner") -> RunnerProcess:
    runner = start_runner(
        state,
        case.name,
        "--rows-per-epoch",
        str(ROWS),
        "--key-space",
        str(KEYS),
        "--sink",
        "files",  # the outputs are compared file by file with Spark's
        *args,
        ref=case.ref,
        log_name=log_name,
    )
    return runner


def spark_reference(case: Case, tmp: Path, rows: int, *, idle: bool = False) -> dict[str, Any]:
    out = tmp / "reference.json"
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{FIXTURES}"}
    cmd = [
        sys.executable,
        "-m",
        "tests.integration.workers.tws_reference",
        "--pipeline",
        case.ref,
        "--rows-per-epoch",
        str(ROWS),
        "--rows",
        str(rows),
        "--key-space",
        str(KEYS),
        "--out",
        str(out),
        *(["--idle"] if idle else []),
    ]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"Spark's transformWithState failed:\n{done.stderr[-4000:]}"
    body: dict[str, Any] = json.loads(out.read_text())
    return body


def rescaler_outputs(case: Case, state: Path, epoch: int) -> Counter[tuple[Any, ...]]:
    """The output rows the sink holds for one epoch, every PU's (a replay rewrites a file)."""
    outputs: Counter[tuple[Any, ...]] = Counter()
    folder = sink_path(state / case.name, case.fragment, epoch, 0).parent
    for path in sorted(folder.glob("pu=*.arrow")):
        table = pa.ipc.open_file(str(path)).read_all()  # the output schema's columns
        for row in table.to_pylist():
            outputs[tuple(row.values())] += 1
    return outputs


def closed(case: Case, rows: Counter[tuple[Any, ...]]) -> Counter[tuple[Any, ...]]:
    """Rows with "gap" and "timer" both as "closed"."""
    if case.closed_by is None:
        return rows
    out: Counter[tuple[Any, ...]] = Counter()
    for row, n in rows.items():
        out[(*row[: case.closed_by], "closed" if row[case.closed_by] else "")] += n
    return out


def rescaler_state(case: Case, state: Path) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for row in iter_state(state, case.name, case.fragment):
        assert row["key"] not in found, f"{row['key']!r} is in two stores: I1 broken"
        found[row["key"]] = normal_state(row["value"])
    return found


def assert_same_as_spark(
    case: Case, state: Path, runner: RunnerProcess, *, rescaled: bool, idle: bool = False
) -> None:
    """``idle``: the stream was left idle after its last record (Spark's no-data batches
    compared too)."""
    # an epoch re-run after a kill -9 reports again: the last report of each counts
    epochs = list({e["epoch"]: e for e in runner.epochs()}.values())
    assert [e["epoch"] for e in epochs] == list(range(len(epochs))), "no epoch lost"
    rows = epochs[-1]["source_offset"]["offset"]
    assert rows == sum(e["rows"] for e in epochs), "every source row folded exactly once"
    reference = spark_reference(case, state, rows, idle=idle)
    batches = reference["batches"]
    assert sum(b["rows"] for b in batches) == rows
    if not rescaled:  # epoch i is Spark's batch i: the same rows, the same times
        assert all(e["rows"] for e in epochs) or idle
        assert [b["rows"] for b in batches] == [e["rows"] for e in epochs]
        pairs = [
            (Counter(tuple(r) for r in b["outputs"]), rescaler_outputs(case, state, e["epoch"]))
            for b, e in zip(batches, epochs, strict=True)
        ]
    else:
        # rows held while their vnode moves are folded (and emit) at the epoch that acquires
        # it, at their own epoch's clock; an empty epoch forced for a rescale is a Spark
        # no-data batch, which a busy Spark stream never runs: a timer may close a session
        # there that Spark's next batch closes by its gap. Rows may come in another epoch and
        # the closing reason may differ, never the rows
        expected = Counter(tuple(r) for b in batches for r in b["outputs"])
        actual = Counter[tuple[Any, ...]]()
        for e in epochs:
            actual.update(rescaler_outputs(case, state, e["epoch"]))
        empty = any(not e["rows"] for e in epochs)
        pairs = [(closed(case, expected), closed(case, actual)) if empty else (expected, actual)]
    assert sum(sum(expected.values()) for expected, _ in pairs) > 0, "Spark emitted rows"
    for i, (expected, actual) in enumerate(pairs):
        assert actual == expected, (
            f"outputs ({i}) differ from Spark's: only Spark {list((expected - actual).items())[:5]}, "
            f"only Rescaler {list((actual - expected).items())[:5]}"
        )
    spark_state = reference["state"]
    ours = rescaler_state(case, state)
    assert set(ours) == set(spark_state), "the same keys hold state"
    differing = [k for k in spark_state if ours[k] != spark_state[k]]
    assert not differing, (
        f"{len(differing)} keys' state differs from Spark's, e.g. {differing[0]!r}: "
        f"Rescaler {ours[differing[0]]}, Spark {spark_state[differing[0]]}"
    )
    if case.closed_by is not None:
        by_timer = sum(1 for b in batches for r in b["outputs"] if r[case.closed_by] == "timer")
        assert by_timer > 0, "event-time timers closed sessions"
    elif case.timers:
        assert all("$timers" in v for v in ours.values()), "every key keeps its timer"


def stop(runner: RunnerProcess) -> None:
    LocalControl(runner.control_dir).submit("stop")
    runner.wait_exit()


def request(
    case: Case, change: dict[str, list[int]], strategy: str, granularity: Any = BATCHED
) -> OperationRequest:
    return OperationRequest.parse(
        {"changes": {case.fragment: change}, "strategy": strategy, "granularity": granularity}
    )


def pus(case: Case, state: Path) -> tuple[int, ...]:
    placements = PlacementStore(state / case.name).load()
    assert placements is not None
    return placements[case.fragment].parallel_units


@pytest.mark.parametrize(
    "case",
    # epoch by epoch against Spark's batches: processing time here, event time with timers in
    # the example project's test below (a sessions processor like SESSIONS); the region and
    # SESSIONS are compared with Spark, outputs and state, after their rescales
    [pytest.param(PAGES, id="pages-pandas-processingtime")],
)
def test_the_same_processor_gives_spark_s_outputs_and_state(case: Case, tmp_path: Path) -> None:
    runner = launch(case, tmp_path, "--epochs", "6")
    runner.wait_exit()
    registry = json.loads((tmp_path / case.name / "pipeline.json").read_text())
    assert registry["ref"] == case.ref
    assert "userpipe.zip shipped to the executors" in runner.log_path.read_text()
    assert_same_as_spark(case, tmp_path, runner, rescaled=False)


@pytest.mark.parametrize("case", CASES)
def test_live_scale_out_migration_killed_and_stop_start_scale_in(
    case: Case, tmp_path: Path
) -> None:
    runner = launch(case, tmp_path)
    runner.wait_for(lambda: len(runner.epochs()) >= 2, 240, "two committed epochs")
    # a live scale-out: state, lists, maps and timers move with their vnodes, and the moving
    # vnodes with the most entries by key range (the sealed range's timers fire on its target).
    # Only those: a vnode's ranges move one after the other, and the file sink compared below
    # keeps the last 50 epochs
    scale_out = request(case, {"added_parallel_units": [2]}, "live")
    planned = plan_local(tmp_path / case.name, scale_out).fragments[case.fragment]
    most = max(planned.load.get(m.vnode, (0, 0))[0] for m in planned.moves)
    cap = {**BATCHED, "max_keys_per_step": max(most - 1, 1)}
    result = rescale(
        tmp_path / case.name,
        request(case, {"added_parallel_units": [2]}, "live", cap),
        timeout_s=600,
    ).to_json()
    assert result["status"] == "completed", result
    assert any(s["key_range"] for s in result["progress"]["steps"]), "a vnode was cut by key"
    assert pus(case, tmp_path) == (0, 1, 2)
    # a live migration, the runner killed -9 with some steps done and one in flight
    orch = Orchestrator(
        LocalChannel(LocalControl(runner.control_dir)),
        "migrate",
        plan_local(
            tmp_path / case.name,
            request(case, {"added_parallel_units": [3], "removed_parallel_units": [1]}, "live"),
        ),
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        steps = (orch.tick().to_json()["progress"] or {}).get("steps", [])
        if any(s["phase"] == "done" for s in steps) and any(
            s["phase"] not in ("done", "pending") for s in steps
        ):
            break
        time.sleep(0.05)
    runner.kill()
    restarted = launch(case, tmp_path, log_name="restart")
    assert orch.run(timeout_s=600).to_json()["status"] == "completed"
    assert pus(case, tmp_path) == (0, 2, 3)
    # a stop-start scale-in, then a few more epochs of records
    result = rescale(
        tmp_path / case.name,
        request(case, {"removed_parallel_units": [3]}, "stop_start"),
        timeout_s=600,
    ).to_json()
    assert result["status"] == "completed", result
    assert pus(case, tmp_path) == (0, 2)
    last = restarted.epochs()[-1]["epoch"]
    restarted.wait_for(
        lambda: restarted.epochs()[-1]["epoch"] >= last + 3 and restarted.epochs()[-1]["rows"] > 0,
        240,
        "three more epochs, the last one with records",
    )
    stop(restarted)
    assert_same_as_spark(case, tmp_path, restarted, rescaled=True)


def test_timers_due_at_the_last_watermark_fire_on_an_idle_stream(tmp_path: Path) -> None:
    """Spark runs a no-data batch once the watermark has moved on, on an idle stream too: the
    sessions its timers close there come here as well, in the same epoch, exactly once (the
    runner stops after that epoch by itself: nothing else forces one)."""
    runner = launch(SESSIONS, tmp_path, "--source-rows", str(6 * ROWS), "--epochs", "7")
    runner.wait_exit()
    epochs = [e["rows"] for e in runner.epochs()]
    assert epochs == [ROWS] * 6 + [0], epochs
    assert rescaler_outputs(SESSIONS, tmp_path, 6), "the last watermark's timers fired"
    assert_same_as_spark(SESSIONS, tmp_path, runner, rescaled=False, idle=True)


def test_a_keyed_region_of_two_operators_is_one_shuffle() -> None:
    """Two processors on one key are one exchange; two fragments (clickstream) are two."""

    def exchanges(ref: str) -> int:
        env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{FIXTURES}"}
        cmd = [sys.executable, "-m", "tests.integration.workers.exchanges", ref]
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return int(done.stdout.strip().splitlines()[-1])

    assert exchanges(REGION.ref) == 1
    assert exchanges("clickstream") == 2


def test_the_example_project_equals_spark_and_its_own_oracle(tmp_path: Path) -> None:
    """examples/: run as a user would, compared with Spark's transformWithState and with the
    example's plain-Python oracle (closed sessions and every open session)."""
    from examples.sessions.oracle import expected, generated

    runner = launch(EXAMPLE, tmp_path, "--epochs", "6")
    runner.wait_exit()
    assert_same_as_spark(EXAMPLE, tmp_path, runner, rescaled=False)
    closed, sessions = expected(generated(6, ROWS, KEYS))
    outputs: Counter[tuple[Any, ...]] = Counter()
    for epoch in range(6):
        outputs.update(rescaler_outputs(EXAMPLE, tmp_path, epoch))
    assert sum(closed.values()) > 0
    assert outputs == closed
    state = rescaler_state(EXAMPLE, tmp_path)
    assert {k: v["session"] for k, v in state.items() if "session" in v} == {
        u: [s.start, s.last, s.clicks, s.nbytes] for u, s in sessions.items()
    }
