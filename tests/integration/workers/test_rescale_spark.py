"""Live and stop-start rescales of running pipelines on real Spark (local[2]), against the oracle."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.s3service import S3Service
from tests.integration.workers.fixtures import RunnerProcess, assert_matches_oracle, start_runner
from workers.control import LocalControl
from workers.oracle import expected_from_generator
from workers.pipeline.builtins import get_pipeline
from workers.pipeline.placement import PlacementStore
from workers.rescale.local import LocalChannel, plan_local, rescale
from workers.rescale.orchestrator import Orchestrator
from workers.rescale.protocol import OperationRequest
from workers.sources.generator import GeneratorConfig
from workers.storage import location

pytestmark = [pytest.mark.integration, pytest.mark.spark]

VNODES = 32
ROWS = 4_000
KEYS = 3_000
BATCHED = {"vnodes_per_step": 4, "steps_in_flight": 2}


@pytest.fixture(autouse=True)
def _small_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    # four PUs on the local worker, 32 vnodes: room to scale 1..4 and quick steps
    monkeypatch.setenv("RESCALER_PARALLEL_UNITS", "4")
    monkeypatch.setenv("RESCALER_VNODES", str(VNODES))


def start(
    state: Path, pipeline: str, log_name: str = "runner", env: dict[str, str] | None = None
) -> RunnerProcess:
    """The pipeline's runner on the tests' workload (a restart: on the state it left)."""
    return start_runner(
        state,
        pipeline,
        "--rows-per-epoch",
        str(ROWS),
        "--key-space",
        str(KEYS),
        log_name=log_name,
        env=env,
    )


def launch(
    state: Path, pipeline: str, log_name: str = "runner", env: dict[str, str] | None = None
) -> RunnerProcess:
    """:func:`start`, once it has committed two epochs."""
    runner = start(state, pipeline, log_name, env)
    runner.wait_for(lambda: len(runner.epochs()) >= 2, 240, "two committed epochs")
    return runner


def request(
    pipeline: str, change: dict[str, list[int]], strategy: str, granularity: Any
) -> OperationRequest:
    return OperationRequest.parse(
        {
            "changes": {f.name: change for f in get_pipeline(pipeline).fragments},
            "strategy": strategy,
            "granularity": granularity,
        }
    )


def stop(runner: RunnerProcess) -> None:
    LocalControl(runner.control_dir).submit("stop")
    runner.wait_exit()


def check_oracle(state: Path, pipeline: str, runner: RunnerProcess) -> None:
    end = runner.epochs()[-1]["source_offset"]["offset"]
    config = GeneratorConfig(kind=get_pipeline(pipeline).source_kind, key_space=KEYS)
    assert_matches_oracle(state, pipeline, expected_from_generator(pipeline, config, end))


def pus_of(state: Path, pipeline: str) -> dict[str, tuple[int, ...]]:
    placements = PlacementStore(state / pipeline).load()
    assert placements is not None
    return {name: p.parallel_units for name, p in placements.items()}


def run_op(
    state: Path,
    pipeline: str,
    change: dict[str, list[int]],
    strategy: str,
    granularity: Any = BATCHED,
) -> dict[str, Any]:
    result = rescale(
        state / pipeline, request(pipeline, change, strategy, granularity), timeout_s=600
    ).to_json()
    assert result["status"] == "completed", result
    return result["progress"]


@pytest.mark.parametrize("strategy", ["live", "stop_start"])
@pytest.mark.parametrize("pipeline", ["wordcount", "clickstream"])
def test_scale_out_scale_in_and_migrate_keep_exact_state(
    tmp_path: Path, pipeline: str, strategy: str
) -> None:
    runner = launch(tmp_path, pipeline)
    frags = [f.name for f in get_pipeline(pipeline).fragments]

    run_op(tmp_path, pipeline, {"added_parallel_units": [2, 3]}, strategy)
    assert all(pus == (0, 1, 2, 3) for pus in pus_of(tmp_path, pipeline).values())
    # the default granularity: chosen from the plan's size (workers.rescale.pacing)
    run_op(tmp_path, pipeline, {"removed_parallel_units": [1, 2, 3]}, strategy, None)
    assert all(pus == (0,) for pus in pus_of(tmp_path, pipeline).values())
    progress = run_op(
        tmp_path, pipeline, {"added_parallel_units": [3], "removed_parallel_units": [0]}, strategy
    )
    assert all(pus == (3,) for pus in pus_of(tmp_path, pipeline).values())
    if strategy == "live":
        assert progress["vnodes_moved"] == VNODES * len(frags)
        assert all(s["keys_moved"] > 0 for s in progress["steps"])
    stop(runner)
    epochs = runner.epochs()
    assert [e["epoch"] for e in epochs] == list(range(len(epochs))), "no epoch lost or repeated"
    check_oracle(tmp_path, pipeline, runner)


@pytest.mark.parametrize("pipeline", ["wordcount", "clickstream"])
def test_hot_vnodes_cut_into_key_ranges_move_range_by_range(tmp_path: Path, pipeline: str) -> None:
    """A key cap below a vnode's keys cuts each moving vnode into key ranges, routed in Spark SQL
    by the second hash level while they move (the clickstream's processor keeps timers, whose
    index entries move with their key's range); the state is exact and every key ends on the PU
    its vnode maps to."""
    runner = launch(tmp_path, pipeline)
    granularity = {"vnodes_per_step": 4, "steps_in_flight": 2, "max_keys_per_step": 25}
    result = rescale(
        tmp_path / pipeline,
        request(pipeline, {"added_parallel_units": [2, 3]}, "live", granularity),
        timeout_s=600,
    ).to_json()
    assert result["status"] == "completed", result
    steps = result["progress"]["steps"]
    cut = [s for s in steps if s["key_range"] is not None]
    assert cut, "no vnode was cut: the test feeds too few keys per vnode"
    assert all(s["phase"] == "done" for s in steps)
    frags = [f.name for f in get_pipeline(pipeline).fragments]
    assert result["progress"]["vnodes_moved"] == VNODES // 2 * len(frags)
    assert all(pus == (0, 1, 2, 3) for pus in pus_of(tmp_path, pipeline).values())
    stop(runner)
    epochs = runner.epochs()
    assert [e["epoch"] for e in epochs] == list(range(len(epochs))), "no epoch lost or repeated"
    check_oracle(tmp_path, pipeline, runner)


def test_a_full_hold_queue_pauses_the_stream_until_its_step_is_acquired(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A one-byte bound (docs/rescale.md, "Bounded hold queues"): every step that held records
    in its collect epoch is acquired at the very next barrier, whether its export was done by
    then or the barrier waited for it; nothing is lost, duplicated or reordered."""
    monkeypatch.setenv("RESCALER_HOLD_QUEUE_STEP_BYTES", "1")
    runner = launch(tmp_path, "wordcount")
    progress = run_op(tmp_path, "wordcount", {"added_parallel_units": [2, 3]}, "live")
    held = [s for s in progress["steps"] if s["hold_bytes"]]
    assert held, "no step held records: the test feeds too little"
    spans = {s["step"]: s["acquire_epoch"] - s["collect_epoch"] for s in held}
    assert set(spans.values()) == {1}, f"epochs from collect to acquire, by step: {spans}"
    assert all(s["hold_queue"] > 0 for s in held)
    stop(runner)
    epochs = runner.epochs()
    assert [e["epoch"] for e in epochs] == list(range(len(epochs))), "no epoch lost or repeated"
    check_oracle(tmp_path, "wordcount", runner)


def test_dry_run_refusals_and_plan(tmp_path: Path) -> None:
    runner = launch(tmp_path, "wordcount")
    pipeline_dir = tmp_path / "wordcount"
    plan = plan_local(
        pipeline_dir, request("wordcount", {"added_parallel_units": [2, 3]}, "live", "fluid")
    )
    body = plan.to_json()["fragments"]["word_count"]
    assert body["vnodes_moved"] == VNODES // 2
    assert body["balance_after"]["vnodes_per_pu"] == {"0": 8, "1": 8, "2": 8, "3": 8}
    assert plan.estimate_s > 0
    from workers.rescale import errors

    cases = [
        ({"added_parallel_units": [9]}, errors.UnknownParallelUnit),
        ({"added_parallel_units": [1]}, errors.AlreadyInFragment),
        ({"removed_parallel_units": [3]}, errors.NotInFragment),
        ({"removed_parallel_units": [0, 1]}, errors.RemovesEveryUnit),
    ]
    for change, error in cases:
        with pytest.raises(error):
            plan_local(pipeline_dir, request("wordcount", change, "live", "fluid"))
    stop(runner)


def test_cancel_keeps_finished_moves_and_one_owner_per_vnode(tmp_path: Path) -> None:
    pipeline = "clickstream"
    runner = launch(tmp_path, pipeline)
    req = request(pipeline, {"added_parallel_units": [2, 3]}, "live", "fluid")
    orch = Orchestrator(
        LocalChannel(LocalControl(runner.control_dir)),
        "cancel-me",
        plan_local(tmp_path / pipeline, req),
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        tick = orch.tick().to_json()
        steps = (tick["progress"] or {}).get("steps", [])
        if sum(s["phase"] == "done" for s in steps) >= 2:
            break
        time.sleep(0.2)
    orch.cancel()
    result = orch.run(timeout_s=300).to_json()
    assert result["status"] == "cancelled", result
    progress = result["progress"]
    moved = {
        (s["fragment"], v) for s in progress["steps"] if s["phase"] == "done" for v in s["vnodes"]
    }
    assert 2 <= len(moved) < VNODES * 2
    assert all(s["phase"] in ("done", "cancelled") for s in progress["steps"])
    stop(runner)
    placements = PlacementStore(tmp_path / pipeline).load()
    assert placements is not None
    for name, placement in placements.items():
        assert set(placement.mapping) <= set(placement.parallel_units)
        for vnode, pu in enumerate(placement.mapping):
            assert (pu in (2, 3)) == ((name, vnode) in moved), f"{name} vnode {vnode} on PU {pu}"
    check_oracle(tmp_path, pipeline, runner)  # assert_matches_oracle checks each key's owner (I1)


@contextlib.contextmanager
def full_disk(path: Path) -> Iterator[None]:
    """``path`` on a one-page tmpfs filled to the last byte: every write there fails with ENOSPC,
    as on a full disk (needs root, as CI has; skipped otherwise)."""
    path.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs", str(path)], capture_output=True
    )
    if mounted.returncode:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        # unbuffered: the write that finds the disk full fails, and nothing is left to flush
        with open(path / "ballast", "wb", buffering=0) as fh, contextlib.suppress(OSError):
            while True:
                fh.write(b"x" * 512)
        yield
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_a_cancel_returns_held_steps_whose_exports_hit_a_full_disk(tmp_path: Path) -> None:
    """The exports' directory is full: every export fails and is retried, the steps stay held.
    A cancel gives them back to their source (docs/rescale.md, "Cancel"): the operation ends
    cancelled with nothing moved, every vnode where it was, nothing sealed, exact state."""
    pipeline = "wordcount"
    runner = launch(tmp_path, pipeline)
    req = request(pipeline, {"added_parallel_units": [2, 3]}, "live", BATCHED)
    pipeline_dir = tmp_path / pipeline
    orch = Orchestrator(
        LocalChannel(LocalControl(runner.control_dir)), "disk-full", plan_local(pipeline_dir, req)
    )
    with full_disk(pipeline_dir / "rescale" / "op-disk-full" / "exports"):
        deadline = time.monotonic() + 300
        held: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            steps = (orch.tick().to_json()["progress"] or {}).get("steps", [])
            held = [s for s in steps if s["phase"] == "collecting" and s["hold_queue"] > 0]
            if held and any("export failed" in s["error"] for s in steps):
                break
            time.sleep(0.2)
        assert held, "no step was held with a failing export"
        orch.cancel()
        result = orch.run(timeout_s=300).to_json()
    assert result["status"] == "cancelled", result
    steps = result["progress"]["steps"]
    assert all(s["phase"] == "cancelled" and s["acquire_epoch"] is None for s in steps), steps
    assert result["progress"]["vnodes_moved"] == 0
    returned = [s for s in steps if s["collect_epoch"] is not None]
    assert returned, "no step was returned to its source"
    stop(runner)
    placements = PlacementStore(pipeline_dir).load()
    assert placements is not None
    assert placements["word_count"].parallel_units == (0, 1), "the added PUs are released"
    check_oracle(tmp_path, pipeline, runner)  # every key exact, on the PU its vnode maps to


@pytest.mark.parametrize(
    ("pipeline", "strategy"),
    # clickstream's two fragments (two shuffles, a chained operator) take every path
    # wordcount's one would; wordcount's kill -9 mid-run is in test_pipeline_oracle.py
    # live_cut: every moving vnode cut into key ranges, so the kill finds a vnode with some
    # ranges on its target and one in flight
    [("clickstream", "live"), ("clickstream", "stop_start"), ("clickstream", "live_cut")],
)
def test_kill_9_of_the_runner_mid_operation_then_restart(
    tmp_path: Path, pipeline: str, strategy: str
) -> None:
    # page_stats folded in Spark before the kill (docs/data-plane.md, "Pre-aggregation"), not
    # after: hold queues of partial rows are replayed among record rows
    runner = launch(tmp_path, pipeline, env={"RESCALER_PREAGGREGATE": "1"})
    granularity: dict[str, int] = dict(BATCHED)  # 8 steps per fragment: some done, some not
    if strategy == "live_cut":
        strategy, granularity["max_keys_per_step"] = "live", 25
    req = request(pipeline, {"added_parallel_units": [2, 3]}, strategy, granularity)
    orch = Orchestrator(
        LocalChannel(LocalControl(runner.control_dir)),
        "survivor",
        plan_local(tmp_path / pipeline, req),
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        tick = orch.tick().to_json()
        steps = (tick["progress"] or {}).get("steps", [])
        if strategy == "stop_start" and tick["progress"] is not None:
            break
        if sum(s["phase"] == "done" for s in steps) >= 1 and any(
            s["phase"] not in ("done", "pending") for s in steps
        ):
            break  # some steps done, one in flight
        time.sleep(0.05)
    runner.kill()
    assert "page_stats: records folded per key in Spark" in runner.log_path.read_text()
    restarted = start(tmp_path, pipeline, "restart")
    result = orch.run(timeout_s=600).to_json()
    assert result["status"] == "completed", result
    stop(restarted)
    assert "records folded" not in restarted.log_path.read_text()
    state = json.loads((tmp_path / pipeline / "placement.json").read_text())
    assert all(tuple(p["parallel_units"]) == (0, 1, 2, 3) for p in state.values())
    check_oracle(tmp_path, pipeline, restarted)


def test_a_live_rescale_moves_state_and_held_records_through_an_object_store(
    tmp_path: Path, s3_service: S3Service
) -> None:
    """Exports and hold queues in a real S3 API (moto's server), not in the state directory:
    the state crosses from the source PU's task to the target's through the object store only,
    and the held records survive a kill -9 of the runner mid-migration, then are replayed."""
    pipeline = "clickstream"
    bucket = s3_service.bucket()
    uri = s3_service.uri(bucket, "durable")
    durable = location(f"s3://{bucket}/durable/{pipeline}?{s3_service.query()}")
    env = {"RESCALER_DURABLE_LOCATION": uri}
    runner = launch(tmp_path, pipeline, env=env)
    run_op(tmp_path, pipeline, {"added_parallel_units": [2]}, "live")
    req = request(
        pipeline, {"added_parallel_units": [3], "removed_parallel_units": [0]}, "live", BATCHED
    )
    orch = Orchestrator(
        LocalChannel(LocalControl(runner.control_dir)),
        "through-s3",
        plan_local(tmp_path / pipeline, req),
    )
    seen: set[str] = set()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        steps = (orch.tick().to_json()["progress"] or {}).get("steps", [])
        seen.update(durable.files("rescale"))
        if any(s["phase"] == "done" for s in steps) and any(
            s["phase"] not in ("done", "pending") for s in steps
        ):
            break  # some steps done, one in flight: its hold queue is in the bucket
        time.sleep(0.05)
    runner.kill()
    seen.update(durable.files("rescale"))
    assert any("/holdq/" in f for f in seen), f"no hold queue reached the bucket: {sorted(seen)}"
    assert any("/exports/" in f for f in seen), f"no export reached the bucket: {sorted(seen)}"
    restarted = start(tmp_path, pipeline, "restart", env)
    result = orch.run(timeout_s=600).to_json()
    assert result["status"] == "completed", result
    assert all(pus == (1, 2, 3) for pus in pus_of(tmp_path, pipeline).values())
    # a stop-start stages its snapshot in the bucket too
    run_op(tmp_path, pipeline, {"removed_parallel_units": [3]}, "stop_start")
    assert all(pus == (1, 2) for pus in pus_of(tmp_path, pipeline).values())
    stop(restarted)
    # nothing of it went through the state directory, and the spent files are gone
    pipeline_dir = tmp_path / pipeline
    assert not (pipeline_dir / "rescale" / "holdq").exists()
    assert not list((pipeline_dir / "rescale").glob("op-*/exports"))
    assert not list((pipeline_dir / "rescale").glob("op-*/snapshot"))
    assert durable.files("rescale") == []
    check_oracle(tmp_path, pipeline, restarted)
