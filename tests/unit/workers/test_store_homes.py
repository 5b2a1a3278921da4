"""Each store on its executor's own disk (workers/layout.py), where the tasks say it is
(workers/store_homes.py), and a task Spark runs away from its PU's home refuses."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from tests.unit.workers.test_epoch_task import _records, _run, _spec
from workers.layout import (
    AwayFromHome,
    NoExecutorDir,
    adopt_shared_stores,
    executor_dir,
    local_root,
    prepare_local_root,
    pu_store,
)
from workers.operators import Count
from workers.pipeline.builtins import get_pipeline
from workers.pipeline.loading import record
from workers.pipeline.placement import PlacementStore, VnodeMapping
from workers.readout import ReadoutError, iter_state, read_key
from workers.store_homes import FILE, StoreHome, StoreHomes


def test_the_executor_dir_is_its_own_setting_else_sparks_local_dirs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("RESCALER_LOCAL_DIR", str(tmp_path / "disk"))
    assert executor_dir() == tmp_path / "disk"
    assert pu_store(tmp_path / "state" / "p", "f", 3) == tmp_path / "disk/p/stores/f/pu-3"
    monkeypatch.delenv("RESCALER_LOCAL_DIR")
    monkeypatch.setenv("SPARK_LOCAL_DIRS", f"{tmp_path}/blockmgr-1,{tmp_path}/blockmgr-2")
    assert executor_dir() == tmp_path / "blockmgr-1" / "rescaler"
    monkeypatch.delenv("SPARK_LOCAL_DIRS")
    with pytest.raises(NoExecutorDir, match="set RESCALER_LOCAL_DIR"):
        executor_dir()


def test_an_epoch_task_writes_its_store_in_the_executor_dir_and_says_so(
    tmp_path: Path, executor_dir: Path
) -> None:
    state = tmp_path / "state" / "p"
    _, stats = _run(_spec(state, Count(), 0, "lmdb"), _records(["a", "b"]))
    reported = json.loads(stats[0])
    assert reported["store_root"] == str(executor_dir / "p")
    assert (executor_dir / "p" / "stores" / "frag" / "pu-7").is_dir()
    assert not (state / "stores").exists(), "the driver's state directory holds no store"


def test_a_task_away_from_its_pus_home_refuses_before_writing_anything(tmp_path: Path) -> None:
    state = tmp_path / "state" / "p"
    spec = dataclasses.replace(_spec(state, Count(), 0, "lmdb"), homes=("5",))
    with pytest.raises(
        AwayFromHome,
        match="ran on executor driver, but its store is on executor 5, not on this one",
    ):
        _run(spec, _records(["a"]))
    assert not local_root(state).exists()
    # at home it runs
    _run(dataclasses.replace(spec, homes=("driver",)), _records(["a"]))
    assert pu_store(state, "frag", 7).is_dir()
    # and beside its home, on the same host's disk, where the store is
    _run(dataclasses.replace(spec, epoch=1), _records(["a"]))


def test_the_record_is_rewritten_only_when_a_home_changes(tmp_path: Path) -> None:
    homes = StoreHomes(tmp_path)
    row = {"fragment": "f", "pu": 1, "executor": "2", "host": "h", "store_root": "/d/p"}
    assert homes.update([row, {"fragment": "f", "pu": 9}])  # a row without a home is skipped
    mtime = (tmp_path / FILE).stat().st_mtime_ns
    assert not homes.update([row])
    assert (tmp_path / FILE).stat().st_mtime_ns == mtime
    assert homes.update([{**row, "executor": "3", "store_root": "/e/p"}])
    assert StoreHomes(tmp_path).load() == {("f", 1): StoreHome("3", "h", "/e/p")}


def test_the_key_finder_says_where_a_store_it_cannot_read_is(
    tmp_path: Path, executor_dir: Path
) -> None:
    state = tmp_path / "state"
    pipeline_dir = state / "wordcount"
    pipeline = get_pipeline("wordcount")
    record(pipeline_dir, "wordcount", pipeline)
    frag = pipeline.fragments[-1].name
    vnodes = pipeline.fragments[-1].vnodes
    PlacementStore(pipeline_dir).save({frag: VnodeMapping.initial(frag, vnodes, [0])})
    StoreHomes(pipeline_dir).update(
        [{"fragment": frag, "pu": 0, "executor": "4", "host": "far", "store_root": "/nowhere/x"}]
    )
    with pytest.raises(ReadoutError, match=r"on executor 4 \(far\).*not readable here"):
        read_key(state, "wordcount", frag, "apple")


def test_a_readout_skips_a_store_gone_with_its_disk_only_when_its_pu_holds_nothing(
    tmp_path: Path, executor_dir: Path
) -> None:
    """A PU scaled in, its executor's disk gone since: nothing of the fragment is lost. An
    owner's store that is not here is an error, as ever."""
    state = tmp_path / "state"
    pipeline_dir = state / "wordcount"
    pipeline = get_pipeline("wordcount")
    record(pipeline_dir, "wordcount", pipeline)
    frag = pipeline.fragments[-1].name
    vnodes = pipeline.fragments[-1].vnodes
    PlacementStore(pipeline_dir).save({frag: VnodeMapping.initial(frag, vnodes, [1])})
    gone = {"fragment": frag, "executor": "4", "host": "far", "store_root": "/nowhere/x"}
    StoreHomes(pipeline_dir).update([{**gone, "pu": 0}])
    assert list(iter_state(state, "wordcount", frag)) == []
    StoreHomes(pipeline_dir).update([{**gone, "pu": 1}])
    with pytest.raises(ReadoutError, match=r"PU 1's store is on executor 4 \(far\)"):
        list(iter_state(state, "wordcount", frag))


def test_local_mode_adopts_the_stores_an_earlier_release_kept_in_the_state_dir(
    tmp_path: Path,
) -> None:
    pipeline_dir = tmp_path / "state" / "p"
    (pipeline_dir / "stores" / "f" / "pu-0").mkdir(parents=True)
    (pipeline_dir / "stores" / "f" / "pu-0" / "data.mdb").write_bytes(b"x")
    root = tmp_path / "executors" / "driver" / "p"
    assert adopt_shared_stores(pipeline_dir, root)
    assert (root / "stores" / "f" / "pu-0" / "data.mdb").read_bytes() == b"x"
    assert not (pipeline_dir / "stores").exists()
    assert not adopt_shared_stores(pipeline_dir, root)  # once


def test_a_new_state_directory_does_not_take_an_earlier_ones_stores(tmp_path: Path) -> None:
    """The stores outlive the state directory now: a pipeline started afresh (its state
    directory wiped, no checkpoint) must not read the stores its predecessor left."""
    root = tmp_path / "executors" / "driver" / "p"
    (root / "stores" / "f" / "pu-0").mkdir(parents=True)
    prepare_local_root(tmp_path / "state" / "p", root, new=False)
    assert (root / "stores" / "f" / "pu-0").is_dir(), "a state directory keeps its stores"
    prepare_local_root(tmp_path / "state" / "p", root, new=True)
    assert not root.exists()


def test_a_new_pus_store_starts_empty_whatever_its_disk_held(tmp_path: Path) -> None:
    from workers.state import open_store
    from workers.state.base import Update
    from workers.worker_pool import BootstrapTask, bootstrap_pu

    state = tmp_path / "state" / "p"
    with open_store("lmdb", pu_store(state, "f", 4)) as store:
        store.commit_epoch(9, [Update(b"\\x00\\x01k", None, b"v")])
    bootstrap_pu(BootstrapTask(str(state), "lmdb", 4, ("f",)))
    with open_store("lmdb", pu_store(state, "f", 4), readonly=True) as store:
        assert store.applied_epoch() == -1 and not list(store.scan())


def test_a_bootstrap_a_check_or_a_restore_away_from_home_refuses(tmp_path: Path) -> None:
    """Not only the epochs: a task that would make, judge or fill a PU's store on another
    executor's disk than the PU's home refuses too (Spark runs it again, at home)."""
    from workers.recovery.stores import CheckTask, check_pu
    from workers.worker_pool import BootstrapTask, bootstrap_pu

    state = tmp_path / "state" / "p"
    with pytest.raises(AwayFromHome, match="the bootstrap of PU 4 ran on executor driver"):
        bootstrap_pu(BootstrapTask(str(state), "lmdb", 4, ("f",), home="7"))
    assert not pu_store(state, "f", 4).exists()
    with pytest.raises(AwayFromHome, match="the check of f PU 4"):
        check_pu(CheckTask(str(state), "lmdb", 4, ("f",), 3, home="7"), "driver")
    # at home, a missing store is what the check reports
    assert [s.status for s in check_pu(CheckTask(str(state), "lmdb", 4, ("f",), 3, "7"), "7")] == [
        "missing"
    ]
