"""Control on a stream that receives nothing: rescales, a cancel and a stop must not wait for
records (workers/idle.py forces empty epochs). Real Spark (local[2]), the directory source, and
the oracle over every file the stream took, before and after the operation."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.workers.fixtures import RunnerProcess, assert_matches_oracle, start_runner
from workers.control import LocalControl
from workers.oracle import expected_from_directory
from workers.pipeline.builtins import get_pipeline
from workers.pipeline.placement import PlacementStore
from workers.rescale.local import LocalChannel, plan_local
from workers.rescale.orchestrator import Orchestrator
from workers.rescale.protocol import OperationRequest

pytestmark = [pytest.mark.integration, pytest.mark.spark]

PIPELINE = "clickstream"
VNODES = 32
BATCHED = {"vnodes_per_step": 4, "steps_in_flight": 2}


@pytest.fixture(autouse=True)
def _small_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RESCALER_PARALLEL_UNITS", "4")
    monkeypatch.setenv("RESCALER_VNODES", str(VNODES))


class Inbox:
    """The source directory: files of deterministic click events, dropped whole (rename)."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.files = 0

    def drop(self, records: int) -> str:
        self.files += 1
        name = f"{self.files:04d}.jsonl"
        base = self.files * 100_000
        lines = [
            json.dumps(
                {
                    "user": f"u{(base + i) * 7919 % 613}",
                    "page": f"p{(base + i) % 41}",
                    "ts": base + i * 250,
                    "bytes": i % 977,
                }
            )
            for i in range(records)
        ]
        tmp = self.dir / f".{name}"
        tmp.write_text("".join(line + "\n" for line in lines))
        os.replace(tmp, self.dir / name)
        return name


def rows_seen(runner: RunnerProcess) -> int:
    return sum(e["rows"] for e in runner.epochs())


def launch(state: Path, inbox: Inbox, *args: str, log_name: str = "runner") -> RunnerProcess:
    runner = start_runner(state, PIPELINE, "--source", f"dir:{inbox.dir}", *args, log_name=log_name)
    return runner


def wait_idle(runner: RunnerProcess, rows: int) -> None:
    """Every record dropped so far is committed, and the stream has nothing more."""
    runner.wait_for(lambda: rows_seen(runner) >= rows, 240, f"{rows} rows committed")
    assert rows_seen(runner) == rows


def request(change: dict[str, list[int]], strategy: str, granularity: Any) -> OperationRequest:
    return OperationRequest.parse(
        {
            "changes": {f.name: change for f in get_pipeline(PIPELINE).fragments},
            "strategy": strategy,
            "granularity": granularity,
        }
    )


def orchestrator(
    state: Path,
    runner: RunnerProcess,
    op: str,
    req: OperationRequest,
    *,
    step_timeout_s: float = 30,  # a healthy idle operation must never trip the watchdog
) -> Orchestrator:
    return Orchestrator(
        LocalChannel(LocalControl(runner.control_dir)),
        op,
        plan_local(state / PIPELINE, req),
        step_timeout_s=step_timeout_s,
    )


def finish_and_check(state: Path, inbox: Inbox, runner: RunnerProcess, rows: int) -> None:
    """Records that arrive after the operation land on the new owners; stop; the oracle."""
    before = len(runner.epochs())
    inbox.drop(500)
    wait_idle(runner, rows + 500)
    after = [e for e in runner.epochs()[before:] if e["rows"]]
    owners = PlacementStore(state / PIPELINE).load()
    assert owners is not None
    for frag, placement in owners.items():
        busy = {p["pu"] for e in after for p in e["per_pu"] if p["fragment"] == frag and p["rows"]}
        assert busy <= set(placement.parallel_units), (frag, busy, placement.parallel_units)
    users = owners[get_pipeline(PIPELINE).fragments[0].name]
    busy = {
        p["pu"] for e in after for p in e["per_pu"] if p["fragment"] == users.fragment and p["rows"]
    }
    assert busy == set(users.parallel_units), (
        f"new records reach every owner {users.parallel_units}, not only {busy}"
    )
    LocalControl(runner.control_dir).submit("stop")  # the stop itself needs an idle barrier
    runner.wait_exit(timeout=120)
    files = (state / PIPELINE / "source-manifest.txt").read_text().split()
    assert len(files) == inbox.files
    assert_matches_oracle(state, PIPELINE, expected_from_directory(PIPELINE, inbox.dir, files))


@pytest.mark.parametrize("traffic", ["idle", "trickle"])
def test_live_scale_out_on_an_idle_stream_completes(tmp_path: Path, traffic: str) -> None:
    inbox = Inbox(tmp_path / "inbox")
    state = tmp_path / "state"
    inbox.drop(2_000)
    runner = launch(state, inbox)
    wait_idle(runner, 2_000)
    quiet_from = len(runner.epochs())

    stop_trickle = threading.Event()

    def trickle() -> None:  # a record now and then: barriers come from data and from ticks
        while not stop_trickle.wait(1.5):
            inbox.drop(3)

    trickler = threading.Thread(target=trickle, daemon=True)
    if traffic == "trickle":
        trickler.start()
    req = request({"added_parallel_units": [2, 3]}, "live", BATCHED)
    started = time.monotonic()
    result = orchestrator(state, runner, "idle-out", req).run(timeout_s=180).to_json()
    elapsed = time.monotonic() - started
    stop_trickle.set()
    if traffic == "trickle":
        trickler.join()
    assert result["status"] == "completed", result
    assert all(s["phase"] == "done" for s in result["progress"]["steps"])
    during = runner.epochs()[quiet_from:]
    if traffic == "idle":
        assert during and all(e["rows"] == 0 for e in during), "nothing arrived: empty epochs"
    print(f"{traffic} live scale-out 2->4: {elapsed:.1f}s from request to completion")
    owners = PlacementStore(state / PIPELINE).load()
    assert owners is not None and all(p.parallel_units == (0, 1, 2, 3) for p in owners.values())
    rows = rows_seen(runner) if traffic == "idle" else 2_000 + 3 * (inbox.files - 1)
    wait_idle(runner, rows)
    finish_and_check(state, inbox, runner, rows)


def test_stop_start_scale_in_on_an_idle_stream_completes(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "inbox")
    state = tmp_path / "state"
    inbox.drop(2_000)
    runner = launch(state, inbox, "--initial-pus", "3")
    wait_idle(runner, 2_000)
    result = (
        orchestrator(
            state,
            runner,
            "idle-in",
            request({"removed_parallel_units": [1, 2]}, "stop_start", "all_at_once"),
        )
        .run(timeout_s=180)
        .to_json()
    )
    assert result["status"] == "completed", result
    owners = PlacementStore(state / PIPELINE).load()
    assert owners is not None and all(p.parallel_units == (0,) for p in owners.values())
    finish_and_check(state, inbox, runner, 2_000)


def test_cancel_on_an_idle_stream_ends_consistently(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "inbox")
    state = tmp_path / "state"
    inbox.drop(2_000)
    runner = launch(state, inbox)
    wait_idle(runner, 2_000)
    orch = orchestrator(
        state, runner, "idle-cancel", request({"added_parallel_units": [2, 3]}, "live", "fluid")
    )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        steps = (orch.tick().to_json()["progress"] or {}).get("steps", [])
        if sum(s["phase"] == "done" for s in steps) >= 2:
            break
        time.sleep(0.1)
    orch.cancel()
    result = orch.run(timeout_s=180).to_json()
    assert result["status"] == "cancelled", result
    moved = {
        (s["fragment"], v)
        for s in result["progress"]["steps"]
        if s["phase"] == "done"
        for v in s["vnodes"]
    }
    assert 2 <= len(moved) < 2 * VNODES
    owners = PlacementStore(state / PIPELINE).load()
    assert owners is not None
    for name, placement in owners.items():
        for vnode, pu in enumerate(placement.mapping):
            assert (pu in (2, 3)) == ((name, vnode) in moved), f"{name} vnode {vnode} on PU {pu}"
    assert rows_seen(runner) == 2_000
    finish_and_check(state, inbox, runner, 2_000)


def test_kill_9_while_idle_mid_operation_then_restart(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "inbox")
    state = tmp_path / "state"
    inbox.drop(2_000)
    runner = launch(state, inbox)
    wait_idle(runner, 2_000)
    orch = orchestrator(
        state,
        runner,
        "idle-kill",
        request({"added_parallel_units": [2, 3]}, "live", BATCHED),
        step_timeout_s=300,  # the restart (a new JVM) takes longer than a healthy step
    )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        steps = (orch.tick().to_json()["progress"] or {}).get("steps", [])
        if sum(s["phase"] == "done" for s in steps) >= 1 and any(
            s["phase"] not in ("done", "pending") for s in steps
        ):
            break  # some steps done, one in flight, nothing arriving
        time.sleep(0.05)
    else:
        raise AssertionError("the operation never got going on the idle stream")
    runner.kill()
    restarted = launch(state, inbox, log_name="restart")
    result = orch.run(timeout_s=240).to_json()
    assert result["status"] == "completed", result
    owners = PlacementStore(state / PIPELINE).load()
    assert owners is not None and all(p.parallel_units == (0, 1, 2, 3) for p in owners.values())
    wait_idle(restarted, 2_000)  # one control directory: both runners' epochs, nothing new
    finish_and_check(state, inbox, restarted, 2_000)
