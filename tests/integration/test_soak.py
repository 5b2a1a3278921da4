"""The soak's 2-minute profile (bench/soak.py --quick, issue 24) on a fixed seed: the whole stack
(daphne, two Celery workers, the runner on a standalone Spark master with one-core workers, a
private Postgres and Redis, a Postgres sink) under operations, readers, websocket clients and
faults. Every operation must end final, nothing may be lost or duplicated in the state or the
sink, no process may exit by itself, no 5xx may be answered outside daphne's own downtime, and
no websocket client may end on a stale status.

The seed's schedule kills a Celery worker, loses a Spark host (its worker killed and its disk,
with its PUs' stores, deleted: each worker has a disk of its own) during a batched operation,
kills the runner and restarts Postgres, while a fluid operation is cancelled and a worker is
added and drained (``bench/soak.py --quick
--seed 7 --print-schedule``). The goals that need the 30-minute run and a quiet machine (60
operations, read p99) are the benchmark's, not this test's.

In one CI run it left an operation running for ever: a driver that Postgres's restart failed with
its lease taken came back as a new owner, found the lease taken and queued nothing, and the one
resume chain had stopped (tests/unit/rescaler/test_operations_services.py covers both now).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.stack import REPO

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(1500)]

SEED = 7


def _faults() -> list[str]:
    """Every kind; without root the disk_full fault (it mounts a tmpfs) is left out, and said."""
    if os.geteuid() == 0:
        return []
    return ["--faults", "kill_runner,kill_celery,kill_daphne,lose_spark_host,"
            "restart_postgres,restart_redis"]  # fmt: skip


def _diagnosis(report: dict[str, Any], output: str) -> str:
    """What a failed run leaves to read when its machine is gone (a CI clone): the errors, the
    operations that did not end, and the tails of the kept run's logs."""
    ops = report.get("operations") or {}
    parts = [
        f"errors: {report['errors']}",
        f"unfinished: {ops.get('unfinished_list')}",
        f"operations: {json.dumps((report.get('timeline') or {}).get('operations'))[:4000]}",
    ]
    kept = re.search(r"kept the run directory (\S+)", output)
    if kept:
        for log in sorted((Path(kept.group(1)) / "logs").glob("*.log")):
            lines = log.read_text("utf-8", errors="replace").splitlines()
            parts.append(f"--- {log} (last 60 lines)\n" + "\n".join(lines[-60:]))
    return "\n".join(parts)


def test_the_two_minute_soak_ends_every_operation_and_loses_nothing(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    done = subprocess.run(
        [sys.executable, "bench/soak.py", "--quick", "--seed", str(SEED), "--allow-load",
         "--out", str(out), *_faults()],
        cwd=REPO, capture_output=True, text=True, timeout=1400, check=False,
        env={k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"},
    )  # fmt: skip
    tail = (done.stdout + done.stderr)[-6000:]
    assert out.exists(), f"no report (exit {done.returncode}):\n{tail}"
    report: dict[str, Any] = json.loads(out.read_text())
    assert done.returncode == 0 and report["error"] is None, tail
    assert report["errors"] == [], _diagnosis(report, done.stdout + done.stderr)

    faults = report["faults"]
    assert faults["failed_to_inject"] == [] and faults["injected"] == len(
        report["schedule"]["faults"]
    ), faults
    ops = report["operations"]
    assert ops["requested_by_the_soak"] >= 2, ops
    assert ops["unfinished"] == 0 and ops["final"] == ops["total"], ops["unfinished_list"]
    assert ops["failed"] == 0, ops["failed_list"]

    ver = report["verification"]
    for part in ("state", "sink"):  # every key equal to the oracle, none stored twice
        assert ver[part] is not None and ver[part]["exact"], (part, ver, ver.get("sink_error"))
    assert ver["state_and_placement_problem"] is None, ver["state_and_placement_problem"]
    assert ver["runner_stopped_cleanly"], ver["runner_stop"]
    assert report["unexpected_exits"] == [], report["unexpected_exits"]
    assert report["http"]["five_xx_outside_daphne_down"] == 0, report["http"]["five_xx_samples"]
    assert report["websockets"]["clients_stale"] == 0, report["websockets"]["stale"]
