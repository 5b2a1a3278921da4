"""Fault points for the crash tests: one place decides when a task kills the runner.

A test arms a fault through the environment it starts the runner with; the runner then
publishes its own pid (:func:`arm`) so that a task on any executor can kill the runner's whole
process group at the armed point. Each fault fires once per state directory: a marker file
there remembers it, so the restarted runner runs on.

This module is a leaf of the data plane: it imports nothing from ``workers``, so the epoch task
and the recovery tasks share it without importing each other.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

#: the first epoch >= this number whose outputs a PU writes kills the runner right after the
#: write, before Spark can commit the epoch
CRASH_AFTER_SINK_WRITE = "RESCALER_FAULT_CRASH_AFTER_SINK_WRITE"
#: "snapshot", "restore" or "rebuild": kills the runner right after the first segment written,
#: vnode ingested or epoch re-run of that kind
CRASH_DURING = "RESCALER_FAULT_CRASH_DURING"
#: set by the runner when a fault is armed: the process group a fault kills
RUNNER_PID = "RESCALER_RUNNER_PID"


def armed() -> bool:
    """Whether this process was started with a fault armed."""
    return bool(os.environ.get(CRASH_AFTER_SINK_WRITE) or os.environ.get(CRASH_DURING))


def arm() -> None:
    """Called by the runner at its start: the tasks it starts must find it."""
    if armed():
        os.environ[RUNNER_PID] = str(os.getpid())


def _fire_once(state_root: str, name: str, note: str) -> None:
    marker = Path(state_root) / name
    try:
        with open(marker, "x", encoding="ascii") as fh:
            fh.write(note)
    except FileExistsError:
        return
    os.killpg(os.getpgid(int(os.environ[RUNNER_PID])), signal.SIGKILL)


def after_sink_write(state_root: str, epoch: int, rows: int) -> None:
    """The fault point right after a PU wrote an epoch's outputs to the sink."""
    at = os.environ.get(CRASH_AFTER_SINK_WRITE)
    if not at or epoch < int(at) or not rows or not state_root:
        return
    _fire_once(state_root, "fault-crashed-after-sink-write", str(epoch))


def crash_point(kind: str, state_root: str) -> None:
    """The fault point of a recovery task: "snapshot", "restore" or "rebuild"."""
    if os.environ.get(CRASH_DURING) != kind or not state_root:
        return
    _fire_once(state_root, f"fault-crashed-during-{kind}", kind)
