"""Elastic workers on a real Spark standalone cluster (docs/elastic-workers.md).

A standalone master and ``spark-class`` worker processes of one core each, started by the local
worker provider; the runner as a real process against them, reading a directory of click events
(a deterministic oracle). One story, as an operator lives it:

1. one worker: the pipeline runs on its one PU, and every PU task reports that executor;
2. a second worker joins: its PU is bootstrapped and reported by itself, then a live rescale
   puts vnodes on it, and each PU's task runs on its home executor (workers/pinning.py);
3. the first worker is drained (a live rescale moves every fragment off its PU), decommissioned
   and its process stopped: the stream goes on;
4. a third worker joins and takes vnodes; the second one is killed with SIGKILL: it is reported
   gone at once, its PU goes to the third worker, whose executor finds the PU's store in the
   directory this host's executors share, and an ordinary request then moves its vnodes;
5. the exported state equals the oracle key for key.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.workers.fixtures import RunnerProcess, start_runner
from tests.integration.workers.test_idle_stream import (
    BATCHED,
    PIPELINE,
    Inbox,
    finish_and_check,
    orchestrator,
    request,
    wait_idle,
)
from workers.control import LocalControl, WorkerInfo
from workers.provider import LocalMaster, LocalProvider
from workers.recovery.location import RecoveryLocation

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.standalone]

VNODES = 16


@pytest.fixture
def cluster(tmp_path: Path) -> Any:
    master = LocalMaster(tmp_path / "spark")
    master.start()
    provider = LocalProvider(master.url, tmp_path / "spark" / "workers", memory="1g")
    try:
        yield master, provider
    finally:
        provider.stop_all()
        master.stop()


def workers(runner: RunnerProcess) -> dict[str, WorkerInfo]:
    return {w.name: w for w in LocalControl(runner.control_dir).workers()}


def wait_workers(runner: RunnerProcess, what: str, check: Any, timeout: float = 120) -> None:
    runner.wait_for(lambda: check(workers(runner)), timeout, what)


def ready(w: WorkerInfo | None) -> bool:
    return w is not None and w.alive and w.bootstrapped_epoch >= 0


def live(state: Path, runner: RunnerProcess, op: str, change: dict[str, list[int]]) -> None:
    result = orchestrator(state, runner, op, request(change, "live", BATCHED), step_timeout_s=120)
    outcome = result.run(timeout_s=300).to_json()
    assert outcome["status"] == "completed", outcome


def placed_on(runner: RunnerProcess, since: int) -> list[tuple[int, str]]:
    """(PU, executor) of every PU task with records in the epochs after the first ``since``."""
    return [
        (p["pu"], p["executor"]) for e in runner.epochs()[since:] for p in e["per_pu"] if p["rows"]
    ]


def away_from_home(runner: RunnerProcess, since: int, home: dict[int, str]) -> list[Any]:
    """The PU tasks with records, after the first ``since`` epochs, that ran elsewhere than
    their PU's home executor (``home``: PU -> executor id)."""
    return [(pu, ex) for pu, ex in placed_on(runner, since) if home.get(pu) != ex]


#: a live step's export tasks, as the runner logs them: "<fragment>/pu-<pu> <s>s on <executor>"
EXPORT_RUN = re.compile(r"(\S+)/pu-(\d+) [\d.]+s on ([^,\s]+)")


def exports_placed(log: str) -> list[tuple[int, str]]:
    """(source PU, executor) of every export task in the runner's log ``log``."""
    return [
        (int(m.group(2)), m.group(3))
        for line in log.splitlines()
        if "exported" in line and "PU tasks:" in line
        for m in EXPORT_RUN.finditer(line.split("PU tasks:", 1)[1])
    ]


def test_workers_join_drain_leave_and_die_while_the_pipeline_runs(
    tmp_path: Path, cluster: Any
) -> None:
    master, provider = cluster
    inbox = Inbox(tmp_path / "inbox")
    state = tmp_path / "state"
    provider.add(1)
    runner = start_runner(
        state,
        PIPELINE,
        "--source",
        f"dir:{inbox.dir}",
        "--initial-pus",
        "1",
        env={
            "SPARK_MASTER": master.url,
            "RESCALER_VNODES": str(VNODES),
            "RESCALER_RECOVERY_DIR": str(tmp_path / "recovery"),
        },
    )
    rows = 0

    def more(n: int) -> None:
        nonlocal rows
        inbox.drop(n)
        rows += n
        wait_idle(runner, rows)

    # 1. one worker, one PU; every task ran on its executor
    more(1_000)
    w1 = workers(runner)["w1"]
    assert ready(w1) and w1.parallel_units == (0,) and w1.cores == 1
    assert {ex for _, ex in placed_on(runner, 0)} == {w1.executor_id}
    # "Snapshot now": the stores' copies and the write tasks ran on the executor, not the driver
    LocalControl(runner.control_dir).submit("snapshot", {"requested_by": "operator"})
    location = RecoveryLocation(tmp_path / "recovery")
    runner.wait_for(lambda: bool(location.snapshot_ids(PIPELINE)), 120, "the snapshot")
    snapshot = location.manifest(PIPELINE, "latest")
    assert (snapshot.trigger, snapshot.requested_by) == ("manual", "operator")
    assert {t.executor for t in snapshot.tasks} == {w1.executor_id}, snapshot.tasks

    # 2. a worker joins: bootstrapped and reported by itself, on an idle stream
    joined_at = time.monotonic()
    provider.add(1)
    wait_workers(runner, "the second worker to join", lambda ws: ready(ws.get("w2")))
    print(f"\njoin: the second worker's PU was ready {time.monotonic() - joined_at:.1f}s later")
    w2 = workers(runner)["w2"]
    assert w2.parallel_units == (1,) and w2.executor_id != w1.executor_id
    assert (state / PIPELINE / "bootstrap" / "pu-1.json").exists()
    live(state, runner, "onto-w2", {"added_parallel_units": [1]})
    before = len(runner.epochs())
    more(1_000)
    assert {pu for pu, _ in placed_on(runner, before)} == {0, 1}
    # each PU's task ran on its home executor (workers/pinning.py), every epoch
    home = {0: w1.executor_id, 1: w2.executor_id}
    assert not away_from_home(runner, before, home), placed_on(runner, before)

    # 3. drain the first worker, decommission it, stop its process
    live(state, runner, "drain-w1", {"removed_parallel_units": [0]})
    control = LocalControl(runner.control_dir)
    command = control.submit("worker.decommission", {"worker": "w1"})
    runner.wait_for(lambda: control.command_status(command) is not None, 60, "decommission ack")
    status = control.command_status(command)
    assert status is not None and status[0] == "done", status
    assert "w1" not in workers(runner)
    assert "stopped" in provider.release(w1)
    more(500)

    # 4. a third worker joins and takes vnodes; the second dies
    provider.add(1)
    wait_workers(runner, "the third worker to join", lambda ws: ready(ws.get("w3")))
    w3 = workers(runner)["w3"]
    live(state, runner, "onto-w3", {"added_parallel_units": list(w3.parallel_units)})
    before = len(runner.epochs())
    more(500)
    home = {1: w2.executor_id, **dict.fromkeys(w3.parallel_units, w3.executor_id)}
    assert {pu for pu, _ in placed_on(runner, before)} == set(home)
    assert not away_from_home(runner, before, home), placed_on(runner, before)
    # every export so far read its source PU's store on that PU's home executor
    home = {0: w1.executor_id, 1: w2.executor_id, **home}
    exports = exports_placed(runner.log_path.read_text())
    assert exports and all(home[pu] == ex for pu, ex in exports), (exports, home)
    host = provider.executor_host(w2.executor_id)
    assert host is not None
    os.killpg(host.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    wait_workers(runner, "the killed worker to be reported gone", lambda ws: not ws["w2"].alive)
    print(f"loss: reported {time.monotonic() - killed_at:.1f}s after the SIGKILL")
    # its PU goes to the live worker, whose executor, on the same host, finds its store in the
    # directory the host's executors share: nothing is rebuilt, nothing stops
    wait_workers(runner, "PU 1 on w3", lambda ws: 1 in ws["w3"].parallel_units)
    assert workers(runner)["w2"].parallel_units == ()
    more(500)
    assert not re.search(r"rebuilt \d+ stores", runner.log_path.read_text())
    live(state, runner, "off-pu-1", {"removed_parallel_units": [1]})

    # 5. exact state, on the PUs the mapping says
    finish_and_check(state, inbox, runner, rows)


def test_a_preempted_worker_is_drained_and_nothing_is_lost_when_it_goes_mid_drain(
    tmp_path: Path, cluster: Any
) -> None:
    """Preemption (docs/elastic-workers.md, "Preemption"), the hard case: the notice starts the
    drain (all at once, as the control plane's notices.py does), and the worker is sent SIGPWR
    at once, as a spot instance's agent does when the deadline is short: Spark decommissions its
    executor in the middle of the drain. The runner sees the decommission as the worker's notice
    if its barrier comes first, else the worker's loss; either way the drain completes (PU tasks
    run on the other executor, the state directory is shared) and the state equals the oracle."""
    master, provider = cluster
    inbox = Inbox(tmp_path / "inbox")
    state = tmp_path / "state"
    provider.add(1)
    provider.add(1)
    runner = start_runner(
        state,
        PIPELINE,
        "--source",
        f"dir:{inbox.dir}",
        "--initial-pus",
        "1",
        env={"SPARK_MASTER": master.url, "RESCALER_VNODES": str(VNODES)},
    )
    rows = 0

    def more(n: int) -> None:
        nonlocal rows
        inbox.drop(n)
        rows += n
        wait_idle(runner, rows)

    more(1_000)
    wait_workers(runner, "two workers", lambda ws: ready(ws.get("w1")) and ready(ws.get("w2")))
    w2 = workers(runner)["w2"]
    live(state, runner, "onto-w2", {"added_parallel_units": list(w2.parallel_units)})
    more(1_000)
    assert workers(runner)["w2"].notice_at is None

    host = provider.executor_host(w2.executor_id)
    assert host is not None
    drain = request({"removed_parallel_units": list(w2.parallel_units)}, "live", "all_at_once")
    orch = orchestrator(state, runner, "drain-w2", drain, step_timeout_s=120)
    inbox.drop(1_000)  # records arrive while it drains
    rows += 1_000
    os.kill(host.pid, signal.SIGPWR)
    outcome = orch.run(timeout_s=300).to_json()
    assert outcome["status"] == "completed", outcome
    wait_workers(runner, "w2 to go", lambda ws: not ws["w2"].alive)
    gone = workers(runner)["w2"]
    print(f"\nw2 gone; its notice {'was' if gone.notice_at else 'was not'} seen first")
    wait_idle(runner, rows)
    finish_and_check(state, inbox, runner, rows)
