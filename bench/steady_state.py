"""Steady-state throughput of keyed counting: the rescaler's pipeline against Spark's own operators.

One workload (``count per key`` of Zipf or uniform keys from the project's deterministic
generator, the same records for every contender) runs through:

* ``rescaler``   — the data plane: ``workers.runner.PipelineRunner`` with the ``wordcount``
  pipeline and one word per line (vnode routing in Spark SQL, ``mapInArrow`` into per-PU stores);
* ``tws``        — ``groupBy("key").transformWithState`` (Row API), the count in a ValueState;
* ``tws_pandas`` — ``transformWithStateInPandas`` with the same processor logic on pandas;
* ``native``     — ``groupBy("key").count()`` in update mode;
* ``native_changelog`` (optional, not run by default) — ``native`` with RocksDB changelog
  checkpointing on, Spark's recommended production setting for large state.

Spark contenders use the RocksDB state store provider, a noop sink in update mode and
``--shuffle-partitions`` (4) partitions; all four share the project's SparkSession settings
(``workers.runner.build_spark``: ``local[2]``, the fast checkpoint file manager, no UI).

Each contender runs in its own fresh subprocess (this script with ``--contender``), so no JVM,
Python worker or page cache of one is reused by the next. Per contender it measures, over the
``--epochs`` epochs after ``--warmup`` warm-up epochs:

* rows/s = rows / sum of per-batch ``durationMs.triggerExecution`` (the same measure for all
  four, read from ``query.recentProgress``), and rows / wall time between the commit that ends
  the warm-up and the commit of the last measured epoch;
* p50/p99 epoch latency (``triggerExecution``);
* peak memory: summed RSS of the contender's process tree (Python driver, JVM, Python workers;
  not the JVM's transient helper processes), sampled every 100 ms from Spark start until the
  query stops;
* exactness: after the stream stops, the contender's *full* state (the rescaler's stores through
  ``workers.readout``; Spark's state store through the ``statestore`` batch reader) is compared
  key for key with ``workers.oracle``. Verification runs after the timed phase and the memory
  sampling, so it costs the measured numbers nothing.

Every contender runs one extra, unmeasured epoch after the measured ones: the runner stops its
query as soon as its last epoch's ``foreachBatch`` returns, which can race with Spark's commit
and progress report of that epoch.

    .venv/bin/python bench/steady_state.py                 # 1M keys, 200k rows/epoch, both dists
    .venv/bin/python bench/steady_state.py --quick         # a few minutes: a smoke run
    .venv/bin/python bench/steady_state.py --contenders rescaler,native --dist zipf

Prints a table per key distribution, writes ``bench/results/steady_state.json`` and a plot of
epoch latency per contender, ``bench/results/steady_state.png`` (``--quick``: ``*_quick.*``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
from pyspark.sql import Row
from pyspark.sql.streaming import StatefulProcessor

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # runnable as `python bench/steady_state.py` from anywhere
    sys.path.insert(0, str(ROOT))

from bench._common import (  # noqa: E402  (needs ROOT on sys.path first)
    PeakRssSampler,
    format_table,
    log,
    machine_info,
    percentile,
    write_json,
)

RESULTS_DIR = ROOT / "bench" / "results"
SEED = 7
CONTENDERS = ("rescaler", "tws", "tws_pandas", "native", "native_changelog")
DEFAULT_CONTENDERS = ("rescaler", "tws", "tws_pandas", "native")
LABELS = {
    "rescaler": "rescaler",
    "tws": "transformWithState",
    "tws_pandas": "transformWithStateInPandas",
    "native": "native groupBy.count",
    "native_changelog": "native + changelog ckpt",
}
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
CHANGELOG_CONF = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
LOG_PREFIX = "steady_state"
CHILD_TIMEOUT_S = 3 * 3600


def say(message: str) -> None:
    log(message, prefix=LOG_PREFIX)


@dataclass(frozen=True)
class Workload:
    """Everything that defines the records and how many epochs are measured."""

    dist: str  # "zipf" or "uniform"
    zipf_s: float  # 0 for uniform
    key_space: int
    rows_per_epoch: int
    warmup: int
    epochs: int  # measured epochs
    shuffle_partitions: int  # Spark contenders' state partitions
    seed: int = SEED

    @property
    def total_epochs(self) -> int:
        return self.warmup + self.epochs + 1  # +1: the trailing, unmeasured epoch

    @property
    def end_offset(self) -> int:
        return self.total_epochs * self.rows_per_epoch

    def source_options(self) -> dict[str, str]:
        """The generator's options, exactly as the runner passes them for ``wordcount``."""
        options = {
            "kind": "lines",
            "key_space": self.key_space,
            "zipf_s": self.zipf_s,
            "seed": self.seed,
            "words_per_line": 1,
            "rows_per_epoch": self.rows_per_epoch,
            "partitions": 2,
            "max_rows": self.end_offset,
        }
        return {k: str(v) for k, v in options.items()}


# -- the stateful processors (Spark pickles them to its Python workers) ---------------------------
class CountProcessor(StatefulProcessor):
    """transformWithState (Row API): the key's count in a ValueState, one output row per key."""

    def init(self, handle: Any) -> None:
        self.count = handle.getValueState("count", "value long")

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        n = sum(1 for _ in rows)
        old = self.count.get()
        total = (old[0] if old is not None else 0) + n
        self.count.update((total,))
        yield Row(key=key[0], count=total)

    def close(self) -> None:
        pass


class PandasCountProcessor(StatefulProcessor):
    """transformWithStateInPandas: the same logic, rows arrive as pandas DataFrames."""

    def init(self, handle: Any) -> None:
        self.count = handle.getValueState("count", "value long")

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        import pandas as pd

        n = sum(len(pdf) for pdf in rows)
        old = self.count.get()
        total = (int(old[0]) if old is not None else 0) + n
        self.count.update((total,))
        yield pd.DataFrame({"key": [key[0]], "count": [total]})

    def close(self) -> None:
        pass


# -- child side: one contender in this process -----------------------------------------------------
def _offset(value: Any) -> int:
    if isinstance(value, str):
        value = json.loads(value)
    # the first batch starts before any offset: Spark reports it as null
    return 0 if value is None else int(value["offset"])


def _progress_dicts(query: Any) -> list[dict[str, Any]]:
    out = []
    for p in query.recentProgress:
        d = p if isinstance(p, dict) else json.loads(p.json)
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


def _phase(w: Workload, epoch: int) -> str:
    if epoch < w.warmup:
        return "warm-up"
    return "measured" if epoch < w.warmup + w.epochs else "trailing"


class ProgressLogger:
    """Logs each finished batch of a query to stderr, from a polling thread off the timed path."""

    def __init__(self, name: str, w: Workload, query: Any) -> None:
        self.name, self.w, self.query = name, w, query
        self._stop = threading.Event()
        self._seen = -1
        self._thread = threading.Thread(target=self._loop, name="progress", daemon=True)

    def __enter__(self) -> ProgressLogger:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            try:
                p = self.query.lastProgress
            except Exception:  # the query is stopping; the final numbers come from recentProgress
                return
            if p is None:
                continue
            d = p if isinstance(p, dict) else json.loads(p.json)
            batch = int(d["batchId"])
            if batch > self._seen and int(d["numInputRows"]) > 0:
                self._seen = batch
                say(
                    f"{self.name} {self.w.dist}: epoch {batch + 1}/{self.w.total_epochs} "
                    f"({_phase(self.w, batch)}) in "
                    f"{d['durationMs'].get('triggerExecution', 0)} ms"
                )


def _write_state(path: Path, keys: list[str], counts: list[int]) -> None:
    import pyarrow as pa
    import pyarrow.feather as feather

    table = pa.table({"key": pa.array(keys, pa.string()), "count": pa.array(counts, pa.int64())})
    feather.write_feather(table, str(path))


def run_rescaler(w: Workload, workdir: Path) -> dict[str, Any]:
    from workers.config import RunnerConfig
    from workers.control import EpochReport, LocalControl
    from workers.readout import iter_state
    from workers.runner import PipelineRunner

    config = RunnerConfig(
        pipeline="wordcount",
        words_per_line=1,
        key_space=w.key_space,
        zipf_s=w.zipf_s,
        seed=w.seed,
        rows_per_epoch=w.rows_per_epoch,
        epochs=w.total_epochs,
        trigger_interval_s=0,
        spark_ui=False,
        state_dir=workdir / "state",
        initial_pus=2,
        spark_master="local[2]",
        spark_conf=(("spark.sql.streaming.numRecentProgressUpdates", "1000"),),
    )
    reports: list[dict[str, Any]] = []
    snapshot: list[dict[str, Any]] = []
    runner: PipelineRunner

    def on_epoch(report: EpochReport) -> None:
        # Runs inside the epoch's foreachBatch, so it must stay cheap: one log line, and the
        # progress snapshot only in the trailing epoch, whose time is not measured.
        reports.append(
            {"epoch": report.epoch, "rows": report.rows, "foreach_batch_s": report.duration_s}
        )
        say(
            f"rescaler {w.dist}: epoch {report.epoch + 1}/{w.total_epochs} "
            f"({_phase(w, report.epoch)}) {report.rows} rows, foreachBatch {report.duration_s:.3f} s"
        )
        if report.epoch == w.total_epochs - 1:
            snapshot.extend(_progress_dicts(runner.query))

    runner = PipelineRunner(config, LocalControl(workdir / "control"), on_epoch=on_epoch)
    started = time.time()
    sampler = PeakRssSampler().start()
    try:
        runner.run()
    finally:
        memory = sampler.stop()
    finished = time.time()
    try:  # the JVM object outlives spark.stop(); it may hold the trailing epoch too
        progress = _progress_dicts(runner.query)
    except Exception:
        progress = snapshot

    say(f"rescaler {w.dist}: reading the state back")
    keys: list[str] = []
    counts: list[int] = []
    for row in iter_state(config.state_dir, "wordcount", "word_count", backend=config.backend):
        keys.append(row["key"])
        counts.append(int(row["value"]))
    _write_state(workdir / "state.feather", keys, counts)
    return {
        "progress": progress,
        "epoch_reports": reports,
        "memory": memory.to_json(),
        "run_s": round(finished - started, 3),
        "settings": {
            "state_backend": config.backend,
            "pus": config.initial_pus,
            "vnodes": config.vnodes,
            "state_fsync": os.environ.get("RESCALER_STATE_FSYNC", "1 (default)"),
        },
    }


def run_spark_contender(name: str, w: Workload, workdir: Path) -> dict[str, Any]:
    from pyspark.sql import functions as F

    from workers.config import RunnerConfig
    from workers.runner import build_spark
    from workers.sources.spark import GENERATOR

    conf = [
        ("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER),
        ("spark.sql.shuffle.partitions", str(w.shuffle_partitions)),
        ("spark.sql.streaming.numRecentProgressUpdates", "1000"),
    ]
    if name == "native_changelog":
        conf.append((CHANGELOG_CONF, "true"))
    # The project's session settings (build_spark), so only the stateful operator differs.
    config = RunnerConfig(
        spark_ui=False, state_dir=workdir, spark_master="local[2]", spark_conf=tuple(conf)
    )
    checkpoint = workdir / "checkpoint"
    started = time.time()
    sampler = PeakRssSampler().start()
    spark = build_spark(config, f"steady-state-{name}")
    try:
        lines = spark.readStream.format(GENERATOR).options(**w.source_options()).load()
        # The same split the wordcount pipeline does (one word per line: the key itself).
        keys = lines.where(F.col("_malformed").isNull()).select(
            F.explode(F.split("line", " ")).alias("key")
        )
        keys = keys.where(F.col("key") != "")
        grouped = keys.groupBy("key")
        if name in ("native", "native_changelog"):
            counted = grouped.count()
        elif name == "tws":
            counted = grouped.transformWithState(
                CountProcessor(), "key string, count long", "Update", "None"
            )
        elif name == "tws_pandas":
            counted = grouped.transformWithStateInPandas(
                PandasCountProcessor(), "key string, count long", "Update", "None"
            )
        else:
            raise ValueError(f"unknown contender {name!r}")
        query = (
            counted.writeStream.format("noop")
            .outputMode("update")
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="0 seconds")
            .queryName(f"steady_state_{name}")
            .start()
        )
        with ProgressLogger(name, w, query):
            query.processAllAvailable()  # the source ends at max_rows: every epoch is done
        query.stop()
        memory = sampler.stop()
        finished = time.time()
        progress = _progress_dicts(query)

        say(f"{name} {w.dist}: reading the state back (statestore reader)")
        reader = spark.read.format("statestore")
        if name.startswith("tws"):
            reader = reader.option("stateVarName", "count")
        value = "value.count" if name.startswith("native") else "value.value"
        state = (
            reader.load(str(checkpoint))
            .select(F.col("key.key").alias("key"), F.col(value).alias("count"))
            .toArrow()
        )
        _write_state(
            workdir / "state.feather",
            state.column("key").to_pylist(),
            state.column("count").to_pylist(),
        )
    finally:
        sampler.stop()  # idempotent: only matters when the query failed
        spark.stop()
    return {
        "progress": progress,
        "memory": memory.to_json(),
        "run_s": round(finished - started, 3),
        "settings": dict(conf),
    }


def child_main(args: argparse.Namespace) -> int:
    w = Workload(**json.loads(args.child_workload))
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    say(f"{args.contender} {w.dist}: starting (pid {os.getpid()})")
    if args.contender == "rescaler":
        result = run_rescaler(w, workdir)
    else:
        result = run_spark_contender(args.contender, w, workdir)
    result["state_file"] = str(workdir / "state.feather")
    write_json(workdir / "result.json", result)
    say(f"{args.contender} {w.dist}: done")
    return 0


# -- parent side: run the children, verify, summarize --------------------------------------------
def _group_members(pgid: int) -> list[psutil.Process]:
    members = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid:
                members.append(proc)
        except (ProcessLookupError, psutil.NoSuchProcess, PermissionError):
            continue
    return members


def _reap_group(pgid: int) -> None:
    """Stop whatever the child left in its own process group (a JVM, Python workers)."""
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
    say(f"cleaning up leftover process(es) of group {pgid}: {', '.join(names)}")
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    _, alive = psutil.wait_procs(members, timeout=10)
    if alive:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


def run_child(contender: str, w: Workload, run_dir: Path) -> dict[str, Any]:
    workdir = run_dir / f"{w.dist}-{contender}"
    workdir.mkdir(parents=True)
    log_path = workdir / "child.log"
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--contender",
        contender,
        "--child-workload",
        json.dumps(asdict(w)),
        "--workdir",
        str(workdir),
    ]
    env = dict(os.environ)
    # Spark's Python workers import `workers` (the source) and unpickle the processors.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    load = [round(x, 2) for x in os.getloadavg()]
    say(f"{contender} {w.dist}: launching (load average {load})")
    started = time.time()
    # A new session: the child, its JVM and Python workers share a process group we can reap.
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
    timer = threading.Timer(CHILD_TIMEOUT_S, lambda: os.killpg(proc.pid, signal.SIGKILL))
    timer.start()
    try:
        assert proc.stdout is not None
        with open(log_path, "w", encoding="utf-8") as log_file:
            for line in proc.stdout:
                log_file.write(line)
                # Only our own progress lines: Spark and its TWS workers are very chatty.
                if line.startswith(f"[{LOG_PREFIX} "):
                    sys.stderr.write(line)
                    sys.stderr.flush()
                tail = [*tail[-59:], line.rstrip("\n")]
        code = proc.wait()
    finally:
        timer.cancel()
        _reap_group(proc.pid)
    elapsed = round(time.time() - started, 1)
    result_path = workdir / "result.json"
    if code != 0 or not result_path.exists():
        say(f"{contender} {w.dist}: FAILED (exit {code}); log {log_path}")
        for line in tail[-25:]:
            print(f"    {line}", file=sys.stderr)
        return {
            "error": f"exit code {code}",
            "log_tail": tail[-25:],
            "process_s": elapsed,
            "load_avg_at_launch": load,
        }
    result: dict[str, Any] = json.loads(result_path.read_text("utf-8"))
    result["process_s"] = elapsed
    result["load_avg_at_launch"] = load
    return result


def _parse_ts(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def summarize(progress: list[dict[str, Any]], w: Workload) -> dict[str, Any]:
    """Throughput and latency over the measured epochs, from Spark's progress reports."""
    by_batch = {p["batch"]: p for p in progress}
    wanted = range(w.warmup, w.warmup + w.epochs)
    missing = [b for b in wanted if b not in by_batch]
    measured = [by_batch[b] for b in wanted if b in by_batch]
    if not measured or not sum(p["rows"] for p in measured):
        return {"error": f"no progress (or no rows) for the measured epochs {list(wanted)}"}

    def end(p: dict[str, Any]) -> float:
        return _parse_ts(p["timestamp"]) + p["duration_ms"]["triggerExecution"] / 1000

    trigger_ms = [p["duration_ms"]["triggerExecution"] for p in measured]
    rows = sum(p["rows"] for p in measured)
    busy_s = sum(trigger_ms) / 1000
    before = by_batch.get(w.warmup - 1)
    # Wall time from the commit that ended the warm-up (or the first measured start) to the
    # commit of the last measured epoch: includes the gaps between batches.
    wall_start = end(before) if before is not None else _parse_ts(measured[0]["timestamp"])
    wall_s = end(measured[-1]) - wall_start
    components = sorted({k for p in measured for k in p["duration_ms"]})
    return {
        "measured_epochs": len(measured),
        "missing_epochs": missing,
        "rows": rows,
        "rows_per_epoch_ok": all(p["rows"] == w.rows_per_epoch for p in measured),
        # numInputRows / rows: 1 when the plan scans the source once per epoch
        "source_scans_per_epoch": round(
            sum(p.get("num_input_rows", p["rows"]) for p in measured) / rows, 2
        ),
        "busy_s": round(busy_s, 3),
        "wall_s": round(wall_s, 3),
        "rows_per_s": round(rows / busy_s, 1) if busy_s > 0 else None,
        "rows_per_s_wall": round(rows / wall_s, 1) if wall_s > 0 else None,
        "p50_ms": percentile(trigger_ms, 50),
        "p99_ms": percentile(trigger_ms, 99),
        "max_ms": max(trigger_ms),
        "mean_ms_by_component": {
            k: round(sum(p["duration_ms"].get(k, 0) for p in measured) / len(measured), 1)
            for k in components
        },
    }


class Oracle:
    """The expected state per workload, computed once (plain Python, from workers.oracle)."""

    def __init__(self) -> None:
        self._cache: dict[Workload, dict[str, int]] = {}

    def expected(self, w: Workload) -> dict[str, int]:
        if w not in self._cache:
            from workers.oracle import expected_from_generator
            from workers.sources.generator import GeneratorConfig

            say(f"oracle {w.dist}: computing the expected state of {w.end_offset} records")
            gen = GeneratorConfig(
                kind="lines",
                key_space=w.key_space,
                zipf_s=w.zipf_s,
                seed=w.seed,
                words_per_line=1,
            )
            result = expected_from_generator("wordcount", gen, w.end_offset)
            self._cache[w] = result.state["word_count"]
        return self._cache[w]


def verify(state_file: Path, expected: dict[str, int]) -> dict[str, Any]:
    import pyarrow.feather as feather

    from workers.oracle import compare

    table = feather.read_table(str(state_file))
    keys = table.column("key").to_pylist()
    actual = dict(zip(keys, table.column("count").to_pylist(), strict=True))
    problems = compare(expected, actual)
    if len(actual) != len(keys):
        problems.append(f"{len(keys) - len(actual)} keys appear more than once in the state")
    return {
        "exact": not problems,
        "keys_expected": len(expected),
        "keys_actual": len(actual),
        "total_expected": sum(expected.values()),
        "total_actual": sum(actual.values()),
        "problems": problems[:12],
    }


def _fmt_int(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def table_for(dist: str, contenders: dict[str, dict[str, Any]]) -> str:
    base = contenders.get("rescaler", {}).get("summary", {}).get("rows_per_s")
    rows = []
    for name, r in contenders.items():
        s = r.get("summary", {})
        if "error" in r or "error" in s:
            rows.append([LABELS[name], "failed", "", "", "", "", "", r.get("error") or s["error"]])
            continue
        ratio = f"{base / s['rows_per_s']:.2f}x" if base and s.get("rows_per_s") else "-"
        v = r["verification"]
        exact = "yes" if v["exact"] else f"NO ({len(v['problems'])} problems)"
        rows.append(
            [
                LABELS[name],
                _fmt_int(s["rows_per_s"]),
                _fmt_int(s["rows_per_s_wall"]),
                ratio,
                _fmt_int(s["p50_ms"]),
                _fmt_int(s["p99_ms"]),
                _fmt_int(r["memory"]["peak_rss_mb"]),
                exact,
            ]
        )
    headers = [
        "contender",
        "rows/s",
        "rows/s wall",
        "ratio vs rescaler",
        "p50 ms",
        "p99 ms",
        "peak MB",
        "exact",
    ]
    return f"== {dist} ==\n" + format_table(headers, rows)


def goals(contenders: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The issue's goals, measured (not asserted): rescaler ≥ 10x tws and ≥ 1.5x native."""

    def rps(name: str) -> float | None:
        value = contenders.get(name, {}).get("summary", {}).get("rows_per_s")
        return float(value) if value else None

    out: dict[str, Any] = {}
    base = rps("rescaler")
    for name, target in (("tws", 10.0), ("native", 1.5)):
        other = rps(name)
        if base and other:
            ratio = base / other
            out[f"vs_{name}"] = {"ratio": round(ratio, 2), "goal": target, "met": ratio >= target}
    return out


def plot(path: Path, results: dict[str, Any], w_by_dist: dict[str, Workload]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    dists = list(results)
    fig, axes = plt.subplots(1, len(dists), figsize=(7 * len(dists), 4.8), squeeze=False)
    for ax, dist in zip(axes[0], dists, strict=True):
        w = w_by_dist[dist]
        for name, r in results[dist]["contenders"].items():
            progress = sorted(r.get("progress", []), key=lambda p: p["batch"])
            points = [
                (p["batch"], p["duration_ms"]["triggerExecution"])
                for p in progress
                if p["rows"] > 0 and p["batch"] < w.warmup + w.epochs
            ]
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, marker="o", markersize=3, label=LABELS[name])
        if w.warmup:
            ax.axvspan(-0.5, w.warmup - 0.5, color="0.9", label="warm-up")
        ax.set_yscale("log")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("epoch (batch id)")
        ax.set_ylabel("epoch latency, triggerExecution (ms)")
        label = f"Zipf s={w.zipf_s}" if dist == "zipf" else "uniform"
        ax.set_title(
            f"{label}: {w.rows_per_epoch:,} rows/epoch over {w.key_space:,} keys", fontsize=10
        )
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parent_main(args: argparse.Namespace) -> int:
    if args.quick:
        args.rows_per_epoch, args.key_space, args.epochs, args.warmup = 20_000, 50_000, 3, 1
    contenders = [c.strip() for c in args.contenders.split(",") if c.strip()]
    unknown = [c for c in contenders if c not in CONTENDERS]
    if unknown:
        raise SystemExit(f"unknown contenders {unknown}; choose from {', '.join(CONTENDERS)}")
    dists = ["zipf", "uniform"] if args.dist == "both" else [args.dist]
    stem = "steady_state_quick" if args.quick and args.out is None else "steady_state"
    out = Path(args.out) if args.out else RESULTS_DIR / f"{stem}.json"
    png = out.with_suffix(".png")

    workloads = {
        dist: Workload(
            dist=dist,
            zipf_s=args.zipf_s if dist == "zipf" else 0.0,
            key_space=args.key_space,
            rows_per_epoch=args.rows_per_epoch,
            warmup=args.warmup,
            epochs=args.epochs,
            shuffle_partitions=args.shuffle_partitions,
        )
        for dist in dists
    }
    machine = machine_info()
    say(
        f"{len(contenders)} contenders x {len(dists)} distributions; "
        f"{args.rows_per_epoch:,} rows/epoch, {args.key_space:,} keys, "
        f"{args.warmup} warm-up + {args.epochs} measured epochs; load {machine['load_avg_at_start']}"
    )
    run_dir = Path(tempfile.mkdtemp(prefix="steady_state-"))
    oracle = Oracle()
    results: dict[str, Any] = {}
    started = time.time()
    try:
        for dist, w in workloads.items():
            per: dict[str, dict[str, Any]] = {}
            for name in contenders:
                r = run_child(name, w, run_dir)
                if "progress" in r:
                    r["summary"] = summarize(r["progress"], w)
                per[name] = r
            # The oracle runs after this distribution's contenders, never beside one of them.
            expected = oracle.expected(w)
            for name, r in per.items():
                if "state_file" in r:
                    r["verification"] = verify(Path(r.pop("state_file")), expected)
                    v = r["verification"]
                    say(
                        f"{name} {dist}: exact={v['exact']} keys {v['keys_actual']:,}/"
                        f"{v['keys_expected']:,} total {v['total_actual']:,}/{v['total_expected']:,}"
                    )
            results[dist] = {"workload": asdict(w), "contenders": per, "goals": goals(per)}
    finally:
        if args.keep:
            say(f"kept the run directory {run_dir}")
        else:
            shutil.rmtree(run_dir, ignore_errors=True)

    tables = [table_for(dist, results[dist]["contenders"]) for dist in results]
    legend = (
        "rows/s: rows / sum of triggerExecution over the measured epochs; rows/s wall: rows / "
        "wall time between commits; ratio vs rescaler: rescaler rows/s ÷ this contender's "
        "(goals: ≥10x transformWithState, ≥1.5x native); peak MB: summed RSS of the contender's "
        "process tree; exact: full state equals the oracle key for key"
    )
    report = {
        "benchmark": "steady_state",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": machine,
        "parameters": {
            "contenders": contenders,
            "dists": dists,
            "rows_per_epoch": args.rows_per_epoch,
            "key_space": args.key_space,
            "zipf_s": args.zipf_s,
            "warmup_epochs": args.warmup,
            "measured_epochs": args.epochs,
            "trailing_epochs": 1,
            "seed": SEED,
            "spark_master": "local[2]",
            "shuffle_partitions_spark_contenders": args.shuffle_partitions,
            "trigger": "processingTime 0 (back to back)",
            "latency_measure": "StreamingQueryProgress.durationMs.triggerExecution",
            "memory_measure": "summed RSS of the process tree, sampled every 100 ms",
            "quick": args.quick,
        },
        "elapsed_s": round(time.time() - started, 1),
        "legend": legend,
        "tables": tables,
        "results": results,
    }
    write_json(out, report)
    try:
        plot(png, results, workloads)
    except Exception as exc:  # a plot must never cost the numbers
        say(f"plot failed: {exc!r}")
    print("\n\n".join(tables))
    print(f"\n{legend}")
    for dist in results:
        for key, g in results[dist]["goals"].items():
            print(f"{dist}: rescaler {key}: {g['ratio']}x (goal {g['goal']}x, met: {g['met']})")
    print(f"\nJSON: {out}\nplot: {png}")
    failed = [
        f"{d}/{n}" for d in results for n, r in results[d]["contenders"].items() if "error" in r
    ]
    return 1 if failed else 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=10, help="measured epochs (default 10)")
    p.add_argument("--warmup", type=int, default=2, help="warm-up epochs, not measured (2)")
    p.add_argument("--rows-per-epoch", type=int, default=200_000)
    p.add_argument("--key-space", type=int, default=1_000_000)
    p.add_argument("--zipf-s", type=float, default=1.1, help="Zipf exponent of the zipf run")
    p.add_argument("--dist", choices=("zipf", "uniform", "both"), default="both")
    p.add_argument(
        "--contenders",
        default=",".join(DEFAULT_CONTENDERS),
        help=f"comma-separated, from {', '.join(CONTENDERS)}",
    )
    p.add_argument(
        "--shuffle-partitions", type=int, default=4, help="state partitions of Spark contenders"
    )
    p.add_argument("--quick", action="store_true", help="20k rows, 50k keys, 1+3 epochs")
    p.add_argument("--out", help="JSON path (default bench/results/steady_state[_quick].json)")
    p.add_argument("--keep", action="store_true", help="keep checkpoints, stores and child logs")
    # internal: run one contender in this process (the parent starts these)
    p.add_argument("--contender", choices=CONTENDERS, help=argparse.SUPPRESS)
    p.add_argument("--child-workload", help=argparse.SUPPRESS)
    p.add_argument("--workdir", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if min(args.epochs, args.rows_per_epoch, args.key_space) < 1 or args.warmup < 0:
        p.error("--epochs, --rows-per-epoch and --key-space must be >= 1, --warmup >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.contender:
        return child_main(args)
    return parent_main(args)


if __name__ == "__main__":
    sys.exit(main())
