"""The runner's workers (``workers.membership``): joins, bootstrap, loss, decommission and a
restart that binds saved workers to a new application's executors. No Spark: executors are
plain records here, as the runner reads them from Spark's status store."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.membership import LOCAL_WORKER, DecommissionRefused, ExecutorSeen, Membership
from workers.pinning import location


class Bootstraps:
    def __init__(self) -> None:
        self.calls: list[tuple[tuple[int, ...], int]] = []

    def __call__(self, pus: tuple[int, ...], epoch: int) -> None:
        self.calls.append((pus, epoch))


def cluster(tmp_path: Path, per_executor: int | None = None) -> Membership:
    return Membership(tmp_path, local=False, local_pus=2, pus_per_executor=per_executor)


E0 = ExecutorSeen("0", "10.0.0.1", 1)
E1 = ExecutorSeen("1", "10.0.0.2", 2)


def test_local_mode_has_one_bootstrapped_worker_and_never_changes(tmp_path: Path) -> None:
    m = Membership(tmp_path, local=True, local_pus=4, host="h")
    m.start([])
    (w,) = m.snapshot()
    assert (w.name, w.executor_id, w.parallel_units, w.alive) == (
        LOCAL_WORKER,
        "driver",
        (0, 1, 2, 3),
        True,
    )
    assert m.usable_pus() == {0, 1, 2, 3}
    assert m.observe([E0], 5, Bootstraps()) is False
    with pytest.raises(DecommissionRefused, match="local mode"):
        m.decommission(LOCAL_WORKER, set())


def test_start_gives_each_executor_its_cores_as_pus(tmp_path: Path) -> None:
    m = cluster(tmp_path)
    m.start([E0, E1])
    got = {w.name: (w.executor_id, w.parallel_units) for w in m.snapshot()}
    assert got == {"w1": ("0", (0,)), "w2": ("1", (1, 2))}
    # not bootstrapped yet: no vnode may go to them until a barrier has created their stores
    assert m.usable_pus() == set()
    boot = Bootstraps()
    assert m.observe([E0, E1], 3, boot, poll=False) is True
    assert boot.calls == [((0,), 3), ((1, 2), 3)]
    assert m.usable_pus() == {0, 1, 2}


def test_a_join_is_bootstrapped_at_the_barrier_that_sees_it(tmp_path: Path) -> None:
    m = cluster(tmp_path, per_executor=1)
    m.start([E0])
    m.observe([E0], 0, Bootstraps(), poll=False)
    boot = Bootstraps()
    assert m.observe([E0, E1], 7, boot) is True
    w2 = next(w for w in m.snapshot() if w.name == "w2")
    assert w2.parallel_units == (1,) and w2.bootstrapped_epoch == 7
    assert boot.calls == [((1,), 7)]
    assert m.observe([E0, E1], 8, boot) is False  # nothing new: nothing reported


def test_a_lost_workers_pus_go_to_the_live_workers_with_the_fewest(tmp_path: Path) -> None:
    """A PU keeps its number (and its vnodes); only its home moves, where its store is rebuilt
    from the durable copy: each to the live worker with the fewest PUs at that moment."""
    m = cluster(tmp_path)
    e2 = ExecutorSeen("2", "10.0.0.3", 1)
    m.start([E0, E1, e2])
    m.observe([E0, E1, e2], 0, Bootstraps(), poll=False)
    assert m.observe([E0, e2], 4, Bootstraps()) is True
    got = {w.name: (w.alive, w.parallel_units) for w in m.snapshot()}
    assert got == {"w1": (True, (0, 1)), "w2": (False, ()), "w3": (True, (3, 2))}
    assert m.usable_pus() == {0, 1, 2, 3}
    at0, at2 = location(E0.host, "0"), location(e2.host, "2")
    assert m.home_locations() == {0: at0, 1: at0, 2: at2, 3: at2}


def test_a_lost_workers_pus_go_to_a_worker_on_its_host_first(tmp_path: Path) -> None:
    """The executors of one host share its directory: one there may find the stores."""
    m = cluster(tmp_path)
    beside = ExecutorSeen("2", E1.host, 2)
    m.start([E0, E1, beside])
    m.observe([E0, E1, beside], 0, Bootstraps(), poll=False)
    m.observe([E0, beside], 1, Bootstraps())
    got = {w.name: w.parallel_units for w in m.snapshot()}
    assert got == {"w1": (0,), "w2": (), "w3": (3, 4, 1, 2)}


def test_a_lost_workers_pus_go_only_to_ready_workers_that_stay(tmp_path: Path) -> None:
    """Not to a worker whose stores are not yet made (a join this barrier) nor to one leaving
    (its preemption notice); with no worker to take them, they stay where they were."""
    m = cluster(tmp_path)
    m.start([E0])
    m.observe([E0], 0, Bootstraps(), poll=False)
    noticed = ExecutorSeen("3", "10.0.0.4", 1, decommissioning_since=1.0)
    m.observe([E0, noticed], 1, Bootstraps())
    joining = ExecutorSeen("4", "10.0.0.5", 1)
    m.observe([noticed, joining], 2, lambda pus, epoch: None, poll=True)
    got = {w.name: (w.alive, w.parallel_units) for w in m.snapshot()}
    assert got == {"w1": (False, (0,)), "w2": (True, (1,)), "w3": (True, (2,))}
    assert 0 not in m.home_locations()


def test_decommission_refuses_a_worker_that_still_holds_vnodes(tmp_path: Path) -> None:
    m = cluster(tmp_path)
    m.start([E0, E1])
    m.observe([E0, E1], 0, Bootstraps(), poll=False)
    with pytest.raises(DecommissionRefused, match=r"\[1\] still run a fragment: drain it first"):
        m.decommission("w2", holding={0, 1})
    with pytest.raises(DecommissionRefused, match="no worker 'w9'"):
        m.decommission("w9", holding=set())
    w2 = m.decommission("w2", holding={0})
    assert w2.executor_id == "1"
    assert [w.name for w in m.snapshot()] == ["w1"]
    # its executor, still registered until the provider stops it, is not taken for a new worker
    assert m.observe([E0, E1], 9, Bootstraps()) is False


def test_pu_numbers_are_never_reused(tmp_path: Path) -> None:
    m = cluster(tmp_path)
    m.start([E0])
    m.decommission("w1", holding=set())
    m.observe([ExecutorSeen("2", "10.0.0.3", 1)], 1, Bootstraps())
    (w,) = m.snapshot()
    assert w.parallel_units == (1,)


def test_a_restart_binds_saved_workers_to_the_new_applications_executors(tmp_path: Path) -> None:
    m = cluster(tmp_path)
    m.start([E0, E1])
    m.observe([E0, E1], 0, Bootstraps(), poll=False)
    # a new application: new executor ids; one machine came back, the other did not
    again = cluster(tmp_path)
    again.start([ExecutorSeen("0", "10.0.0.2", 2)])
    got = {w.name: (w.executor_id, w.host, w.alive, w.parallel_units) for w in again.snapshot()}
    assert got == {  # w1's PU goes to w2, where its store is rebuilt
        "w1": ("", "10.0.0.1", False, ()),
        "w2": ("0", "10.0.0.2", True, (1, 2, 0)),
    }
    assert again.usable_pus() == {0, 1, 2}  # bootstrapped before the restart


def test_a_restart_binds_each_worker_to_the_executor_with_its_stores_disk(
    tmp_path: Path,
) -> None:
    """Two workers on one host, each with a disk of its own: the new application's executor
    ids and order say nothing of which machine is which (in a soak, w1 took the executor of
    w3's machine, and its stores were called lost and rebuilt from a snapshot); the disk that
    holds a worker's PUs' stores does."""
    host = "127.0.0.1"
    m = cluster(tmp_path, per_executor=1)
    m.start([ExecutorSeen("0", host, 1), ExecutorSeen("1", host, 1)])
    m.observe([ExecutorSeen("0", host, 1), ExecutorSeen("1", host, 1)], 0, Bootstraps(), poll=False)
    assert m.worker_pus() == {"w1": [0], "w2": [1]}
    executors = [ExecutorSeen("0", host, 1), ExecutorSeen("1", host, 1)]
    roots = {0: "/disks/a/wordcount", 1: "/disks/b/wordcount"}
    again = cluster(tmp_path, per_executor=1)
    again.start(executors, disks={"0": roots[1], "1": roots[0]}, store_roots=roots)
    assert {w.name: w.executor_id for w in again.snapshot()} == {"w1": "1", "w2": "0"}
    # a disk no executor has (Spark's own local directories are new with each application):
    # by host, then in order, as before
    plain = cluster(tmp_path, per_executor=1)
    plain.start(executors, disks={"0": "/new/x", "1": "/new/y"}, store_roots=roots)
    assert {w.name: w.executor_id for w in plain.snapshot()} == {"w1": "0", "w2": "1"}


def test_the_same_path_on_two_hosts_is_two_disks(tmp_path: Path) -> None:
    """Every worker of a real cluster may use one path (RESCALER_LOCAL_DIR in docker-compose):
    a worker keeps the executor of its own host, whatever executor sorts first."""
    m = cluster(tmp_path, per_executor=1)
    m.start([E0, ExecutorSeen("1", "10.0.0.2", 1)])
    m.observe([E0, ExecutorSeen("1", "10.0.0.2", 1)], 0, Bootstraps(), poll=False)
    assert m.worker_pus() == {"w1": [0], "w2": [1]}
    root = "/var/lib/rescaler/local/wordcount"
    again = cluster(tmp_path, per_executor=1)
    again.start(
        [ExecutorSeen("0", "10.0.0.2", 1), ExecutorSeen("1", "10.0.0.1", 1)],
        disks={"0": root, "1": root},
        store_roots={0: root, 1: root},
    )
    got = {w.name: (w.executor_id, w.host) for w in again.snapshot()}
    assert got == {"w1": ("1", "10.0.0.1"), "w2": ("0", "10.0.0.2")}


def test_a_restart_binds_the_workers_alive_before_it_first(tmp_path: Path) -> None:
    """Three saved workers on one host, the second lost before the runner restarted, and two
    executors in the new application: the two that were alive get them, the lost one stays
    lost (not an alive worker left without an executor while the lost one takes its place)."""
    host = "127.0.0.1"
    m = cluster(tmp_path, per_executor=1)
    m.start([ExecutorSeen(i, host, 1) for i in ("0", "1", "2")])
    m.observe([ExecutorSeen(i, host, 1) for i in ("0", "1", "2")], 0, Bootstraps(), poll=False)
    m.observe([ExecutorSeen(i, host, 1) for i in ("0", "2")], 3, Bootstraps())
    assert [w.name for w in m.snapshot() if not w.alive] == ["w2"]
    again = cluster(tmp_path, per_executor=1)
    again.start([ExecutorSeen("0", host, 1), ExecutorSeen("1", host, 1)])
    got = {w.name: (w.executor_id, w.alive) for w in again.snapshot()}
    assert got == {"w1": ("0", True), "w2": ("", False), "w3": ("1", True)}
