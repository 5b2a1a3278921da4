"""Lost stores found when the runner starts, and what a rebuild restores, re-runs and refuses,
without Spark (the tasks run in this process). The rebuild through Spark's re-run of each epoch,
with a kill in the middle, is in tests/integration/workers/test_recovery.py."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from tests.unit.workers.recovery.snapshot_setup import VNODES, InProcessSpark, fill, take
from workers.layout import local_root, pu_store
from workers.pipeline.placement import (
    CutVnode,
    EpochPlan,
    FragmentActions,
    SlotActions,
    VnodeMapping,
)
from workers.recovery.checkpoint_rerun import offsets_after, put_back, set_rerun
from workers.recovery.location import RecoveryLocation
from workers.recovery.rebuild import (
    RebuildRefused,
    check_stores,
    plan_rebuild,
    seal_stores,
)
from workers.recovery.replay import ReplayLog
from workers.recovery.stores import BEHIND, CORRUPT, MISSING, OK, StoreState, sums_path
from workers.recovery.tasks import restore_pu
from workers.state import open_store
from workers.state.base import Update, encode_key
from workers.storage import location

MAPPING = VnodeMapping.initial("counts", VNODES, [0, 1, 2])


def _check(root: Path, backend: str, committed: int) -> dict[int, StoreState]:
    states = check_stores(
        InProcessSpark(),
        pipeline_dir=root,
        backend=backend,
        reference={"counts": MAPPING},
        committed=committed,
    )
    return {s.pu: s for s in states}


@pytest.mark.parametrize("backend", ["lmdb", "rocksdb"])
def test_a_missing_a_changed_and_a_stale_store_are_lost(tmp_path: Path, backend: str) -> None:
    root = tmp_path / "p"
    fill(root, backend, MAPPING, 5, 2000)
    assert (
        seal_stores(
            InProcessSpark(), pipeline_dir=root, backend=backend, placements={"counts": MAPPING}
        )
        == 3
    )
    assert {s.status for s in _check(root, backend, 5).values()} == {OK}
    assert not sums_path(local_root(root), "counts", 0).exists(), (
        "a whole store's checksums are used up"
    )

    seal_stores(
        InProcessSpark(), pipeline_dir=root, backend=backend, placements={"counts": MAPPING}
    )
    # PU 0's store is gone; one file of PU 1's changed while no runner had it open
    import shutil

    shutil.rmtree(pu_store(root, "counts", 0))
    files = sorted(p for p in pu_store(root, "counts", 1).iterdir() if p.stat().st_size)
    target = next(p for p in files if p.suffix in (".mdb", ".sst", ".log")) if files else None
    assert target is not None
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x55
    target.write_bytes(bytes(data))
    states = _check(root, backend, 5)
    assert states[0].status == MISSING and "is gone" in states[0].detail
    assert states[1].status == CORRUPT and target.name in states[1].detail
    assert states[2].status == OK
    assert sums_path(local_root(root), "counts", 1).exists(), "a lost store keeps its checksums"

    # without checksums (a crash): the applied-epoch marker against Spark's commit
    assert _check(root, backend, 7)[2].status == BEHIND
    assert _check(root, backend, 4)[2].status == OK, "the epoch after the commit: not committed"
    assert _check(root, backend, 3)[2].status == BEHIND, "two epochs ahead of the commit"
    assert _check(root, backend, 3)[2].applied_epoch == 5


def test_a_torn_store_file_does_not_open_and_is_lost(tmp_path: Path) -> None:
    root = tmp_path / "p"
    fill(root, "lmdb", MAPPING, 3, 500)
    data = pu_store(root, "counts", 2) / "data.mdb"
    data.write_bytes(data.read_bytes()[:4096])  # no checksums: a crash left no clean stop
    state = _check(root, "lmdb", 3)[2]
    assert state.status == CORRUPT and "does not open" in state.detail


def test_a_pu_without_vnodes_has_nothing_to_lose(tmp_path: Path) -> None:
    mapping = VnodeMapping("counts", (0, 1), (0,) * VNODES, 1)
    states = check_stores(
        InProcessSpark(),
        pipeline_dir=tmp_path,
        backend="lmdb",
        reference={"counts": mapping},
        committed=2,
    )
    assert [(s.pu, s.status) for s in states] == [(0, MISSING)]


@pytest.mark.parametrize("backend", ["lmdb", "rocksdb"])
def test_outputs_are_kept_from_the_epoch_a_rebuild_re_runs(tmp_path: Path, backend: str) -> None:
    with open_store(backend, tmp_path / "s") as store:
        for epoch in range(8):
            key = encode_key(1, b"k")
            store.commit_epoch(
                epoch, [Update(key, None, b"%d" % epoch)], f"out-{epoch}".encode(), outputs_from=3
            )
        assert [store.epoch_outputs(e) for e in (2, 3, 7)] == [None, b"out-3", b"out-7"]
        store.commit_epoch(8, [], b"out-8")  # no snapshot any more: the last two epochs
        assert store.epoch_outputs(6) is None and store.epoch_outputs(7) == b"out-7"


def _plan(epoch: int, actions: dict[str, FragmentActions] | None = None) -> EpochPlan:
    return EpochPlan(epoch, {"counts": MAPPING}, actions or {})


def _replayed(root: Path, epochs: range) -> ReplayLog:
    log = ReplayLog(root)
    for e in epochs:
        log.record(_plan(e), f'v1\n{{}}\n{{"offset": {e}}}')
    return log


def test_a_rebuild_starts_at_the_newest_snapshot_of_this_job(tmp_path: Path) -> None:
    snapshots, _, first = take(tmp_path, "lmdb", MAPPING, 4)
    root = tmp_path / "state" / "p"
    lineage = (root / "checkpoint" / "metadata").read_text("utf-8")
    log = _replayed(root, range(4, 8))
    lost = [StoreState("counts", 1, MISSING, "gone")]
    kw = {
        "location": snapshots.location,
        "pipeline": "p",
        "fragments": {"counts": VNODES},
        "lost": lost,
        "replay": log,
        "later_offsets": {8: "v1\n{}\n{}"},
    }
    rebuild = plan_rebuild(target=7, lineage=lineage, **kw)  # type: ignore[arg-type]
    assert rebuild.manifest.snapshot_id == first and rebuild.epochs == [5, 6, 7]
    (task,) = rebuild.restore_tasks(snapshots.location.uri, root, "lmdb", {"counts": MAPPING})
    assert (task.pu, task.fresh) == (1, True)
    assert task.owned == (("counts", tuple(MAPPING.vnodes_of(1))),)

    with pytest.raises(RebuildRefused, match="no snapshot of 'p' at or before epoch 3"):
        plan_rebuild(target=3, lineage=lineage, **kw)  # type: ignore[arg-type]
    with pytest.raises(RebuildRefused, match="no snapshot"):  # another job's snapshots
        plan_rebuild(target=7, lineage='{"id":"another query"}', **kw)  # type: ignore[arg-type]
    (log.dir / "6.json").unlink()
    with pytest.raises(RebuildRefused, match="no record of epoch 6"):
        plan_rebuild(target=7, lineage=lineage, **kw)  # type: ignore[arg-type]
    moved = EpochPlan(6, {"counts": dataclasses.replace(MAPPING, version=MAPPING.version + 1)})
    log.record(moved, "v1\n{}\n{}")  # a stop-start changes the placement without actions
    with pytest.raises(RebuildRefused, match="the placement of counts changed at epoch 6"):
        plan_rebuild(target=7, lineage=lineage, **kw)  # type: ignore[arg-type]
    step = {"counts": FragmentActions(slots={2: SlotActions(seal=(3,))})}
    log.record(_plan(6, step), "v1\n{}\n{}")
    with pytest.raises(RebuildRefused, match="a rescale step ran at epoch 6") as refused:
        plan_rebuild(target=7, lineage=lineage, **kw)  # type: ignore[arg-type]
    assert "--restore-from" in str(refused.value), "the refusal says what to do instead"


def test_a_live_step_in_flight_is_re_run_while_its_files_are_in_the_durable_location(
    tmp_path: Path,
) -> None:
    """While its operation is in flight a step's exports and hold queues are kept: its seal,
    acquire (with the placement change it makes) and drop epochs re-run as they first ran. Once
    they are gone (settled), or for a placement change no step made, the rebuild is refused."""
    snapshots, _, first = take(tmp_path, "lmdb", MAPPING, 4)
    root = tmp_path / "state" / "p"
    lineage = (root / "checkpoint" / "metadata").read_text("utf-8")
    durable = location(tmp_path / "durable")
    log = _replayed(root, range(4, 9))
    kw = {
        "location": snapshots.location,
        "pipeline": "p",
        "fragments": {"counts": VNODES},
        "lost": [StoreState("counts", 2, MISSING, "gone")],
        "replay": log,
        "later_offsets": {},
        "lineage": lineage,
        "durable": durable,
    }
    export = "rescale/op-1/exports/counts/vnode-3.arrow"
    held = "rescale/holdq/counts/pu-2/epoch-0000000005.arrow"
    seal = {"counts": FragmentActions(held={3: 2}, slots={0: SlotActions(seal=(3,))})}
    log.record(_plan(5, seal), "v1\n{}\n{}")
    owners = tuple(2 if v == 3 else pu for v, pu in enumerate(MAPPING.mapping))
    acquired = dataclasses.replace(MAPPING, mapping=owners, version=MAPPING.version + 1)
    acquire = {
        "counts": FragmentActions(
            slots={
                0: SlotActions(drop=(3,)),
                2: SlotActions(ingest=(export,), replay_files=(held,), replay_vnodes=(3,)),
            }
        )
    }
    log.record(EpochPlan(6, {"counts": acquired}, acquire), "v1\n{}\n{}")
    log.record(EpochPlan(7, {"counts": acquired}), "v1\n{}\n{}")
    with pytest.raises(RebuildRefused, match=r"epoch 6.* are gone .*vnode-3\.arrow, 1 files"):
        plan_rebuild(target=7, **kw)  # type: ignore[arg-type]
    durable.write_bytes(export, b"an export")  # the hold queue: none held, no file
    rebuild = plan_rebuild(target=7, **kw)  # type: ignore[arg-type]
    assert rebuild.manifest.snapshot_id == first and rebuild.epochs == [5, 6, 7]
    with pytest.raises(RebuildRefused, match="no durable location"):
        plan_rebuild(target=7, **{**kw, "durable": None})  # type: ignore[arg-type]
    # the acquire's placement change is the step's; a later one without a step is not
    log.record(
        EpochPlan(8, {"counts": dataclasses.replace(acquired, version=acquired.version + 1)}),
        "v1\n{}\n{}",
    )
    with pytest.raises(RebuildRefused, match=r"counts changed at epoch 8.*with no live step"):
        plan_rebuild(target=8, **kw)  # type: ignore[arg-type]
    # a cancelled step's vnodes given back: a hold queue read without an export
    given_back = {
        "counts": FragmentActions(slots={0: SlotActions(unseal=(5,), replay_files=(held,))})
    }
    log.record(EpochPlan(8, {"counts": acquired}, given_back), "v1\n{}\n{}")
    with pytest.raises(RebuildRefused, match="gave its vnodes back at epoch 8"):
        plan_rebuild(target=8, **kw)  # type: ignore[arg-type]
    # an epoch between two key ranges of a cut vnode: its routing only, nothing to read again
    between = {"counts": FragmentActions(cut={3: CutVnode(4, 2, moved=(0,))})}
    log.record(EpochPlan(8, {"counts": acquired}, between), "v1\n{}\n{}")
    assert plan_rebuild(target=8, **kw).epochs == [5, 6, 7, 8]  # type: ignore[arg-type]


def test_a_lost_store_is_refilled_fresh_at_the_snapshot_epoch(tmp_path: Path) -> None:
    snapshots, entries, _ = take(tmp_path, "lmdb", MAPPING, 4)
    root = tmp_path / "state" / "p"
    lineage = (root / "checkpoint" / "metadata").read_text("utf-8")
    with open_store("lmdb", pu_store(root, "counts", 1)) as store:  # what went on after it
        store.commit_epoch(6, [Update(encode_key(MAPPING.vnodes_of(1)[0], b"x"), None, b"1")])
    rebuild = plan_rebuild(
        location=snapshots.location,
        pipeline="p",
        fragments={"counts": VNODES},
        lost=[StoreState("counts", 1, BEHIND, "")],
        target=4,
        replay=ReplayLog(root),
        later_offsets={},
        lineage=lineage,
    )
    (task,) = rebuild.restore_tasks(snapshots.location.uri, root, "lmdb", {"counts": MAPPING})
    restore_pu(task, ("driver", "here"))
    with open_store("lmdb", pu_store(root, "counts", 1), readonly=True) as store:
        assert store.applied_epoch() == 4
        assert dict(store.scan()) == {
            k: v for k, v in entries.items() if MAPPING.mapping[int.from_bytes(k[:2], "big")] == 1
        }


def test_the_checkpoint_is_set_for_each_re_run_and_put_back(tmp_path: Path) -> None:
    cp = tmp_path / "checkpoint"
    for sub in ("offsets", "commits"):
        (cp / sub).mkdir(parents=True)
    for e in range(3, 10):
        (cp / "offsets" / str(e)).write_text(f"o{e}")
        (cp / "offsets" / f".{e}.crc").write_text("crc")
    for e in range(3, 9):
        (cp / "commits" / str(e)).write_text(f"c{e}")
    later = offsets_after(cp, 8)
    assert later == {9: "o9"}
    set_rerun(cp, 6, "o5-original", "o6-original", "commit")
    assert sorted(p.name for p in (cp / "offsets").iterdir() if not p.name.startswith(".")) == [
        "3",
        "4",
        "5",
        "6",
    ]
    assert (cp / "offsets" / "6").read_text() == "o6-original"
    assert not (cp / "offsets" / ".6.crc").exists(), "a stale checksum file would fail Spark"
    assert max(int(p.name) for p in (cp / "commits").iterdir()) == 5
    (cp / "offsets" / "7").write_text("what Spark planned after the re-run")
    (cp / "commits" / "6").write_text("c6")
    put_back(cp, 6, {7: "o7-original", 8: "o8-original"})
    assert (cp / "offsets" / "7").read_text() == "o7-original"
    assert (cp / "offsets" / "8").read_text() == "o8-original"


def test_the_replay_log_keeps_the_epochs_since_the_newest_snapshot(tmp_path: Path) -> None:
    log = _replayed(tmp_path, range(0, 6))
    log.prune(before=3)
    assert log.epochs() == [3, 4, 5]
    entry = log.entry(4)
    assert entry is not None and entry.plan.epoch == 4
    assert json.loads(entry.offsets.splitlines()[2]) == {"offset": 4}
    assert log.entry(1) is None
    assert RecoveryLocation(tmp_path / "none").snapshot_ids("p") == []
