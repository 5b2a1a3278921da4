"""Steady-state throughput of keyed counting: the rescaler's pipeline against Spark's own operators.

One workload (``count per key`` of Zipf or uniform keys from the project's deterministic
generator, the same records for every contender) runs through:

* ``rescaler``   — the data plane: ``workers.runner.PipelineRunner`` with the ``wordcount``
  pipeline and one word per line (vnode routing in Spark SQL, ``mapInArrow`` into per-PU stores);
* ``rescaler_folded`` (not run by default) — the same with pre-aggregation on
  (``--preaggregate``: records folded per key in Spark before the hand-off to Python);
* ``tws``        — ``groupBy("key").transformWithState`` (Row API), the count in a ValueState;
* ``tws_pandas`` — ``transformWithStateInPandas`` with the same processor logic on pandas;
* ``native``     — ``groupBy("key").count()`` in update mode;
* the same-processor pairs (not run by default: ``--contenders processors``): one
  ``StatefulProcessor`` class with a value and a list state (``bench/processors.py``), unchanged,
  under Rescaler (``rescaler_processor``, ``rescaler_processor_pandas``: the runner with
  ``bench.processors:build_row`` / ``build_pandas``) and under Spark (``tws_processor``:
  ``transformWithState``; ``tws_processor_pandas``: ``transformWithStateInPandas``); their
  ratios are read in pairs (``pairs`` in the JSON);
* ``native_changelog`` (optional, not run by default) — ``native`` with RocksDB changelog
  checkpointing on, Spark's recommended production setting for large state.

Spark contenders use the RocksDB state store provider, a noop sink in update mode and
``--shuffle-partitions`` (4) partitions; all four share the project's SparkSession settings
(``workers.spark_session.build_spark``: ``local[2]``, the fast checkpoint file manager, no UI).

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

Contenders run ``--repeat`` times (3), interleaved: each round runs every contender once,
the order reversed in every other round, so that the drifting load of a shared machine falls
on all of them alike. Each figure is the median with [min, max] over the runs (the ratio vs
rescaler: over the rounds' ratios); exact means every run's state was exact. Nothing starts
when the 1-minute load average is above 1.0, unless ``--allow-load``: then the result is marked
invalid (``"valid": false`` in the JSON, ``INVALID`` over the table).

    .venv/bin/python bench/steady_state.py                 # 1M keys, 200k rows/epoch, both dists
    .venv/bin/python bench/steady_state.py --quick         # a few minutes: a smoke run
    .venv/bin/python bench/steady_state.py --contenders rescaler,native --dist zipf

Prints a table per key distribution, writes ``bench/results/steady_state.json`` and a plot of
epoch latency per contender, ``bench/results/steady_state.png`` (``--quick``: ``*_quick.*``).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pyspark.sql.streaming import StatefulProcessor

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # runnable as `python bench/steady_state.py` from anywhere
    sys.path.insert(0, str(ROOT))

from bench import _common as common  # noqa: E402  (needs ROOT on sys.path first)
from bench import _spark as shared_spark  # noqa: E402
from bench.processors import OUTPUT, PandasRecentCount, RecentCount  # noqa: E402

SEED = 7

PROCESSOR_CONTENDERS = (
    "rescaler_processor",
    "tws_processor",
    "rescaler_processor_pandas",
    "tws_processor_pandas",
)
CONTENDERS = (
    "rescaler",
    "rescaler_folded",
    "tws",
    "tws_pandas",
    "native",
    "native_changelog",
    *PROCESSOR_CONTENDERS,
)
DEFAULT_CONTENDERS = ("rescaler", "tws", "tws_pandas", "native")
LABELS = {
    "rescaler": "rescaler",
    "rescaler_folded": "rescaler, pre-aggregated",
    "tws": "transformWithState",
    "tws_pandas": "transformWithStateInPandas",
    "native": "native groupBy.count",
    "native_changelog": "native + changelog ckpt",
    "rescaler_processor": "rescaler, processor (Row)",
    "tws_processor": "transformWithState, processor",
    "rescaler_processor_pandas": "rescaler, processor (pandas)",
    "tws_processor_pandas": "transformWithStateInPandas, processor",
}
#: the Rescaler pipeline of each rescaler contender
RESCALER_PIPELINES = {
    "rescaler": ("wordcount", "wordcount", "word_count"),
    "rescaler_folded": ("wordcount", "wordcount", "word_count"),
    "rescaler_processor": ("bench.processors:build_row", "bench_processor", "counts"),
    "rescaler_processor_pandas": (
        "bench.processors:build_pandas",
        "bench_processor_pandas",
        "counts",
    ),
}
#: the same processor under both engines: (rescaler contender, Spark contender, goal)
PAIRS = (
    ("rescaler_processor", "tws_processor", 5.0),
    ("rescaler_processor", "tws_processor_pandas", 10.0),
    ("rescaler_processor_pandas", "tws_processor_pandas", 10.0),
)
CHANGELOG_CONF = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
LOG_PREFIX = "steady_state"


def say(message: str) -> None:
    common.log(message, prefix=LOG_PREFIX)


# every run of a contender: this script again, in a fresh process
CHILD = common.ChildRunner(Path(__file__).resolve(), LOG_PREFIX, timeout_s=3 * 3600)


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
        return common.generator_options(self, self.end_offset)


# -- the pandas processor (pickled to Spark's Python workers; the Row API's is in _spark.py) --
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
def _phase(w: Workload, epoch: int) -> str:
    if epoch < w.warmup:
        return "warm-up"
    return "measured" if epoch < w.warmup + w.epochs else "trailing"


def _write_state(path: Path, keys: list[str], counts: list[int]) -> None:
    import pyarrow as pa
    import pyarrow.feather as feather

    table = pa.table({"key": pa.array(keys, pa.string()), "count": pa.array(counts, pa.int64())})
    feather.write_feather(table, str(path))


def run_rescaler(w: Workload, workdir: Path, name: str = "rescaler") -> dict[str, Any]:
    from workers.config import RunnerConfig
    from workers.control import EpochReport, LocalControl
    from workers.readout import iter_state
    from workers.runner import PipelineRunner

    ref, pipeline, fragment = RESCALER_PIPELINES[name]
    config = RunnerConfig(
        pipeline=pipeline,
        pipeline_ref=ref,
        sink="files",  # what the built-ins write: the same cost for every contender
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
        preaggregate=name == "rescaler_folded",
    )
    reports: list[dict[str, Any]] = []
    snapshot: list[dict[str, Any]] = []
    runner: PipelineRunner

    def on_epoch(report: EpochReport) -> None:
        # Runs inside the epoch's foreachBatch, so it must stay cheap: one log line, and the
        # progress snapshot only in the trailing epoch, whose time is not measured.
        reports.append(
            {
                "epoch": report.epoch,
                "rows": report.rows,
                "foreach_batch_s": report.duration_s,
                "timings": asdict(runner.last_timings),
            }
        )
        say(
            f"rescaler {w.dist}: epoch {report.epoch + 1}/{w.total_epochs} "
            f"({_phase(w, report.epoch)}) {report.rows} rows, foreachBatch {report.duration_s:.3f} s"
        )
        if report.epoch == w.total_epochs - 1:
            snapshot.extend(common.progress_batches(runner.query))

    runner = PipelineRunner(config, LocalControl(workdir / "control"), on_epoch=on_epoch)
    started = time.time()
    sampler = common.PeakRssSampler().start()
    try:
        runner.run()
    finally:
        memory = sampler.stop()
    finished = time.time()
    try:  # the JVM object outlives spark.stop(); it may hold the trailing epoch too
        progress = common.progress_batches(runner.query)
    except Exception:
        progress = snapshot

    say(f"rescaler {w.dist}: reading the state back")
    keys: list[str] = []
    counts: list[int] = []
    for row in iter_state(config.state_dir, pipeline, fragment, backend=config.backend):
        keys.append(row["key"])
        value = row["value"]
        if isinstance(value, dict):  # a processor's state: its count ValueState
            value = value["state"]["count"]["value"][0]
        counts.append(int(value))
    _write_state(workdir / "state.feather", keys, counts)
    return {
        "progress": progress,
        "epoch_reports": reports,
        "memory": memory.to_json(),
        "run_s": round(finished - started, 3),
        "settings": {
            "state_backend": config.backend,
            "parallel_units": config.initial_pus,
            "vnodes": config.vnodes,
            "state_fsync": os.environ.get("RESCALER_STATE_FSYNC", "1 (default)"),
        },
    }


def run_spark_contender(name: str, w: Workload, workdir: Path) -> dict[str, Any]:
    conf = shared_spark.spark_conf(w.shuffle_partitions)
    if name == "native_changelog":
        conf = (*conf, (CHANGELOG_CONF, "true"))
    checkpoint = workdir / "checkpoint"
    started = time.time()
    sampler = common.PeakRssSampler().start()
    spark = shared_spark.spark_session(f"steady-state-{name}", workdir, conf)

    def on_batch(d: dict[str, Any]) -> None:
        batch = int(d["batchId"])
        say(
            f"{name} {w.dist}: epoch {batch + 1}/{w.total_epochs} ({_phase(w, batch)}) in "
            f"{d['durationMs'].get('triggerExecution', 0)} ms"
        )

    try:
        grouped = shared_spark.keys_grouped(spark, w.source_options())
        if name in ("native", "native_changelog"):
            counted = grouped.count()
        elif name == "tws":
            counted = shared_spark.tws_count(grouped)
        elif name == "tws_pandas":
            counted = grouped.transformWithStateInPandas(
                PandasCountProcessor(), "key string, count long", "Update", "None"
            )
        elif name == "tws_processor":
            counted = grouped.transformWithState(RecentCount(), OUTPUT, "Update", "None")
        elif name == "tws_processor_pandas":
            counted = grouped.transformWithStateInPandas(
                PandasRecentCount(), OUTPUT, "Update", "None"
            )
        else:
            raise ValueError(f"unknown contender {name!r}")
        query = shared_spark.start_noop(counted, checkpoint, f"steady_state_{name}")
        with common.ProgressPoller(query, on_batch):
            query.processAllAvailable()  # the source ends at max_rows: every epoch is done
        query.stop()
        memory = sampler.stop()
        finished = time.time()
        progress = common.progress_batches(query)

        say(f"{name} {w.dist}: reading the state back (statestore reader)")
        state = shared_spark.read_counts(spark, checkpoint, native=name.startswith("native"))
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
    name = args.contender

    def work(workdir: Path) -> dict[str, Any]:
        if name in RESCALER_PIPELINES:
            result = run_rescaler(w, workdir, name)
        else:
            result = run_spark_contender(name, w, workdir)
        return {**result, "state_file": str(workdir / "state.feather")}

    return CHILD.serve(Path(args.workdir), f"{name} {w.dist}", work)


# -- parent side: run the children, verify, summarize --------------------------------------------
def run_contender(
    name: str, rnd: int, *, w: Workload, run_dir: Path, settle: bool
) -> dict[str, Any]:
    """One run of one contender in its own process, summarized (it is verified later)."""
    args = ["--contender", name, "--child-workload", json.dumps(asdict(w))]
    label = f"{name} {w.dist} #{rnd + 1}"
    r = CHILD.run(args, run_dir / f"{w.dist}-{name}-{rnd}", label, settle=settle)
    if "progress" in r:
        r["summary"] = summarize(r["progress"], w)
        if "epoch_reports" in r and "error" not in r["summary"]:
            r["summary"]["epoch_breakdown_ms"] = breakdown(r["epoch_reports"], r["summary"], w)
    return r


# Spark's own parts of a micro-batch around foreachBatch (durationMs), then the runner's parts
# inside it (workers.runner.EpochTimings): where a rescaler epoch's time goes.
SPARK_PARTS = ("latestOffset", "queryPlanning", "walCommit", "commitOffsets")
DRIVER_PARTS = ("plan_s", "build_s", "spark_job_s", "bookkeeping_s", "report_s")


def breakdown(
    reports: list[dict[str, Any]], summary: dict[str, Any], w: Workload
) -> dict[str, float]:
    """Mean milliseconds per measured epoch of each part of the rescaler's epoch."""
    measured = [
        r for r in reports if w.warmup <= r["epoch"] < w.warmup + w.epochs and "timings" in r
    ]
    if not measured:
        return {}
    parts = {
        k.removesuffix("_s"): round(
            sum(r["timings"][k] for r in measured) / len(measured) * 1000, 1
        )
        for k in DRIVER_PARTS
    }
    spark = summary.get("mean_ms_by_component", {})
    out = {f"spark_{k}": spark.get(k, 0.0) for k in SPARK_PARTS}
    out.update(parts)
    trigger = spark.get("triggerExecution", 0.0)
    out["other"] = round(trigger - sum(out.values()), 1)
    out["total_triggerExecution"] = trigger
    return out


def breakdown_table(dist: str, rescaler: dict[str, Any]) -> str | None:
    """The rescaler's epoch, part by part, median [min, max] of each run's mean."""
    runs = [
        parts for r in rescaler["runs"] if (parts := common.dig(r, "summary", "epoch_breakdown_ms"))
    ]
    if not runs:
        return None
    rows = [
        [part, common.fmt_spread(common.spread(run.get(part) for run in runs), ",.1f")]
        for part in runs[0]
    ]
    return f"== {dist}: where a rescaler epoch's time goes (ms per epoch) ==\n" + (
        common.format_table(["part", "ms"], rows)
    )


def summarize(progress: list[dict[str, Any]], w: Workload) -> dict[str, Any]:
    """Throughput and latency over the measured epochs, from Spark's progress reports."""
    by_batch = {p["batch"]: p for p in progress}
    wanted = range(w.warmup, w.warmup + w.epochs)
    missing = [b for b in wanted if b not in by_batch]
    measured = [by_batch[b] for b in wanted if b in by_batch]
    if not measured or not sum(p["rows"] for p in measured):
        return {"error": f"no progress (or no rows) for the measured epochs {list(wanted)}"}

    def end(p: dict[str, Any]) -> float:
        return (
            common.spark_time(p["timestamp"]) + float(p["duration_ms"]["triggerExecution"]) / 1000
        )

    trigger_ms = [p["duration_ms"]["triggerExecution"] for p in measured]
    rows = sum(p["rows"] for p in measured)
    busy_s = sum(trigger_ms) / 1000
    before = by_batch.get(w.warmup - 1)
    # Wall time from the commit that ended the warm-up (or the first measured start) to the
    # commit of the last measured epoch: includes the gaps between batches.
    wall_start = end(before) if before is not None else common.spark_time(measured[0]["timestamp"])
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
        "p50_ms": common.percentile(trigger_ms, 50),
        "p99_ms": common.percentile(trigger_ms, 99),
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

            say(f"oracle {w.dist}: computing the expected state of {w.end_offset} records")
            gen = common.generator_config(w)
            result = expected_from_generator("wordcount", gen, w.end_offset)
            self._cache[w] = result.state["word_count"]
        return self._cache[w]


def verify(state_file: Path, expected: dict[str, int]) -> dict[str, Any]:
    import pyarrow.feather as feather

    table = feather.read_table(str(state_file))
    keys = table.column("key").to_pylist()
    actual = dict(zip(keys, table.column("count").to_pylist(), strict=True))
    return common.compare_counts(expected, actual, len(keys) - len(actual))


FIGURES: common.Figures = {
    "rows_per_s": lambda r: common.dig(r, "summary", "rows_per_s"),
    "rows_per_s_wall": lambda r: common.dig(r, "summary", "rows_per_s_wall"),
    "p50_ms": lambda r: common.dig(r, "summary", "p50_ms"),
    "p99_ms": lambda r: common.dig(r, "summary", "p99_ms"),
    "peak_rss_mb": lambda r: common.dig(r, "memory", "peak_rss_mb"),
}


def add_ratios(contenders: dict[str, dict[str, Any]]) -> None:
    """Each contender's ``ratio_vs_rescaler`` headline: rescaler rows/s ÷ its rows/s, round by
    round (runs at one index shared a round, so they saw the same stretch of load)."""
    base = [
        common.dig(r, "summary", "rows_per_s")
        for r in common.dig(contenders, "rescaler", "runs") or []
    ]
    for c in contenders.values():
        other = [common.dig(r, "summary", "rows_per_s") for r in c["runs"]]
        c["headline"]["ratio_vs_rescaler"] = common.spread(
            round(a / b, 3) if a and b else None for a, b in zip(base, other, strict=False)
        )


def pair_ratios(contenders: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The same processor under Rescaler and under Spark: Rescaler's rows/s ÷ Spark's, round
    by round, with the issue's goal."""
    pairs: dict[str, Any] = {}
    for ours, theirs, goal in PAIRS:
        if ours not in contenders or theirs not in contenders:
            continue
        a = [common.dig(r, "summary", "rows_per_s") for r in contenders[ours]["runs"]]
        b = [common.dig(r, "summary", "rows_per_s") for r in contenders[theirs]["runs"]]
        ratio = common.spread(
            round(x / y, 3) if x and y else None for x, y in zip(a, b, strict=False)
        )
        if ratio is not None:
            pairs[f"{ours}/{theirs}"] = {
                "ratio": round(ratio["median"], 2),
                "min": ratio["min"],
                "max": ratio["max"],
                "goal": goal,
                "met": ratio["median"] >= goal,
            }
    return pairs


def table_for(dist: str, contenders: dict[str, dict[str, Any]]) -> str:
    rows = []
    for name, c in contenders.items():
        h = c["headline"]
        if h["rows_per_s"] is None:  # not one run gave numbers
            rows.append([LABELS[name], "failed", "", "", "", "", "", common.first_error(c["runs"])])
            continue
        rows.append(
            [
                LABELS[name],
                common.fmt_spread(h["rows_per_s"]),
                common.fmt_spread(h["rows_per_s_wall"]),
                common.fmt_spread(h["ratio_vs_rescaler"], ".2f", "x"),
                common.fmt_spread(h["p50_ms"]),
                common.fmt_spread(h["p99_ms"]),
                common.fmt_spread(h["peak_rss_mb"]),
                common.exact_cell(c["runs"]),
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
    return f"== {dist} ==\n" + common.format_table(headers, rows)


def goals(contenders: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The issue's goals, measured (not asserted): rescaler ≥ 10x tws and ≥ 1.5x native, by the
    median of the rounds' ratios (min and max beside it)."""
    out: dict[str, Any] = {}
    for name, target in (("tws", 10.0), ("native", 1.5)):
        ratio = common.dig(contenders, name, "headline", "ratio_vs_rescaler")
        if ratio is not None:
            out[f"vs_{name}"] = {
                "ratio": round(ratio["median"], 2),
                "min": ratio["min"],
                "max": ratio["max"],
                "goal": target,
                "met": ratio["median"] >= target,
            }
    return out


def plot(path: Path, results: dict[str, Any], w_by_dist: dict[str, Workload]) -> None:
    """Epoch latency per contender, one line per run (one colour per contender)."""
    from matplotlib.ticker import MaxNLocator

    plt = common.pyplot()
    dists = list(results)
    fig, axes = plt.subplots(1, len(dists), figsize=(7 * len(dists), 4.8), squeeze=False)
    for ax, dist in zip(axes[0], dists, strict=True):
        w = w_by_dist[dist]
        for i, (name, c) in enumerate(results[dist]["contenders"].items()):
            legend: str | None = LABELS[name]
            for r in c["runs"]:
                progress = sorted(r.get("progress", []), key=lambda p: p["batch"])
                points = [
                    (p["batch"], p["duration_ms"]["triggerExecution"])
                    for p in progress
                    if p["rows"] > 0 and p["batch"] < w.warmup + w.epochs
                ]
                if points:
                    xs, ys = zip(*points, strict=True)
                    ax.plot(xs, ys, marker="o", markersize=3, color=f"C{i}", label=legend)
                    legend = None  # one legend entry per contender
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
    common.save_figure(fig, path)


def parent_main(args: argparse.Namespace) -> int:
    if args.quick:
        args.rows_per_epoch, args.key_space, args.epochs, args.warmup = 20_000, 50_000, 3, 1
    if args.contenders == "processors":
        args.contenders = ",".join(PROCESSOR_CONTENDERS)
    contenders = common.parse_names(args.contenders, CONTENDERS, "contenders")
    dists = ["zipf", "uniform"] if args.dist == "both" else [args.dist]
    out = common.results_path(args.out, "steady_state", args.quick)
    # Before anything that loads the machine: a loaded start skews every number.
    validity, load_before = common.check_load(args.allow_load, prefix=LOG_PREFIX)

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
    machine = common.machine_info()
    say(
        f"{len(contenders)} contenders x {len(dists)} distributions x {args.repeat} runs; "
        f"{args.rows_per_epoch:,} rows/epoch, {args.key_space:,} keys, "
        f"{args.warmup} warm-up + {args.epochs} measured epochs; load {load_before}"
    )
    oracle = Oracle()
    results: dict[str, Any] = {}
    launches: list[dict[str, Any]] = []
    started = time.time()
    with common.RunDir("steady_state-", keep=args.keep, log_prefix=LOG_PREFIX) as run_dir:
        for dist, w in workloads.items():
            run_one = functools.partial(
                run_contender, w=w, run_dir=run_dir.path, settle=validity.valid
            )
            runs, at_launch = common.run_rounds(contenders, args.repeat, run_one)
            launches += [{"dist": dist, **launch} for launch in at_launch]
            # The oracle runs after this distribution's contenders, never beside one of them.
            expected = oracle.expected(w)
            for name, attempts in runs.items():
                for r in attempts:
                    if "state_file" in r:
                        r["verification"] = verify(Path(r.pop("state_file")), expected)
                        v = r["verification"]
                        say(
                            f"{name} {dist} #{r['round'] + 1}: exact={v['exact']} keys "
                            f"{v['keys_actual']:,}/{v['keys_expected']:,} total "
                            f"{v['total_actual']:,}/{v['total_expected']:,}"
                        )
            per = {name: common.combine_runs(attempts, FIGURES) for name, attempts in runs.items()}
            add_ratios(per)
            results[dist] = {
                "workload": asdict(w),
                "contenders": per,
                "goals": goals(per),
                "pairs": pair_ratios(per),
            }

    trust = common.trust_fields(validity, load_before, launches)
    tables = [
        common.with_verdict(table_for(dist, results[dist]["contenders"]), trust) for dist in results
    ]
    tables += [
        table
        for dist in results
        if "rescaler" in results[dist]["contenders"]
        and (table := breakdown_table(dist, results[dist]["contenders"]["rescaler"]))
    ]
    legend = (
        "rows/s: rows / sum of triggerExecution over the measured epochs; rows/s wall: rows / "
        "wall time between commits; ratio vs rescaler: rescaler rows/s ÷ this contender's, per "
        "round (goals: ≥10x transformWithState, ≥1.5x native); peak MB: summed RSS of the "
        "contender's process tree; each figure: median [min, max] over the interleaved runs; "
        "exact: every run's full state equals the oracle key for key"
    )
    report = {
        "benchmark": "steady_state",
        "command": common.command_line(),
        **trust,
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
            "repeat": args.repeat,
            "order": "interleaved, every contender once per round, reversed every other round",
            "quick": args.quick,
        },
        "elapsed_s": round(time.time() - started, 1),
        "legend": legend,
        "tables": tables,
        "results": results,
    }
    png = common.save_report(out, report, lambda p: plot(p, results, workloads), prefix=LOG_PREFIX)
    print("\n\n".join(tables))
    print(f"\n{legend}")
    for dist in results:
        for key, g in results[dist]["goals"].items():
            print(
                f"{dist}: rescaler {key}: {g['ratio']}x [{g['min']}, {g['max']}] "
                f"(goal {g['goal']}x, met: {g['met']})"
            )
        for key, g in results[dist]["pairs"].items():
            print(
                f"{dist}: same processor, {key}: {g['ratio']}x [{g['min']}, {g['max']}] "
                f"(goal {g['goal']}x, met: {g['met']})"
            )
    print(f"\nJSON: {out}\nplot: {png}")
    failed = [
        f"{d}/{n}"
        for d in results
        for n, c in results[d]["contenders"].items()
        if any("error" in r for r in c["runs"])
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
        help=f"comma-separated, from {', '.join(CONTENDERS)}; or 'processors': the four "
        "same-processor contenders",
    )
    p.add_argument(
        "--shuffle-partitions", type=int, default=4, help="state partitions of Spark contenders"
    )
    common.add_trust_args(p)
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
