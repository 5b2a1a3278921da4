"""Where the local worker provider keeps its workers (workers/provider/local.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.provider import LocalProvider, ProviderError, local_workers_dir, provider_from_env


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


def test_a_release_after_the_runner_restarted_stops_the_machine_of_the_new_application(
    tmp_path: Path,
) -> None:
    """A restarted runner is a new Spark application whose executor ids start again at 0, and
    a worker's directory keeps one folder per application and executor. Executor "0" of the
    new application is not the machine that ran executor "0" of the old one (in one soak the
    release of a drained worker stopped the machine of another, which then looked lost)."""
    import json
    import os

    old, new = "app-20261127122900-0000", "app-20261127123109-0001"
    layout = {1: [f"{old}/0", f"{new}/1"], 3: [f"{old}/2", f"{new}/0"], 4: [f"{new}/2"]}
    rows = []
    for worker_id, folders in layout.items():
        work = tmp_path / f"worker-{worker_id}"
        for folder in folders:
            (work / folder).mkdir(parents=True)
        rows.append(
            {"worker_id": worker_id, "pid": os.getpid(), "port": 1, "webui_port": 2,
             "cores": 1, "work_dir": str(work), "log": str(tmp_path / "w.log")}
        )  # fmt: skip
    (tmp_path / "workers.json").write_text(json.dumps(rows))
    provider = LocalProvider("spark://127.0.0.1:7077", tmp_path)

    def machine(executor_id: str) -> int | None:
        found = provider.executor_host(executor_id)
        return None if found is None else found.worker_id

    assert [machine(e) for e in ("0", "1", "2", "3")] == [3, 1, 4, None]


def test_the_local_workers_keep_their_stores_outside_the_state_directory(tmp_path: Path) -> None:
    from workers.provider import local_store_dir

    state = tmp_path / "var" / "state"
    assert local_store_dir({}, state) == tmp_path / "var" / "executors" / "local-workers"
    assert local_store_dir({"STATE_DIR": str(state)}) == local_store_dir({}, state)
    assert local_store_dir({"RESCALER_LOCAL_DIR": "/disk"}, state) == Path("/disk")
    assert not local_store_dir({}, state).is_relative_to(state)


def test_each_local_worker_has_a_disk_of_its_own_when_asked(tmp_path: Path) -> None:
    """RESCALER_LOCAL_DISKS=private: the provider every process makes from the environment
    (Celery's "add worker", the soak's own) gives each worker its own disk, as if each were a
    host; the default keeps this host's one directory for all of them."""
    env = {"SPARK_MASTER": "spark://127.0.0.1:7077", "STATE_DIR": str(tmp_path / "state")}
    shared = provider_from_env(env)
    private = provider_from_env({**env, "RESCALER_LOCAL_DISKS": "private"})
    assert isinstance(shared, LocalProvider) and isinstance(private, LocalProvider)
    work = tmp_path / "workers" / "worker-1"
    assert shared.disk_of(work) == shared.local_dir
    assert private.disk_of(work) == work / "local"
    with pytest.raises(ProviderError, match="shared or private"):
        provider_from_env({**env, "RESCALER_LOCAL_DISKS": "own"})
