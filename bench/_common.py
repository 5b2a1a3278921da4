"""Helpers shared by the benchmarks in ``bench/``: logging, machine info, peak memory, tables, JSON.

Nothing here imports Spark or the project's packages, so any benchmark (and its child processes)
can use it without paying for a JVM.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

MB = 1024 * 1024


def log(message: str, *, prefix: str = "bench") -> None:
    """One progress line on stderr (stdout is kept for results)."""
    print(f"[{prefix} {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- machine -----------------------------------------------------------------------------------
def _java_version() -> str:
    try:
        out = subprocess.run(
            ["java", "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    # `java -version` writes to stderr; its first line names the version
    lines = (out.stderr or out.stdout).strip().splitlines()
    return lines[0] if lines else "unknown"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def machine_info(
    packages: Sequence[str] = ("pyspark", "pyarrow", "pandas", "numpy"),
) -> dict[str, Any]:
    """Where and when a benchmark ran: enough to tell whether two results are comparable."""
    mem = psutil.virtual_memory()
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cores_logical": os.cpu_count(),
        "cores_physical": psutil.cpu_count(logical=False),
        "cpu_model": _cpu_model(),
        "memory_total_mb": round(mem.total / MB),
        "os": platform.platform(),
        "python": platform.python_version(),
        "java": _java_version(),
        "packages": {name: _version(name) for name in packages},
        # Load before the run: on a shared 2-core machine other work skews every number.
        "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
    }


# -- peak memory of a process tree ---------------------------------------------------------------
def _role(proc: psutil.Process, root_pid: int) -> str:
    if proc.pid == root_pid:
        return "driver"
    try:
        name = proc.name().lower()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return "helper"
    if name == "java":
        try:  # a spawn from the JVM's main thread would also be called "java"
            parent = proc.parent()
            if parent is not None and parent.name().lower() == "java":
                return "helper"
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return "helper"
        return "jvm"
    if name.startswith("python"):
        return "python_workers"
    # Anything else is a short-lived helper: bash, chmod, rm (Hadoop's local file system shells
    # out), jspawnhelper, and — the reason for excluding them — a JVM thread's clone between
    # posix_spawn and exec: it shares the JVM's memory (CLONE_VM) and carries the thread's name
    # ("Executor task l", "stream executio"), so counting it would add the whole JVM twice.
    return "helper"


@dataclass
class MemoryPeak:
    peak_mb: float = 0.0
    by_role_at_peak: dict[str, float] = field(default_factory=dict)
    max_by_role: dict[str, float] = field(default_factory=dict)  # each role's own maximum
    processes_at_peak: int = 0
    helper_samples: int = 0  # samples that saw (and left out) a helper process
    samples: int = 0
    interval_s: float = 0.1

    def to_json(self) -> dict[str, Any]:
        return {
            "peak_rss_mb": round(self.peak_mb, 1),
            "by_role_at_peak_mb": {k: round(v, 1) for k, v in sorted(self.by_role_at_peak.items())},
            "max_by_role_mb": {k: round(v, 1) for k, v in sorted(self.max_by_role.items())},
            "processes_at_peak": self.processes_at_peak,
            "samples": self.samples,
            "samples_with_helpers_excluded": self.helper_samples,
            "interval_s": self.interval_s,
        }


class PeakRssSampler:
    """Samples the summed RSS of a process and all its descendants in a background thread.

    RSS, not PSS: reading PSS means parsing smaps, which for a JVM takes longer than the sampling
    interval. RSS double-counts pages that forked Python workers still share with their daemon,
    so the sum is an upper bound; every contender is measured the same way. Only the root, ``java``
    and ``python*`` processes are summed; see ``_role`` for why helpers are left out.

    Use as a context manager, or ``start()`` / ``stop()`` around the phase to measure.
    """

    def __init__(self, pid: int | None = None, interval_s: float = 0.1) -> None:
        self.pid = pid if pid is not None else os.getpid()
        self.interval_s = interval_s
        self.result = MemoryPeak(interval_s=interval_s)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._procs: dict[int, psutil.Process] = {}

    def _tree(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.pid)
            found = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []
        # Keep Process objects across samples: psutil then reuses their cached identity.
        current = {}
        for proc in found:
            current[proc.pid] = self._procs.get(proc.pid, proc)
        self._procs = current
        return list(current.values())

    def sample(self) -> None:
        by_role: dict[str, float] = {}
        count = 0
        helpers = False
        for proc in self._tree():
            role = _role(proc, self.pid)
            if role == "helper":
                helpers = True
                continue
            try:
                rss = proc.memory_info().rss / MB
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue  # a worker that exited between listing and reading
            by_role[role] = by_role.get(role, 0.0) + rss
            count += 1
        total = sum(by_role.values())
        result = self.result
        result.samples += 1
        result.helper_samples += helpers
        for role, mb in by_role.items():
            result.max_by_role[role] = max(result.max_by_role.get(role, 0.0), mb)
        if total > result.peak_mb:
            result.peak_mb = total
            result.by_role_at_peak = by_role
            result.processes_at_peak = count

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def start(self) -> PeakRssSampler:
        self._thread = threading.Thread(target=self._loop, name="rss-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> MemoryPeak:
        """Stop sampling (idempotent) and return the peak."""
        if self._stop.is_set():
            return self.result
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()  # one last look, so a very short phase still has a sample
        return self.result

    def __enter__(self) -> PeakRssSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- statistics, tables, files -------------------------------------------------------------------
def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) with linear interpolation, as numpy's default does."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table; numbers are right-aligned, text left-aligned."""
    cells = [[str(h) for h in headers]] + [["" if v is None else str(v) for v in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    numeric = [
        all(_looks_numeric(r[i]) for r in cells[1:] if r[i]) and len(cells) > 1
        for i in range(len(headers))
    ]

    def line(row: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if num else c.ljust(w)
            for c, w, num in zip(row, widths, numeric, strict=True)
        ).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule, *(line(r) for r in cells[1:])])


def _looks_numeric(text: str) -> bool:
    try:
        float(text.replace(",", "").rstrip("x%"))
    except ValueError:
        return False
    return True


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
