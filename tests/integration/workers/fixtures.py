"""Running the pipeline runner as a real process, and checking its state against the oracle."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from workers.hashing import vnode_of
from workers.oracle import OracleResult, compare
from workers.pipeline.builtins import get_pipeline
from workers.pipeline.placement import PlacementStore
from workers.readout import iter_state
from workers.store_homes import StoreHomes

REPO = Path(__file__).resolve().parents[3]


@dataclass
class RunnerProcess:
    """A ``python -m workers run`` child process with its log."""

    proc: subprocess.Popen[bytes]
    log_path: Path
    state_dir: Path
    pipeline: str

    @property
    def control_dir(self) -> Path:
        return self.state_dir / self.pipeline / "control"

    def epochs(self) -> list[dict[str, Any]]:
        path = self.control_dir / "epochs.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def log_tail(self, n: int = 40) -> str:
        lines = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(lines[-n:])

    def wait_for(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"runner exited with {self.proc.returncode} before {what}:\n{self.log_tail()}"
                )
            time.sleep(0.2)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}:\n{self.log_tail()}")

    def exit_code(self, timeout: float = 240) -> int:
        """The runner's exit code once it exits. If it does not within ``timeout``, its threads'
        stacks (Python's, by SIGUSR1: workers/cli.py, and the JVM's, by SIGQUIT) go to its log,
        it is killed, and the failure shows where it hung."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.dump_stacks()
            self.kill()
            raise AssertionError(
                f"runner did not exit in {timeout}s; its stacks are in {self.log_path}:\n"
                f"{self.log_tail(200)}"
            ) from None

    def wait_exit(self, timeout: float = 240) -> int:
        code = self.exit_code(timeout)
        assert code == 0, f"runner exited with {code}:\n{self.log_tail()}"
        return code

    def dump_stacks(self) -> None:
        """Every thread's stack of the runner and of its JVM, into its log."""
        with contextlib.suppress(psutil.Error):
            runner = psutil.Process(self.proc.pid)
            runner.send_signal(signal.SIGUSR1)
            for child in runner.children(recursive=True):
                if "java" in child.name():
                    child.send_signal(signal.SIGQUIT)
            time.sleep(3.0)

    def kill(self) -> None:
        """kill -9 the runner and everything it started (the JVM and its Python workers)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


_STARTED: list[RunnerProcess] = []


def kill_started_runners() -> None:
    """kill -9 every runner a test started and left running (a failed test's, typically)."""
    while _STARTED:
        _STARTED.pop().kill()


def start_runner(
    state_dir: Path,
    pipeline: str,
    *args: str,
    log_name: str = "runner",
    env: dict[str, str] | None = None,
    ref: str | None = None,
) -> RunnerProcess:
    """``env``: more environment (e.g. ``SPARK_MASTER`` of a standalone cluster); ``ref``: the
    pipeline's definition when it is not the built-in named ``pipeline``."""
    log_path = state_dir / f"{log_name}-{int(time.time() * 1000)}.log"
    state_dir.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_MASTER": "local[2]",
        **(env or {}),
    }
    cmd = [
        sys.executable,
        "-m",
        "workers",
        "run",
        "--pipeline",
        ref or pipeline,
        "--state-dir",
        str(state_dir),
        "--no-spark-ui",
        "--trigger-interval",
        "0",
        *args,
    ]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    runner = RunnerProcess(proc, log_path, state_dir, pipeline)
    _STARTED.append(runner)
    return runner


def exported(state_dir: Path, pipeline: str, fragment: str) -> dict[str, dict[str, Any]]:
    """key -> {"vnode", "pu", "value"}; fails on a key stored twice (I1)."""
    rows: dict[str, dict[str, Any]] = {}
    for row in iter_state(state_dir, pipeline, fragment):
        assert row["key"] not in rows, f"{fragment}: key {row['key']!r} is in two stores: I1 broken"
        rows[row["key"]] = row
    return rows


def assert_stores_on_executors(state_dir: Path, pipeline: str) -> None:
    """The driver's state directory holds no store: each is in the directory of the executor
    whose task last ran it (workers/layout.py), as the tasks reported (workers/store_homes.py)."""
    stray = [p for p in Path(state_dir).rglob("pu-*") if p.parent.parent.name == "stores"]
    assert not stray, f"stores in the driver's state directory: {stray}"
    homes = StoreHomes(Path(state_dir) / pipeline).load()
    assert homes, "no PU task reported where its store is"
    # the stores in use: a PU that holds no vnode any more may be gone with its executor's disk
    placements = PlacementStore(Path(state_dir) / pipeline).load() or {}
    for (fragment, pu), home in homes.items():
        if fragment in placements and pu not in placements[fragment].parallel_units:
            continue
        path = home.path(fragment, pu)
        assert path.is_dir(), f"{fragment} PU {pu}: no store at {path}"
        assert not path.is_relative_to(Path(state_dir).resolve()), path
        assert path.parts[-4:-2] == (pipeline, "stores"), path


def assert_matches_oracle(state_dir: Path, pipeline: str, expected: OracleResult) -> None:
    """Every key of every stateful fragment equals the oracle, on the PU its vnode maps to, in
    its executor's own directory."""
    assert_stores_on_executors(state_dir, pipeline)
    spec = get_pipeline(pipeline)
    placements = PlacementStore(state_dir / pipeline).load()
    assert placements is not None
    for frag in spec.fragments:
        rows = exported(state_dir, pipeline, frag.name)
        actual = {k: r["value"] for k, r in rows.items()}
        problems = compare(expected.state[frag.name], actual)
        assert not problems, f"{pipeline}/{frag.name} differs from the oracle:\n" + "\n".join(
            problems
        )
        mapping = placements[frag.name].mapping
        for key, row in rows.items():
            vnode = vnode_of(key, len(mapping))
            assert row["vnode"] == vnode, (
                f"{key!r} stored under vnode {row['vnode']}, hashes to {vnode}"
            )
            assert row["pu"] == mapping[vnode], (
                f"{key!r} (vnode {vnode}) is on PU {row['pu']}, the mapping says {mapping[vnode]}"
            )
