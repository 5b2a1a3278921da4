"""State on the workers (issue 45): a Spark standalone cluster whose workers each have a disk of
their own, and a durable location in a real S3 API (moto's server).

Each worker's executor keeps its PUs' stores in its own directory (``RESCALER_LOCAL_DIR``, which
no other executor and not the driver is given), so a live rescale can only move a vnode's state
from one executor to another through the durable location. The story:

1. two workers of one PU each run the pipeline on PUs 0 and 1;
2. a third worker of two PUs joins: a live scale-out puts vnodes on its PU 2;
3. a migration moves all of PU 0 (the first worker) to PU 3 (the third);
4. the snapshot taken once the migration settled (periodic snapshots are on), then the second
   worker's host is lost: its processes killed with SIGKILL and its disk deleted. Its PU 1 goes
   to the first worker (the live one with the fewest PUs), where its store is rebuilt from the
   snapshot and the epochs after it, and the stream goes on;
5. a scale-in removes PU 1, now on the first worker, which is decommissioned and stopped;
6. the snapshot taken once the scale-in settled, then the runner is killed with SIGKILL and
   every executor's directory wiped: the restarted runner (a new Spark application) rebuilds
   every store from the object store alone;
7. the state equals the oracle key for key, the driver's state directory holds no store, and
   every store lies on the disk of the executor that ran its PU, and nowhere else.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.integration.s3service import S3Service
from tests.integration.workers.fixtures import start_runner
from tests.integration.workers.test_idle_stream import (
    PIPELINE,
    Inbox,
    finish_and_check,
    orchestrator,
    request,
    wait_idle,
)
from tests.integration.workers.test_standalone import (
    VNODES,
    away_from_home,
    exports_placed,
    live,
    ready,
    wait_workers,
    workers,
)
from workers.control import LocalControl
from workers.pipeline.placement import PlacementStore
from workers.provider import LocalMaster, LocalProvider
from workers.recovery.location import RecoveryLocation
from workers.rescale.operation import OperationStore
from workers.store_homes import StoreHomes

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.standalone]


@pytest.fixture
def cluster(tmp_path: Path) -> Any:
    master = LocalMaster(tmp_path / "spark")
    master.start()
    provider = LocalProvider(
        master.url, tmp_path / "spark" / "workers", memory="1g", private_disks=True
    )
    try:
        yield master, provider
    finally:
        provider.stop_all()
        master.stop()


def stores_on(disk: Path) -> set[tuple[str, int]]:
    """(fragment, PU) of every store on a worker's disk."""
    return {
        (p.parent.name, int(p.name[3:]))
        for p in disk.glob(f"{PIPELINE}/stores/*/pu-*")
        if p.is_dir()
    }


def test_state_moves_between_private_disks_through_the_object_store(
    tmp_path: Path, cluster: Any, s3_service: S3Service
) -> None:
    master, provider = cluster
    inbox = Inbox(tmp_path / "inbox")
    state = tmp_path / "state"
    provider.add(1)
    provider.add(1)
    bucket = s3_service.bucket()
    recovery = s3_service.uri(bucket, "recovery")
    args = ("--source", f"dir:{inbox.dir}", "--initial-pus", "2")
    env = {
        "SPARK_MASTER": master.url,
        "RESCALER_VNODES": str(VNODES),
        # hold queues, exports and snapshots in the object store; nothing shared on a disk
        "RESCALER_DURABLE_LOCATION": s3_service.uri(bucket, "durable"),
        "RESCALER_RECOVERY_DIR": recovery,
        # periodic snapshots on (one an hour, none in this test): one once each rescale settles
        "RESCALER_SNAPSHOT_EVERY": "1h",
        # the runner gives its executors no directory: each has its worker's own
        "RESCALER_LOCAL_DIR": "",
    }
    runner = start_runner(state, PIPELINE, *args, env=env)
    rows = 0
    location = RecoveryLocation(recovery)

    def rescaled_onto(pus: tuple[int, ...]) -> None:
        """The newest snapshot is the one taken once the rescale onto ``pus`` settled."""

        def taken() -> bool:
            ids = location.snapshot_ids(PIPELINE)
            newest = location.manifest(PIPELINE, ids[-1]) if ids else None
            return newest is not None and (
                newest.trigger == "rescale"
                and all(f.parallel_units == pus for f in newest.fragments.values())
            )

        runner.wait_for(taken, 120, f"the snapshot after the rescale onto PUs {pus}")

    def more(n: int) -> None:
        nonlocal rows
        inbox.drop(n)
        rows += n
        wait_idle(runner, rows)

    # 1. two workers, PUs 0 and 1
    more(1_000)
    wait_workers(runner, "two workers", lambda ws: ready(ws.get("w1")) and ready(ws.get("w2")))
    # 2. a third worker of two PUs joins; a live scale-out onto it
    provider.add(2)
    wait_workers(runner, "the third worker", lambda ws: ready(ws.get("w3")))
    w1, w2, w3 = (workers(runner)[n] for n in ("w1", "w2", "w3"))
    assert (w1.parallel_units, w2.parallel_units, w3.parallel_units) == ((0,), (1,), (2, 3))
    live(state, runner, "onto-w3", {"added_parallel_units": [2]})
    more(500)
    # 3. a migration: everything of PU 0 (w1's disk) to PU 3 (w3's)
    live(state, runner, "w1-to-w3", {"added_parallel_units": [3], "removed_parallel_units": [0]})
    more(500)
    # each worker's disk, while its process is there to say where it runs
    disks, hosts = {}, {}
    for worker in (w1, w2, w3):
        host = provider.executor_host(worker.executor_id)
        assert host is not None
        hosts[worker.name] = host
        disks[worker.name] = provider.disk_of(Path(host.work_dir))
    assert len(set(disks.values())) == 3
    # 4. the snapshot the migration's end took, then w2's host is lost with its disk; its PU
    # goes to w1, the emptiest
    rescaled_onto((1, 2, 3))
    more(300)  # epochs after the snapshot, which the rebuild re-runs
    os.killpg(hosts["w2"].pid, signal.SIGKILL)
    shutil.rmtree(disks["w2"])
    wait_workers(runner, "w2's PU on w1", lambda ws: ws["w1"].parallel_units == (0, 1))
    assert not workers(runner)["w2"].alive and workers(runner)["w2"].parallel_units == ()
    more(500)
    assert re.search(r"rebuilt 2 stores .* and [1-9]\d* re-run epochs", runner.log_path.read_text())
    # 5. a scale-in that removes PU 1 (now w1's); w1 leaves
    before = len(runner.epochs())
    live(state, runner, "off-w1", {"removed_parallel_units": [1]})
    control = LocalControl(runner.control_dir)
    command = control.submit("worker.decommission", {"worker": "w1"})
    runner.wait_for(lambda: control.command_status(command) is not None, 60, "decommission")
    status = control.command_status(command)
    assert status is not None and status[0] == "done", status
    assert "stopped" in provider.release(w1)
    more(500)
    placements = PlacementStore(state / PIPELINE).load()
    assert placements is not None
    assert all(p.parallel_units == (2, 3) for p in placements.values()), placements

    # every PU task with records ran on its home executor, and every export on its source's
    home = {0: w1.executor_id, 1: w1.executor_id, 2: w3.executor_id, 3: w3.executor_id}
    assert not away_from_home(runner, before, home)
    exports = exports_placed(runner.log_path.read_text())
    assert {pu for pu, _ in exports} >= {0, 1}, exports  # state left w1's disk
    assert all(pu == 1 or home[pu] == ex for pu, ex in exports), (exports, home)

    names = list(placements)
    assert stores_on(disks["w1"]) == {(n, pu) for n in names for pu in (0, 1)}
    assert not disks["w2"].exists()
    assert stores_on(disks["w3"]) == {(n, pu) for n in names for pu in (2, 3)}

    # 6. the snapshot the scale-in's end took, then the runner killed with every executor's
    # directory wiped: the restart (a new application) rebuilds each store from the object
    # store alone
    rescaled_onto((2, 3))
    more(300)  # epochs after it, which the rebuild re-runs
    runner.kill()
    for disk in (disks["w1"], disks["w3"]):
        shutil.rmtree(disk / PIPELINE)
    runner = start_runner(state, PIPELINE, *args, env=env, log_name="wiped")
    more(300)
    assert re.search(
        rf"rebuilt {2 * len(names)} stores .* and [1-9]\d* re-run epochs",
        runner.log_path.read_text(),
    ), runner.log_tail()

    # 7. the oracle, no store in the driver's directory (finish_and_check), and each store on
    # its executor's own disk only
    finish_and_check(state, inbox, runner, rows)
    assert stores_on(disks["w1"]) == set()
    assert stores_on(disks["w3"]) == {(n, pu) for n in names for pu in (2, 3)}
    for (fragment, pu), where in StoreHomes(state / PIPELINE).load().items():
        owner = {0: "w1", 1: "w1", 2: "w3", 3: "w3"}[pu]
        assert Path(where.root) == disks[owner] / PIPELINE, (fragment, pu, where)


def test_a_host_lost_mid_migration_is_rebuilt_and_the_migration_finishes(
    tmp_path: Path, cluster: Any, s3_service: S3Service
) -> None:
    """A migration onto a new worker's PU, one vnode a step; once a step has been acquired there,
    that worker's host is lost with its disk. Its PU goes to a live worker, whose store for it
    is rebuilt from the snapshot before the migration and the migration's epochs re-run (their
    exports and hold queues are in the object store while it is in flight); the migration then
    finishes onto the PU's new home, and the state equals the oracle."""
    master, provider = cluster
    inbox = Inbox(tmp_path / "inbox")
    state = tmp_path / "state"
    provider.add(1)
    provider.add(1)
    bucket = s3_service.bucket()
    recovery = s3_service.uri(bucket, "recovery")
    env = {
        "SPARK_MASTER": master.url,
        "RESCALER_VNODES": str(VNODES),
        "RESCALER_DURABLE_LOCATION": s3_service.uri(bucket, "durable"),
        "RESCALER_RECOVERY_DIR": recovery,
        "RESCALER_LOCAL_DIR": "",
    }
    runner = start_runner(
        state, PIPELINE, "--source", f"dir:{inbox.dir}", "--initial-pus", "2", env=env
    )
    rows = 0

    def more(n: int) -> None:
        nonlocal rows
        inbox.drop(n)
        rows += n
        wait_idle(runner, rows)

    more(1_000)
    wait_workers(runner, "two workers", lambda ws: ready(ws.get("w1")) and ready(ws.get("w2")))
    provider.add(1)
    wait_workers(runner, "the third worker", lambda ws: ready(ws.get("w3")))
    w3 = workers(runner)["w3"]
    host = provider.executor_host(w3.executor_id)
    assert host is not None and w3.parallel_units == (2,)
    disk = provider.disk_of(Path(host.work_dir))
    LocalControl(runner.control_dir).submit("snapshot", {"requested_by": "operator"})
    location = RecoveryLocation(recovery)
    runner.wait_for(lambda: bool(location.snapshot_ids(PIPELINE)), 120, "the snapshot")
    more(300)

    # the migration PU 0 -> PU 2, one vnode a step, in the background
    migration = orchestrator(
        state,
        runner,
        "w1-to-w3",
        request(
            {"added_parallel_units": [2], "removed_parallel_units": [0]},
            "live",
            {"vnodes_per_step": 1, "steps_in_flight": 1},
        ),
        step_timeout_s=120,
    )
    outcome: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: outcome.update(migration.run(timeout_s=300).to_json()))
    thread.start()
    ops = OperationStore(state / PIPELINE)

    def acquired_some() -> bool:
        """A step's acquire epoch is committed (its state is in PU 2's store, on w3's disk
        only), and some steps are still to come."""
        epochs = runner.epochs()
        committed = epochs[-1]["epoch"] if epochs else -1
        steps = [s for op in ops.load_all().values() for s in op.steps.values()]
        acquired = [s for s in steps if s.acquire_epoch is not None]
        done = any(s.acquire_epoch is not None and s.acquire_epoch < committed for s in acquired)
        return done and len(acquired) < len(steps)

    runner.wait_for(acquired_some, 120, "a step acquired on PU 2, others still to come")
    os.killpg(host.pid, signal.SIGKILL)
    shutil.rmtree(disk)
    thread.join(timeout=300)
    assert outcome.get("status") == "completed", outcome
    assert not workers(runner)["w3"].alive and workers(runner)["w3"].parallel_units == ()
    assert 2 in workers(runner)["w1"].parallel_units
    assert re.search(
        r"rebuilt \d+ stores .* and [1-9]\d* re-run epochs", runner.log_path.read_text()
    )
    more(300)
    finish_and_check(state, inbox, runner, rows)
