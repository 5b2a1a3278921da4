"""Helpers shared by the benchmarks in ``bench/``: logging, machine info, peak memory, the load
gate, child processes, repetitions and their aggregation, Spark progress, tables, JSON.

Nothing here imports Spark or the project's packages at import time (the few helpers that need
``workers`` import it when called), so any benchmark (and its child processes) can use it
without paying for a JVM. The Spark-side pieces the benchmarks share are in ``bench/_spark.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

import psutil

ROOT = Path(__file__).resolve().parents[1]
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


# -- the machine's CPU ------------------------------------------------------------------------------
def busy_cpu_s() -> float:
    """CPU-seconds the machine's cores have spent busy since boot, summed over cores (user, nice,
    system, interrupts and steal; not idle or I/O wait). A benchmark runs alone, so the change
    between two readings is its own processes' CPU, the JVM's compiler and collector threads
    and the Python workers included, which a process-tree reading would miss for workers that
    ended between the readings."""
    t = psutil.cpu_times()
    return float(
        t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)
        + getattr(t, "steal", 0.0)
    )  # fmt: skip


_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def _thread_role(name: str) -> str:
    """A JVM thread's share of the CPU profile, by the name the JVM gives it."""
    if "CompilerThre" in name:
        return "jvm_jit"
    if name.startswith(("GC Thread", "G1 ", "VM Thread", "VM Periodic")):
        return "jvm_gc"
    if name.startswith("Executor task"):
        return "jvm_tasks"
    return "jvm_other"


def _proc_cpu_s(stat: str) -> float:
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) * _TICK_S  # utime, stime


def cpu_s_by_role(root_pid: int | None = None) -> dict[str, float]:
    """CPU-seconds so far of a process tree by role: the root's Python (``driver``), each JVM's
    threads by kind (``jvm_jit``: the compilers; ``jvm_gc``; ``jvm_tasks``: Spark's executor task
    threads; ``jvm_other``), and the Python processes under it (``python_workers``). Threads and
    processes that ended are not counted: compare readings over short windows."""
    root = psutil.Process(root_pid if root_pid is not None else os.getpid())
    out: dict[str, float] = {}
    try:
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return out
    for proc in procs:
        try:
            role = _role(proc, root.pid)
            if role == "jvm":
                for task in Path(f"/proc/{proc.pid}/task").iterdir():
                    name = (task / "comm").read_text().strip()
                    kind = _thread_role(name)
                    out[kind] = out.get(kind, 0.0) + _proc_cpu_s((task / "stat").read_text())
                continue
            times = proc.cpu_times()
            cpu = times.user + times.system
        except (psutil.Error, OSError):
            continue  # ended between listing and reading
        if role == "driver":
            out["driver"] = out.get("driver", 0.0) + cpu
        elif role == "python_workers":
            out["python_workers"] = out.get("python_workers", 0.0) + cpu
    return out


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
        all(_looks_numeric(r[i]) for r in cells[1:] if r[i] not in ("", "-")) and len(cells) > 1
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
    # the first word: a cell of repeated runs reads "median [min, max]"
    try:
        float(text.split(" ", 1)[0].replace(",", "").rstrip("x%"))
    except ValueError:
        return False
    return True


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def fmt(value: Any, spec: str = ",.0f", suffix: str = "") -> str:
    """One table cell: ``-`` for a figure a run did not produce."""
    if value is None:
        return "-"
    return (format(value, spec) if isinstance(value, int | float) else str(value)) + suffix


def command_line() -> str:
    """How the benchmark was started, for the report: enough to run it again."""
    return " ".join([Path(sys.executable).name, *sys.argv])


def results_path(out: str | None, stem: str, quick: bool) -> Path:
    """``--out``, or ``bench/results/<stem>[_quick].json``: a smoke run never overwrites the
    results of a full one."""
    if out:
        return Path(out)
    return ROOT / "bench" / "results" / (f"{stem}_quick.json" if quick else f"{stem}.json")


def parse_names(text: str, allowed: Sequence[str], what: str) -> list[str]:
    """A comma-separated ``--strategies``/``--contenders`` value; an unknown name stops the run
    before anything starts, rather than after hours of the others."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in allowed]
    if unknown:
        raise SystemExit(f"unknown {what} {unknown}; choose from {', '.join(allowed)}")
    return names


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (no display on a benchmark machine), imported only
    when a plot is drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot().close(fig)


def save_report(
    out: Path, report: dict[str, Any], plot: Callable[[Path], None], *, prefix: str
) -> Path:
    """Write the report's JSON, then its plot beside it (``.png``); returns the plot's path.

    The JSON goes first and a failing plot is only logged: a plot must never cost the numbers.
    """
    write_json(out, report)
    png = out.with_suffix(".png")
    try:
        plot(png)
    except Exception as exc:
        log(f"plot failed: {exc!r}", prefix=prefix)
    return png


# -- the load gate --------------------------------------------------------------------------------
LOAD_LIMIT = 1.0  # 1-minute load average; the benchmark machine has 2 cores


@dataclass(frozen=True)
class Validity:
    """Whether a run's numbers can be trusted. Other work on a small shared machine skews every
    figure, and not every contender equally, so a loaded start makes the whole result suspect."""

    valid: bool
    reason: str | None = None


def load_gate(load1: float, allow_load: bool, limit: float = LOAD_LIMIT) -> Validity:
    """Whether a benchmark may start at this 1-minute load average.

    At most ``limit``: valid. Above it: refused (``SystemExit`` saying what to do), unless
    ``allow_load``: then it runs and its result is marked invalid, with the reason.
    """
    if load1 <= limit:
        return Validity(valid=True)
    if not allow_load:
        raise SystemExit(
            f"refusing to start: the 1-minute load average is {load1:.2f}, above {limit:.2f}, "
            "so other work on this machine would skew every number. Wait until it is below "
            f"{limit:.2f} (watch `uptime`; let other jobs finish), or pass --allow-load to run "
            "anyway with the result marked invalid."
        )
    return Validity(
        valid=False,
        reason=f"1-minute load average {load1:.2f} above {limit:.2f} at the start (--allow-load)",
    )


def check_load(allow_load: bool, *, prefix: str) -> tuple[Validity, list[float]]:
    """The load gate on this machine's load now; returns the verdict and the load read (1, 5
    and 15 minutes). Called before a benchmark does anything else."""
    load = [round(x, 2) for x in os.getloadavg()]  # judged as shown, so 1.004 is not refused
    validity = load_gate(load[0], allow_load)
    if not validity.valid:
        log(f"load average {load}: running anyway, the result is marked INVALID", prefix=prefix)
    return validity, load


SETTLE_TIMEOUT_S = 300.0  # long enough for the load of a 2-core child to decay below the limit
SETTLE_POLL_S = 5.0  # the kernel updates the load average every 5 seconds


def settle_load(
    *,
    prefix: str,
    limit: float = LOAD_LIMIT,
    timeout_s: float = SETTLE_TIMEOUT_S,
    poll_s: float = SETTLE_POLL_S,
    read: Callable[[], tuple[float, float, float]] = os.getloadavg,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> float:
    """Wait until the 1-minute load average is at most ``limit`` again; returns the seconds
    waited.

    Called before each contender's launch, not only at the start: the load average lags, so the
    benchmark's own work before a launch (the previous contender, or counting a workload's
    distinct keys) leaves it above the limit for up to a minute after that work ended, and a
    launch then would be recorded as a launch on a loaded machine. After ``timeout_s`` it stops
    waiting (other work is running) and says so; the load at launch is recorded either way.
    """
    started = clock()
    load1 = round(read()[0], 2)
    if load1 <= limit:
        return 0.0
    log(f"load average {load1:.2f} above {limit:.2f}: waiting for it to settle", prefix=prefix)
    while load1 > limit:
        waited = clock() - started
        if waited >= timeout_s:
            log(
                f"load average still {load1:.2f} after {waited:.0f} s: launching anyway (other "
                "work is running; the load at launch is recorded)",
                prefix=prefix,
            )
            break
        sleep(poll_s)
        load1 = round(read()[0], 2)
    return round(clock() - started, 1)


def trust_fields(
    validity: Validity, load_before: Sequence[float], launches: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The report's fields that say whether its numbers can be trusted: ``valid`` (false, with
    ``invalid_reason``, when the load gate was overridden) and the load average before the start
    and at each contender's launch, to tell which runs shared the machine."""
    return {
        "valid": validity.valid,
        "invalid_reason": validity.reason,
        "load": {
            "limit_1m": LOAD_LIMIT,
            "before_start": list(load_before),
            "at_launch": list(launches),
        },
    }


def with_verdict(table: str, report: Mapping[str, Any]) -> str:
    """The table as printed and stored, headed by ``INVALID (load X.XX)`` when the report is not
    valid, so that the warning travels with a copied table. Reports older than the gate have no
    ``valid`` field and are shown as they were."""
    if report.get("valid", True):
        return table
    load1 = report["load"]["before_start"][0]
    return f"INVALID (load {load1:.2f}): {report['invalid_reason']}\n{table}"


# -- repetitions ----------------------------------------------------------------------------------
def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def add_trust_args(parser: argparse.ArgumentParser) -> None:
    """``--repeat`` and ``--allow-load``, the same for every benchmark with contenders."""
    parser.add_argument(
        "--repeat",
        type=positive_int,
        default=3,
        help="runs of each contender, interleaved and alternating in order per round; the "
        "table shows median [min, max] (default 3)",
    )
    parser.add_argument(
        "--allow-load",
        action="store_true",
        help=f"start even when the 1-minute load average is above {LOAD_LIMIT:.1f}; the result "
        "is then marked invalid",
    )


def interleaved(names: Sequence[str], repeat: int) -> list[tuple[int, str]]:
    """The launch order as (round, name): every contender once per round, the order reversed in
    every other round (A B, B A, A B, ...).

    Interleaved, not one contender's repetitions after another's, and alternated, because the
    load of a shared machine drifts: a fixed order would give every round's same slot, and so
    the same share of the drift, to the same contender.
    """
    if repeat < 1:
        raise ValueError(f"repeat must be at least 1, not {repeat}")
    order: list[tuple[int, str]] = []
    for rnd in range(repeat):
        names_this_round = list(names) if rnd % 2 == 0 else list(reversed(names))
        order.extend((rnd, name) for name in names_this_round)
    return order


def run_rounds(
    names: Sequence[str], repeat: int, run_one: Callable[[str, int], dict[str, Any]]
) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, Any]]]:
    """Run each contender ``repeat`` times in the ``interleaved`` order.

    ``run_one(name, round)`` runs one and returns its result (with ``load_avg_at_launch``, as
    ``ChildRunner.run`` gives it). Returns each contender's runs in round order, so that runs of
    several contenders at one index shared a round, and the load at every launch.
    """
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    launches: list[dict[str, Any]] = []
    for rnd, name in interleaved(names, repeat):
        run = run_one(name, rnd)
        run["round"] = rnd
        runs[name].append(run)
        launches.append(
            {"round": rnd, "contender": name, "load_avg": run.get("load_avg_at_launch")}
        )
    return runs, launches


def dig(data: Any, *path: str) -> Any:
    """``data[path[0]][path[1]]...``, or None where a failed run left a part out."""
    for key in path:
        if not isinstance(data, Mapping) or key not in data:
            return None
        data = data[key]
    return data


def spread(values: Iterable[float | None]) -> dict[str, Any] | None:
    """Median, min and max of one figure over the repetitions that produced it (None: a failed
    run), with every run's value in round order; None when no run produced it.

    The median, not the best: a neighbour's work can slow a run down and a warm cache can speed
    one up, and the median is moved by neither one outlier nor the other; min and max show how
    far the runs disagree.
    """
    runs = list(values)
    got = [v for v in runs if v is not None]
    if not got:
        return None
    return {
        "median": statistics.median(got),
        "min": min(got),
        "max": max(got),
        "n": len(got),
        "values": runs,
    }


def fmt_spread(figure: Mapping[str, Any] | None, spec: str = ",.0f", suffix: str = "") -> str:
    """A figure's cell: the median, followed by ``[min, max]`` when several runs produced it."""
    if figure is None:
        return "-"
    median = fmt(figure["median"], spec, suffix)
    if figure["n"] == 1:
        return median
    return f"{median} [{fmt(figure['min'], spec, suffix)}, {fmt(figure['max'], spec, suffix)}]"


def all_exact(runs: Sequence[Mapping[str, Any]]) -> bool:
    """True only when every repetition's state matched the oracle: an inexact run among exact
    ones is a bug the others did not happen to hit, so one exact run proves nothing."""
    return bool(runs) and all(dig(r, "verification", "exact") is True for r in runs)


def exact_cell(runs: Sequence[Mapping[str, Any]]) -> str:
    """The table's ``exact`` cell over a contender's repetitions."""
    if all_exact(runs):
        return "yes"
    bad = sum(1 for r in runs if dig(r, "verification", "exact") is not True)
    return f"NO ({bad} of {len(runs)} runs)"


Figures = Mapping[str, Callable[[Mapping[str, Any]], float | None]]


def combine_runs(runs: Sequence[dict[str, Any]], figures: Figures) -> dict[str, Any]:
    """One contender's repetitions as reported: every run as it was, each headline figure's
    ``spread`` (``figures``: name -> how to read it from one run) and exactness over all runs."""
    return {
        "runs": list(runs),
        "headline": {name: spread(read(r) for r in runs) for name, read in figures.items()},
        "exact": all_exact(runs),
    }


class Epochs:
    """The runner's committed epochs (or what a benchmark keeps of each), as its ``on_epoch``
    callback hands them over; waited on by the benchmark's controller thread."""

    def __init__(self) -> None:
        self.rows: list[Any] = []
        self._cond = threading.Condition()

    def __call__(self, report: Any) -> None:
        with self._cond:
            self.rows.append(report)
            self._cond.notify_all()

    def wait(self, predicate: Any, timeout: float, what: str, alive: Any) -> Any:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for r in self.rows:
                    if predicate(r):
                        return r
                if not alive():
                    raise RuntimeError(f"the runner stopped before {what}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"timed out waiting for {what}")
                self._cond.wait(0.2)

    def count(self) -> int:
        with self._cond:
            return len(self.rows)

    def wait_count(self, n: int, timeout: float, what: str, alive: Any) -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.rows) < n:
                if not alive():
                    raise RuntimeError(f"the runner stopped before {what}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"timed out waiting for {what}")
                self._cond.wait(0.2)


# -- child processes ------------------------------------------------------------------------------
def _group_members(pgid: int) -> list[psutil.Process]:
    members = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid:
                members.append(proc)
        except (ProcessLookupError, psutil.NoSuchProcess, PermissionError):
            continue
    return members


def reap_group(pgid: int, *, prefix: str) -> None:
    """Stop whatever a child left in its own process group (a JVM, Python workers), so that it
    cannot load the machine during the next contender's run."""
    members = _group_members(pgid)
    if not members:
        return
    # The JVM notices its driver is gone and exits by itself a moment later: give it the chance.
    _, members = psutil.wait_procs(members, timeout=15)
    if not members:
        return
    names = []
    for proc in members:
        with contextlib.suppress(psutil.Error):
            names.append(f"{proc.pid}:{proc.name()}")
    log(f"cleaning up leftover process(es) of group {pgid}: {', '.join(names)}", prefix=prefix)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    _, alive = psutil.wait_procs(members, timeout=10)
    if alive:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


@dataclass(frozen=True)
class ChildRunner:
    """How a benchmark runs one contender: its own ``script`` again, in a fresh process.

    A fresh process per run, so that no JVM, Python worker or cache of one contender is reused
    by the next; in a new session, so that the child, its JVM and its Python workers share a
    process group that ``reap_group`` can clean up. Only the child's own progress lines
    (``[prefix ...``) reach stderr, as Spark is very chatty; the rest is in ``child.log``.
    """

    script: Path
    prefix: str
    timeout_s: float

    def run(
        self, args: Sequence[str], workdir: Path, label: str, *, settle: bool = True
    ) -> dict[str, Any]:
        """Run ``script args --workdir workdir`` and return the ``result.json`` it leaves, with
        the load average at launch and at the end; a failed run returns ``error`` and the end of
        its log instead. ``settle``: first wait for the load to settle below the gate
        (``settle_load``); pass the start gate's ``valid``, so that a run the user started on a
        loaded machine (``--allow-load``) does not wait for a quiet that will not come."""
        workdir.mkdir(parents=True)
        log_path = workdir / "child.log"
        cmd = [sys.executable, str(self.script), *args, "--workdir", str(workdir)]
        env = dict(os.environ)
        # Spark's Python workers import `workers` (the source) and `bench` (the processors).
        env["PYTHONPATH"] = os.pathsep.join(x for x in (str(ROOT), env.get("PYTHONPATH")) if x)
        env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
        settled_s = settle_load(prefix=self.prefix) if settle else 0.0
        load = [round(x, 2) for x in os.getloadavg()]
        log(f"{label}: launching (load average {load})", prefix=self.prefix)
        started = time.time()
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        tail: list[str] = []
        timer = threading.Timer(self.timeout_s, lambda: os.killpg(proc.pid, signal.SIGKILL))
        timer.start()
        try:
            assert proc.stdout is not None
            with open(log_path, "w", encoding="utf-8") as log_file:
                for line in proc.stdout:
                    log_file.write(line)
                    if line.startswith(f"[{self.prefix} "):
                        sys.stderr.write(line)
                        sys.stderr.flush()
                    tail = [*tail[-59:], line.rstrip("\n")]
            code = proc.wait()
        finally:
            timer.cancel()
            reap_group(proc.pid, prefix=self.prefix)
        info = {
            "process_s": round(time.time() - started, 1),
            "load_avg_at_launch": load,
            "load_settle_s": settled_s,
            "load_avg_at_end": [round(x, 2) for x in os.getloadavg()],
        }
        result_path = workdir / "result.json"
        if code != 0 or not result_path.exists():
            log(f"{label}: FAILED (exit {code}); log {log_path}", prefix=self.prefix)
            for line in tail[-25:]:
                print(f"    {line}", file=sys.stderr)
            return {
                "error": f"exit code {code}",
                "log_tail": tail[-25:],
                "log": str(log_path),
                **info,
            }
        result: dict[str, Any] = json.loads(result_path.read_text("utf-8"))
        return {**result, **info}

    def serve(self, workdir: Path, label: str, work: Callable[[Path], dict[str, Any]]) -> int:
        """The child's side of ``run``: do the work, leave its result in ``result.json``."""
        workdir.mkdir(parents=True, exist_ok=True)
        log(f"{label}: starting (pid {os.getpid()})", prefix=self.prefix)
        write_json(workdir / "result.json", work(workdir))
        log(f"{label}: done", prefix=self.prefix)
        return 0


class RunDir:
    """The children's scratch directory: removed at the end unless ``keep`` (set it after a
    failure, to leave the logs and state for a look)."""

    def __init__(self, prefix: str, *, keep: bool, log_prefix: str) -> None:
        self.path = Path(tempfile.mkdtemp(prefix=prefix))
        self.keep = keep
        self._log_prefix = log_prefix

    def __enter__(self) -> RunDir:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.keep:
            log(f"kept the run directory {self.path}", prefix=self._log_prefix)
        else:
            shutil.rmtree(self.path, ignore_errors=True)


# -- Spark's progress reports (as dicts: no Spark import needed) ----------------------------------
def progress_json(progress: Any) -> dict[str, Any]:
    """A ``StreamingQueryProgress`` as a dict (PySpark hands out objects or dicts)."""
    if isinstance(progress, dict):
        return progress
    parsed: dict[str, Any] = json.loads(progress.json)
    return parsed


def spark_time(ts: str) -> float:
    """A progress report's ``timestamp`` (ISO 8601, UTC, ``Z``) as a Unix time."""
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def _offset(value: Any) -> int:
    if isinstance(value, str):
        value = json.loads(value)
    # the first batch starts before any offset: Spark reports it as null
    return 0 if value is None else int(value["offset"])


def progress_batches(query: Any) -> list[dict[str, Any]]:
    """Every batch in the query's ``recentProgress``: id, rows, timestamp and durations."""
    out = []
    for progress in query.recentProgress:
        d = progress_json(progress)
        source = d["sources"][0]
        out.append(
            {
                "batch": int(d["batchId"]),
                # Rows from the source's offsets, not numInputRows: Spark sums numInputRows
                # over every scan of the source in the plan, so a plan that reads the source
                # twice reports twice the rows it consumed.
                "rows": _offset(source["endOffset"]) - _offset(source["startOffset"]),
                "num_input_rows": int(d["numInputRows"]),
                "timestamp": d["timestamp"],
                "duration_ms": {k: int(v) for k, v in d["durationMs"].items()},
            }
        )
    return out


class ProgressPoller:
    """Calls ``on_batch`` with each newly finished batch that had input, from a thread polling
    ``query.lastProgress`` every half second: a listener inside the query would sit on the timed
    path."""

    def __init__(self, query: Any, on_batch: Callable[[dict[str, Any]], None]) -> None:
        self.query, self.on_batch = query, on_batch
        self._stop = threading.Event()
        self._seen = -1
        self._thread = threading.Thread(target=self._loop, name="progress", daemon=True)

    def __enter__(self) -> ProgressPoller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            try:
                progress = self.query.lastProgress
            except Exception:  # the query is stopping; the final numbers come from recentProgress
                return
            if progress is None:
                continue
            d = progress_json(progress)
            batch = int(d["batchId"])
            if batch > self._seen and int(d["numInputRows"]) > 0:
                self._seen = batch
                self.on_batch(d)


# -- the workload and its oracle ------------------------------------------------------------------
class Records(Protocol):
    """What defines a benchmark's records (its workload's parameters have these fields)."""

    @property
    def key_space(self) -> int: ...
    @property
    def zipf_s(self) -> float: ...
    @property
    def seed(self) -> int: ...
    @property
    def rows_per_epoch(self) -> int: ...


def generator_options(records: Records, max_rows: int, **extra: Any) -> dict[str, str]:
    """The generator's options (one word per line: the key itself), exactly as the runner
    passes them for ``wordcount``, so that every contender reads the same records."""
    options = {
        "kind": "lines",
        "key_space": records.key_space,
        "zipf_s": records.zipf_s,
        "seed": records.seed,
        "words_per_line": 1,
        "rows_per_epoch": records.rows_per_epoch,
        "partitions": 2,
        "max_rows": max_rows,
        **extra,
    }
    return {k: str(v) for k, v in options.items()}


def generator_config(records: Records) -> Any:
    """The same records as ``generator_options``, for the oracle (plain Python)."""
    from workers.sources.generator import GeneratorConfig

    return GeneratorConfig(
        kind="lines",
        key_space=records.key_space,
        zipf_s=records.zipf_s,
        seed=records.seed,
        words_per_line=1,
    )


def compare_counts(
    expected: dict[str, int], actual: dict[str, int], duplicates: int
) -> dict[str, Any]:
    """A state read back (``duplicates``: keys seen more than once) against the oracle's."""
    from workers.oracle import compare

    problems = compare(expected, actual)
    if duplicates:
        problems.append(f"{duplicates} keys are stored more than once")
    return {
        "exact": not problems,
        "keys_expected": len(expected),
        "keys_actual": len(actual),
        "total_expected": sum(expected.values()),
        "total_actual": sum(actual.values()),
        "problems": problems[:12],
    }


def first_error(runs: Sequence[Mapping[str, Any]]) -> str | None:
    """What went wrong in the first run that failed, for a table's ``failed`` row."""
    for r in runs:
        error = r.get("error") or dig(r, "summary", "error")
        if error:
            return str(error)
    return None
