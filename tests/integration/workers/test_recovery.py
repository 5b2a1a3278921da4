"""Snapshots that last, on real Spark (local mode): a job snapshotted periodically loses its
whole state directory and checkpoint, and comes back from a snapshot at another size, exact
against the oracle key by key; the snapshot and restore ran as Spark tasks, one per PU."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.integration.workers.fixtures import assert_matches_oracle, start_runner
from workers.control import LocalControl
from workers.layout import pu_store
from workers.oracle import expected_from_generator
from workers.pipeline.builtins import get_pipeline
from workers.pipeline.placement import PlacementStore
from workers.recovery.location import RecoveryLocation
from workers.rescale.local import rescale
from workers.rescale.protocol import OperationRequest
from workers.sources.generator import GeneratorConfig

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ROWS = 4_000
KEYS = 3_000
PIPELINE = "wordcount"


def _args(epochs: int) -> tuple[str, ...]:
    return ("--rows-per-epoch", str(ROWS), "--key-space", str(KEYS), "--epochs", str(epochs))


def _expected(epochs: int) -> object:
    config = GeneratorConfig(kind="lines", key_space=KEYS)
    return expected_from_generator(PIPELINE, config, epochs * ROWS)


def test_wiped_job_comes_back_from_a_snapshot_at_4_then_1_pus(tmp_path: Path) -> None:
    recovery = tmp_path / "recovery"
    env = {"RESCALER_RECOVERY_DIR": str(recovery), "RESCALER_PARALLEL_UNITS": "4"}
    state = tmp_path / "state"

    first = start_runner(state, PIPELINE, *_args(8), "--snapshot-every", "3", env=env)
    first.wait_exit()
    location = RecoveryLocation(recovery)
    ids = location.snapshot_ids(PIPELINE)
    manifests = [location.manifest(PIPELINE, i) for i in ids]
    assert [m.epoch for m in manifests] == [0, 3, 6], ids  # every 3 epochs, the last 3 kept
    latest = manifests[-1]
    assert latest.trigger == "periodic" and latest.partitions == 16
    assert latest.source_offset == {"offset": 7 * ROWS}, latest.source_offset
    assert sorted(t.pu for t in latest.tasks) == [0, 1], "one snapshot task per source PU"
    assert latest.keys == sum(1 for _ in _expected(7).state["word_count"])  # type: ignore[attr-defined]

    # a restore onto a job's state is refused before anything is written (before Spark)
    refused = start_runner(
        state, PIPELINE, *_args(10), "--restore-from", "latest", env=env, log_name="refused"
    )
    assert refused.exit_code(120) != 0
    assert "already holds a running job's state" in refused.log_tail(), refused.log_tail()

    # the machine is lost: state directory, checkpoint and sink files all gone
    shutil.rmtree(state)
    second = start_runner(
        state,
        PIPELINE,
        *_args(10),
        "--restore-from",
        "latest",
        "--initial-pus",
        "4",
        env=env,
        log_name="restore-4",
    )
    second.wait_exit()
    assert [e["epoch"] for e in second.epochs()] == [7, 8, 9], "resumed after the snapshot's epoch"
    placements = PlacementStore(state / PIPELINE).load()
    assert placements is not None
    assert placements["word_count"].parallel_units == (0, 1, 2, 3)
    assert (
        placements["word_count"].version
        == manifests[-1].fragments["word_count"].mapping_version + 1
    )
    restored = json.loads((state / PIPELINE / "restored.json").read_text("utf-8"))
    assert restored["snapshot_id"] == ids[-1]
    assert sorted(t["pu"] for t in restored["tasks"]) == [0, 1, 2, 3], "one restore task per PU"
    assert_matches_oracle(state, PIPELINE, _expected(10))  # type: ignore[arg-type]

    # again, from the snapshot of epoch 3, onto one PU
    shutil.rmtree(state)
    third = start_runner(
        state,
        PIPELINE,
        *_args(6),
        "--restore-from",
        ids[1],
        "--initial-pus",
        "1",
        env=env,
        log_name="restore-1",
    )
    third.wait_exit()
    assert [e["epoch"] for e in third.epochs()] == [4, 5]
    assert_matches_oracle(state, PIPELINE, _expected(6))  # type: ignore[arg-type]


def test_kill_9_during_a_snapshot_and_during_a_restore(tmp_path: Path) -> None:
    """A runner killed while writing a snapshot leaves no snapshot (no manifest), runs on after
    a restart, and the next snapshot is whole; a runner killed while restoring leaves a state
    directory that refuses a plain start and finishes with the same --restore-from."""
    recovery = tmp_path / "recovery"
    env = {"RESCALER_RECOVERY_DIR": str(recovery), "RESCALER_PARALLEL_UNITS": "3"}
    state = tmp_path / "state"
    crash = {**env, "RESCALER_FAULT_CRASH_DURING": "snapshot"}
    first = start_runner(state, PIPELINE, *_args(6), "--snapshot-every", "2", env=crash)
    code = first.exit_code(240)
    assert code != 0 and (state / PIPELINE / "fault-crashed-during-snapshot").exists()
    location = RecoveryLocation(recovery)
    assert location.snapshot_ids(PIPELINE) == [], "a snapshot without its manifest does not exist"
    assert location.incomplete_ids(PIPELINE), "the killed writer left part of its files"

    # the restart runs on past wherever the kill landed, taking whole snapshots
    start_runner(
        state, PIPELINE, *_args(10), "--snapshot-every", "2", env=env, log_name="after"
    ).wait_exit()
    ids = location.snapshot_ids(PIPELINE)
    assert ids and location.incomplete_ids(PIPELINE) == [], "the partial snapshot was pruned"
    assert_matches_oracle(state, PIPELINE, _expected(10))  # type: ignore[arg-type]
    epoch = location.manifest(PIPELINE, "latest").epoch

    shutil.rmtree(state)
    crash = {**env, "RESCALER_FAULT_CRASH_DURING": "restore"}
    restoring = start_runner(
        state,
        PIPELINE,
        *_args(12),
        "--restore-from",
        "latest",
        "--initial-pus",
        "3",
        env=crash,
        log_name="restore-killed",
    )
    assert restoring.exit_code(240) != 0
    plain = start_runner(state, PIPELINE, *_args(12), env=env, log_name="plain")
    assert plain.exit_code(120) != 0
    assert "half-restored from snapshot" in plain.log_tail(), plain.log_tail()
    again = start_runner(
        state,
        PIPELINE,
        *_args(12),
        "--restore-from",
        ids[-1],
        "--initial-pus",
        "3",
        env=env,
        log_name="restore-again",
    )
    again.wait_exit()
    assert [e["epoch"] for e in again.epochs()] == list(range(epoch + 1, 12))
    assert_matches_oracle(state, PIPELINE, _expected(12))  # type: ignore[arg-type]


def test_lost_and_corrupt_stores_are_rebuilt_from_the_last_snapshot(tmp_path: Path) -> None:
    """Two fragments: one store of the second goes missing and one of the first has its file
    flipped while the runner is stopped. The next start finds both (the missing one, and the
    other against the checksums taken at the clean stop), refills them from the newest snapshot
    and re-runs the epochs after it: the whole stores re-emit their recorded outputs, so the
    second fragment's lost store gets its inputs again. The state equals the oracle key by key,
    and the stores that were not lost were never rewound."""
    pipeline = "clickstream"
    recovery = tmp_path / "recovery"
    env = {"RESCALER_RECOVERY_DIR": str(recovery)}
    state = tmp_path / "state"
    config = GeneratorConfig(kind="events", key_space=KEYS)
    args = ("--rows-per-epoch", str(ROWS), "--key-space", str(KEYS))

    start_runner(
        state, pipeline, *args, "--epochs", "10", "--snapshot-every", "3", env=env
    ).wait_exit()
    latest = RecoveryLocation(recovery).manifest(pipeline, "latest")
    assert latest.epoch == 6
    root = state / pipeline
    second = [f.name for f in get_pipeline(pipeline).fragments]
    missing = pu_store(root, second[1], 1)
    shutil.rmtree(missing)
    flipped = pu_store(root, second[0], 0) / "data.mdb"
    data = bytearray(flipped.read_bytes())
    data[len(data) // 2] ^= 0xFF
    flipped.write_bytes(bytes(data))
    untouched = pu_store(root, second[0], 1)

    # killed after the rebuild's first re-run epoch: the next start finishes the same rebuild
    crash = {**env, "RESCALER_FAULT_CRASH_DURING": "rebuild"}
    killed = start_runner(state, pipeline, *args, "--epochs", "12", env=crash, log_name="killed")
    assert killed.exit_code(240) != 0
    assert (root / "fault-crashed-during-rebuild").exists()
    assert (root / "rebuild-pending.json").exists()
    restart = start_runner(state, pipeline, *args, "--epochs", "12", env=env, log_name="rebuild")
    restart.wait_exit()
    assert not (root / "rebuild-pending.json").exists()
    log_text = killed.log_path.read_text(errors="replace")
    assert "lost stores" in log_text and "missing" in log_text and "corrupt" in log_text, log_text
    rebuilt = json.loads((root / "rebuilt.json").read_text("utf-8"))
    # Spark may not have logged the last epoch's commit before the stop: it re-runs that one
    # itself, after the rebuild
    assert rebuilt["epoch"] in (8, 9), rebuilt["epoch"]
    assert rebuilt["snapshot_epoch"] == 6
    assert rebuilt["rerun_epochs"] == list(range(7, rebuilt["epoch"] + 1))
    # the finishing start finds them behind the epoch the killed one was rebuilding to
    assert sorted((s["fragment"], s["pu"], s["status"]) for s in rebuilt["lost"]) == sorted(
        [(second[1], 1, "behind"), (second[0], 0, "behind")]
    )
    assert [e["epoch"] for e in restart.epochs() if e["epoch"] >= 10] == [10, 11]
    assert untouched.is_dir()
    expected = expected_from_generator(pipeline, config, 12 * ROWS)
    assert_matches_oracle(state, pipeline, expected)


def test_a_store_lost_while_the_runner_runs_is_rebuilt_before_it_counts_again(
    tmp_path: Path,
) -> None:
    """A PU's store deleted under a running runner (its disk lost): the PU's next task finds
    the store behind the epoch the PU committed and refuses to apply anything on it, rather
    than counting from nothing; the runner rebuilds it from the newest snapshot and the epochs
    after it, then runs on. No epoch is lost or repeated, and the state equals the oracle."""
    recovery = tmp_path / "recovery"
    env = {"RESCALER_RECOVERY_DIR": str(recovery)}
    state = tmp_path / "state"
    runner = start_runner(state, PIPELINE, *_args(16), "--snapshot-every", "3", env=env)
    location = RecoveryLocation(recovery)
    runner.wait_for(
        lambda: bool(location.snapshot_ids(PIPELINE)) and len(runner.epochs()) >= 6,
        240,
        "a snapshot and six epochs",
    )
    lost = pu_store(state / PIPELINE, "word_count", 1)
    assert lost.is_dir()
    shutil.rmtree(lost, ignore_errors=True)
    runner.wait_exit()
    log_text = runner.log_path.read_text(errors="replace")
    assert "store lost: word_count PU 1" in log_text, runner.log_tail()
    assert "lost stores" in log_text, runner.log_tail()
    rebuilt = json.loads((state / PIPELINE / "rebuilt.json").read_text("utf-8"))
    assert [(s["fragment"], s["pu"]) for s in rebuilt["lost"]] == [("word_count", 1)]
    assert [e["epoch"] for e in runner.epochs()] == list(range(16)), "no epoch lost or repeated"
    assert_matches_oracle(state, PIPELINE, _expected(16))  # type: ignore[arg-type]


def test_periodic_snapshots_around_a_live_scale_out_restore_exactly(tmp_path: Path) -> None:
    """Snapshots every 2 epochs while a live 2 -> 4 scale-out moves vnodes in steps: none is
    taken while the operation has vnodes in transit, the ones after it hold the new mapping,
    and the newest, restored onto 3 PUs of a wiped machine, is exact against the oracle."""
    recovery = tmp_path / "recovery"
    env = {
        "RESCALER_RECOVERY_DIR": str(recovery),
        "RESCALER_PARALLEL_UNITS": "4",
        "RESCALER_SNAPSHOTS_KEPT": "50",
    }
    state = tmp_path / "state"
    # unbounded: stopped once a snapshot after the operation is written
    runner = start_runner(
        state, PIPELINE, "--rows-per-epoch", str(ROWS), "--key-space", str(KEYS),
        "--snapshot-every", "2", env=env,
    )  # fmt: skip
    runner.wait_for(lambda: len(runner.epochs()) >= 3, 240, "three committed epochs")
    request = OperationRequest.parse(
        {
            "changes": {"word_count": {"added_parallel_units": [2, 3]}},
            "strategy": "live",
            "granularity": {"vnodes_per_step": 32, "steps_in_flight": 2},
        }
    )
    result = rescale(state / PIPELINE, request, timeout_s=600).to_json()
    assert result["status"] == "completed", result
    steps = result["progress"]["steps"]
    first, last = min(s["collect_epoch"] for s in steps), max(s["drop_epoch"] for s in steps)
    location = RecoveryLocation(recovery)
    runner.wait_for(
        lambda: any(location.manifest(PIPELINE, i).epoch > last
                    for i in location.snapshot_ids(PIPELINE)),
        240,
        "a snapshot after the operation",
    )  # fmt: skip
    LocalControl(runner.control_dir).submit("stop")
    runner.wait_exit()

    manifests = [location.manifest(PIPELINE, i) for i in location.snapshot_ids(PIPELINE)]
    epochs = [m.epoch for m in manifests]
    assert not [e for e in epochs if first <= e <= last], (epochs, first, last)
    before = [m for m in manifests if m.epoch < first]
    after = [m for m in manifests if m.epoch > last]
    assert before and after, (epochs, first, last)
    assert all(m.fragments["word_count"].parallel_units == (0, 1) for m in before)
    assert all(m.fragments["word_count"].parallel_units == (0, 1, 2, 3) for m in after)
    newest = manifests[-1]

    shutil.rmtree(state)
    restored = start_runner(
        state,
        PIPELINE,
        *_args(newest.epoch + 3),
        "--restore-from",
        newest.snapshot_id,
        "--initial-pus",
        "3",
        env=env,
        log_name="restore-3",
    )
    restored.wait_exit()
    assert [e["epoch"] for e in restored.epochs()] == [newest.epoch + 1, newest.epoch + 2]
    assert_matches_oracle(state, PIPELINE, _expected(newest.epoch + 3))  # type: ignore[arg-type]


def test_a_lost_store_without_a_snapshot_is_refused_before_anything_changes(
    tmp_path: Path,
) -> None:
    """No snapshot to rebuild from: the start refuses, naming the store and what to do, and
    leaves the state directory as it found it (before, the store was opened empty)."""
    state = tmp_path / "state"
    env = {"RESCALER_RECOVERY_DIR": str(tmp_path / "recovery")}
    start_runner(state, PIPELINE, *_args(3), env=env).wait_exit()
    root = state / PIPELINE
    shutil.rmtree(pu_store(root, "word_count", 1))
    commits = sorted(p.name for p in (root / "checkpoint" / "commits").iterdir())
    refused = start_runner(state, PIPELINE, *_args(5), env=env, log_name="refused")
    assert refused.exit_code(240) != 0
    tail = refused.log_tail()
    assert "word_count PU 1: missing" in tail and "no snapshot" in tail, tail
    assert "--restore-from" in tail, "the refusal says what to do"
    assert sorted(p.name for p in (root / "checkpoint" / "commits").iterdir()) == commits
    assert not pu_store(root, "word_count", 1).exists(), "nothing was opened empty"
