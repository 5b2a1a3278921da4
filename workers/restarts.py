"""When the streaming query fails: restart it, wait out a full disk, or give up.

Re-running an epoch is always safe (atomic commits, recorded plans), so a transient failure (an
overloaded host, a lost executor, a killed Python worker) must not end the run: the runner
restarts the query after a back-off. It gives up after ``limit`` failures **in a row**: a query
that committed an epoch since it was started was working, so its failure starts the count again
(without that, three transient failures over weeks of running would stop a healthy pipeline).

A full disk is not a failure of the pipeline: every write of the epoch (a store's commit, a hold
queue, a snapshot) fails until space is freed, and restarting sooner changes nothing. The runner
waits for it, re-trying at most every 30 s, and does not count those failures, for up to
``disk_full_patience_s``; then it stops with an error that says which directory to free.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

DISK_FULL_MARKERS = ("No space left on device", "[Errno 28]", "ENOSPC")
BACKOFF_S = (2.0, 30.0)  # doubling from 2 s, at most 30 s


class QueryGivenUp(Exception):
    """The streaming query failed too often in a row, or the disk stayed full too long."""


def disk_full(failure: str) -> bool:
    """Whether a failure's text says a write found the disk full (Python's or the JVM's)."""
    return any(marker in failure for marker in DISK_FULL_MARKERS)


@dataclass
class QueryRestarts:
    limit: int
    state_dir: Path
    disk_full_patience_s: float = 600.0
    failures: int = 0  # in a row; a full disk's are not counted
    disk_failures: int = 0  # in a row, while the disk is full
    disk_full_s: float = 0.0  # waited for space since the disk was found full

    def failed(self, failure: str, *, progressed: bool) -> float:
        """Record a failure of the query; returns how long to wait before restarting it, or
        raises :class:`QueryGivenUp`. ``progressed``: it committed an epoch since its start."""
        if progressed:
            self.failures = self.disk_failures = 0
            self.disk_full_s = 0.0
        if disk_full(failure):
            self.disk_failures += 1
            wait = min(BACKOFF_S[0] * 2.0 ** (self.disk_failures - 1), BACKOFF_S[1])
            if self.disk_full_s + wait > self.disk_full_patience_s:
                raise QueryGivenUp(
                    f"the disk of {self.state_dir} stayed full for {self.disk_full_s:.0f} s "
                    f"({self.free_text()}): free space there (or point STATE_DIR at a larger "
                    f"disk) and start the runner again; last failure: {failure}"
                )
            self.disk_full_s += wait
            return wait
        self.disk_failures, self.disk_full_s = 0, 0.0
        self.failures += 1
        if self.failures > self.limit:
            raise QueryGivenUp(
                f"the streaming query failed {self.failures} times in a row; last: {failure}"
            )
        return min(BACKOFF_S[0] ** self.failures, BACKOFF_S[1])

    def describe(self) -> str:
        if self.disk_failures:
            return (
                f"the disk is full: waited {self.disk_full_s:.0f} of "
                f"{self.disk_full_patience_s:.0f} s for space ({self.free_text()})"
            )
        return f"failure {self.failures} of {self.limit} in a row"

    def free_text(self) -> str:
        try:
            usage = shutil.disk_usage(self.state_dir)
        except OSError as exc:
            return f"free space unknown: {exc}"
        return f"{usage.free / 1e6:,.0f} MB free of {usage.total / 1e6:,.0f} MB"
