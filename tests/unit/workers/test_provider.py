"""Where the local worker provider keeps its workers (workers/provider.py)."""

from __future__ import annotations

from pathlib import Path

from workers.provider import LocalProvider, local_workers_dir, provider_from_env


def test_the_workers_directory_defaults_to_state_dir_and_can_be_moved_off_it(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    assert local_workers_dir({"STATE_DIR": str(state)}) == state / "_spark_workers"
    assert local_workers_dir({}, state_dir=state) == state / "_spark_workers"
    elsewhere = tmp_path / "workers"
    moved = {"STATE_DIR": str(state), "RESCALER_LOCAL_WORKERS_DIR": str(elsewhere)}
    assert local_workers_dir(moved) == elsewhere
    assert local_workers_dir(moved, state_dir=state) == elsewhere
    provider = provider_from_env({**moved, "SPARK_MASTER": "spark://127.0.0.1:7077"})
    assert isinstance(provider, LocalProvider) and provider.dir == elsewhere
