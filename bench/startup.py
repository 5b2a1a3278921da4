"""Startup benchmark: how long a pipeline is down when its runner starts, cold or after kill -9.

Each figure is measured from outside, by this process: from the launch of a fresh process to the
first epoch Spark commits (its checkpoint's ``commits/N`` file appears), with the process's
whole group (its JVM and Python workers) killed with SIGKILL between runs.

* ``rescaler``: ``python -m workers run`` on ``bench/startup_pipeline.py`` (Spark's
  ``rate-micro-batch`` source, a count per key, the file sink);
* ``plain``: what a user would write instead, a plain PySpark streaming query of the same source
  with a ``foreachBatch`` sink (the same count per key, appended to Parquet): the floor.

Per contender and round (``--repeat``, interleaved):

* **cold**: an empty state directory (checkpoint), launch → first committed epoch;
* **restart**: the same process run until its state holds ``--keys`` keys (the runner's stores;
  the plain query has no state of its own), killed with SIGKILL, launched again → first epoch it
  commits after the restart;
* **rescale**: then a rescale request → the first epoch committed at the new size. The runner
  is asked to add a PU, once ``stop_start`` and once ``live`` (``all_at_once``), through its
  control directory (what ``python -m workers rescale`` does); the plain query is rescaled as its
  user would: stopped (SIGTERM to its process group) and launched again at the new size.

It prints a table with the runner's figures over the plain query's (ratios of one run), writes
``bench/results/startup.json`` with both contenders' start phases (their logs' ``start:`` lines:
the profile of what remains) and refuses to start above a 1-minute load of 1.0.

    .venv/bin/python bench/startup.py                # 1.6M keys of state, 3 rounds
    .venv/bin/python bench/startup.py --quick        # 100k keys, 1 round: a minute or two

The JVMs run with the options in the environment (``SPARK_SUBMIT_OPTS``, recorded), none by
default: what a user gets.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # runnable as `python bench/startup.py` from anywhere
    sys.path.insert(0, str(ROOT))

from bench import _common as common  # noqa: E402  (needs ROOT on sys.path first)
from bench import startup_pipeline  # noqa: E402

LOG_PREFIX = "startup"
CONTENDERS = ("rescaler", "plain")
PIPELINE = "startup"
TIMEOUT_S = 600.0
PHASE = re.compile(r"start: (?P<name>.+?) took (?P<took>[0-9.]+) s")
PLAIN_SLOTS_ENV = "STARTUP_PLAIN_SLOTS"
#: the runner's PUs: it starts on 2 (local[2]'s slots), a stop-start adds the third, a live
#: rescale the fourth; the plain query goes from 2 task slots to 3
PARALLEL_UNITS = 4
FRAGMENT = "word_count"


def say(message: str) -> None:
    common.log(message, prefix=LOG_PREFIX)


# -- the plain query (run as this script's child) -------------------------------------------------
def plain_query(checkpoint: Path, output: Path) -> int:
    """A plain PySpark streaming query of the same source, a foreachBatch count per key, on
    ``$STARTUP_PLAIN_SLOTS`` task slots (its size). It logs its own start, phase by phase, in the
    runner's words (``start: spark took 4.1 s``), from its process's creation."""
    import psutil

    began = psutil.Process().create_time()
    mark = [began]

    def phase(name: str) -> None:
        now = time.time()
        print(f"start: {name} took {now - mark[0]:.2f} s ({now - began:.2f} s since the start)",
              flush=True)  # fmt: skip
        mark[0] = now

    phase("python")  # the interpreter and this script's imports
    from pyspark.sql import SparkSession

    slots = os.environ.get(PLAIN_SLOTS_ENV, "2")
    spark = (
        SparkSession.builder.master(f"local[{slots}]")
        .appName("plain-startup")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", slots)
        .getOrCreate()
    )
    phase("spark")
    key = startup_pipeline.key_expr()
    first = [True]

    def sink(df: Any, epoch: int) -> None:
        if first[0]:
            phase("first batch")  # from the query's start to its first batch's call
        df.selectExpr(f"{key} AS word").groupBy("word").count().write.mode("append").parquet(
            str(output / f"epoch={epoch}")
        )
        if first[0]:
            phase("first batch's job")
            first[0] = False

    query = (
        startup_pipeline.source(spark)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="1 second")
        .start()
    )
    phase("query start")
    query.awaitTermination()
    return 0


# -- one contender's process, watched from outside --------------------------------------------
class Contender:
    """One contender's process and its checkpoint, launched and killed by the parent."""

    def __init__(self, name: str, workdir: Path, rows_per_epoch: int, keys: int) -> None:
        self.name = name
        self.workdir = workdir
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p
            ),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
            startup_pipeline.ROWS_ENV: str(rows_per_epoch),
            startup_pipeline.KEYS_ENV: str(keys),
            "RESCALER_PARALLEL_UNITS": str(PARALLEL_UNITS),
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.launches = 0

    @property
    def commits(self) -> Path:
        if self.name == "rescaler":
            return self.workdir / "state" / PIPELINE / "checkpoint" / "commits"
        return self.workdir / "checkpoint" / "commits"

    def command(self) -> list[str]:
        if self.name == "rescaler":
            return [
                sys.executable, "-m", "workers", "run",
                "--pipeline", "bench.startup_pipeline:build",
                "--state-dir", str(self.workdir / "state"),
                "--trigger-interval", "1", "--no-spark-ui",
            ]  # fmt: skip
        return [
            sys.executable, str(Path(__file__).resolve()), "--plain",
            str(self.workdir / "checkpoint"), str(self.workdir / "output"),
        ]  # fmt: skip

    def last_commit(self) -> int:
        if not self.commits.is_dir():
            return -1
        return max((int(p.name) for p in self.commits.iterdir() if p.name.isdigit()), default=-1)

    def launch(self) -> float:
        self.launches += 1
        log = open(self.workdir / f"{self.name}-{self.launches}.log", "wb")  # noqa: SIM115
        started = time.monotonic()
        self.proc = subprocess.Popen(
            self.command(), cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        return started

    def wait_commit(self, after: int, started: float) -> tuple[int, float]:
        """Seconds from ``started`` until an epoch past ``after`` is committed."""
        while True:
            epoch = self.last_commit()
            if epoch > after:
                return epoch, round(time.monotonic() - started, 2)
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited ({self.proc.returncode}): {self.log_tail()}"
                )
            if time.monotonic() - started > TIMEOUT_S:
                raise RuntimeError(f"{self.name}: no commit after {TIMEOUT_S:.0f} s")
            time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL to the whole group: the driver, its JVM and its Python workers."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=60)
        common.reap_group(self.proc.pid, prefix=LOG_PREFIX)

    def stop(self) -> None:
        """SIGTERM to the whole group, as a user stops a query to restart it at another size."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.kill()
        common.reap_group(self.proc.pid, prefix=LOG_PREFIX)

    def epoch_with_pu(self, pu: int, after: int) -> int | None:
        """The first epoch past ``after`` in which ``pu`` held keys, if any yet."""
        path = self.workdir / "state" / PIPELINE / "control" / "epochs.jsonl"
        if not path.exists():
            return None
        for line in path.read_text("utf-8").splitlines():
            try:
                epoch = json.loads(line)
            except ValueError:  # a line being written
                continue
            per_pu = epoch.get("per_pu", [])
            if epoch["epoch"] > after and any(p["pu"] == pu and p["keys"] for p in per_pu):
                return int(epoch["epoch"])
        return None

    def rescale(self, strategy: str, pu: int) -> dict[str, Any]:
        """Ask the running runner to add ``pu``; seconds from the request to its first
        committed epoch, to its first committed epoch with keys on ``pu``, and to the end."""
        from workers.rescale.local import rescale as run_operation
        from workers.rescale.protocol import OperationRequest

        request = OperationRequest.parse(
            {
                "changes": {FRAGMENT: {"added_parallel_units": [pu]}},
                "strategy": strategy,
                "granularity": "all_at_once",
            }
        )
        ended: dict[str, Any] = {}

        def drive() -> None:
            try:
                tick = run_operation(
                    self.workdir / "state" / PIPELINE, request, timeout_s=TIMEOUT_S
                )
                ended["status"] = tick.to_json()["status"]
            except Exception as exc:  # reported below, in this thread
                ended["status"] = f"error: {exc}"
            ended["s"] = round(time.monotonic() - started, 2)

        before = self.last_commit()
        started = time.monotonic()
        driver = threading.Thread(target=drive, name=f"rescale-{strategy}", daemon=True)
        driver.start()
        _, first_s = self.wait_commit(before, started)
        while (at_size := self.epoch_with_pu(pu, before)) is None:
            failed = not driver.is_alive() and ended.get("status") != "completed"
            if failed or time.monotonic() - started > TIMEOUT_S:
                raise RuntimeError(f"{strategy} rescale to PU {pu}: {ended or 'timed out'}")
            time.sleep(0.02)
        _, at_size_s = self.wait_commit(at_size - 1, started)
        driver.join(TIMEOUT_S)
        if ended.get("status") != "completed":
            raise RuntimeError(f"{strategy} rescale to PU {pu} ended {ended}")
        return {"first_epoch_s": first_s, "at_new_size_s": at_size_s, "completed_s": ended["s"]}

    def log_tail(self) -> str:
        text = (self.workdir / f"{self.name}-{self.launches}.log").read_text("utf-8", "replace")
        return "\n".join(text.splitlines()[-20:])

    def phases(self) -> dict[str, float]:
        """The runner's start phases, from its log of the latest launch."""
        text = (self.workdir / f"{self.name}-{self.launches}.log").read_text("utf-8", "replace")
        return {m["name"]: float(m["took"]) for m in PHASE.finditer(text)}


def one_round(
    name: str, workdir: Path, args: argparse.Namespace, *, settle: bool
) -> dict[str, Any]:
    """Cold start, then run up to ``--keys`` keys, kill -9, restart, then rescale. ``settle``:
    first wait for the load to settle below the gate (not on a machine the user said is
    loaded)."""
    workdir.mkdir(parents=True)
    contender = Contender(name, workdir, args.rows_per_epoch, args.keys)
    if settle:
        common.settle_load(prefix=LOG_PREFIX)
    load = [round(x, 2) for x in os.getloadavg()]
    try:
        started = contender.launch()
        first, cold_s = contender.wait_commit(-1, started)
        cold_phases = contender.phases()
        say(f"{name}: cold start, epoch {first} committed after {cold_s:.2f} s")
        filled = -(-args.keys // args.rows_per_epoch)  # epochs until every key has state
        last, _ = contender.wait_commit(filled - 1, started)
        contender.kill()
        last = contender.last_commit()
        started = contender.launch()
        epoch, restart_s = contender.wait_commit(last, started)
        restart_phases = contender.phases()
        say(f"{name}: restart after kill -9 at epoch {last}, epoch {epoch} after {restart_s:.2f} s")
        rescales = rescale_round(contender)
    finally:
        contender.kill()
    return {
        "contender": name,
        "load_avg_at_launch": load,
        "cold_s": cold_s,
        "restart_s": restart_s,
        "killed_after_epoch": last,
        "state_keys": args.keys,
        "cold_phases": cold_phases,
        "restart_phases": restart_phases,
        "rescale": rescales,
    }


def rescale_round(contender: Contender) -> dict[str, dict[str, Any]]:
    """The runner: a stop-start rescale to a third PU, then a live one to a fourth. The plain
    query: stopped and launched again on three task slots (Spark has no rescale of its own)."""
    if contender.name == "rescaler":
        out = {}
        for strategy, pu in (("stop_start", 2), ("live", 3)):
            out[strategy] = figures = contender.rescale(strategy, pu)
            say(
                f"rescaler: {strategy} rescale to PU {pu}: first epoch {figures['first_epoch_s']} s, "
                f"at the new size {figures['at_new_size_s']} s, completed {figures['completed_s']} s"
            )
        return out
    last = contender.last_commit()
    started = time.monotonic()
    contender.stop()
    contender.env[PLAIN_SLOTS_ENV] = "3"
    contender.launch()
    _, at_size_s = contender.wait_commit(last, started)
    say(f"plain: stopped and relaunched on 3 slots, first batch committed after {at_size_s} s")
    phases = contender.phases()
    return {"restart_at_new_size": {"at_new_size_s": at_size_s, "phases": phases}}


#: the figures of the table: label, the runner's value in a run, the plain query's
FIGURES: tuple[tuple[str, str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("cold start", "cold_s", ("cold_s",), ("cold_s",)),
    ("restart after kill -9", "restart_s", ("restart_s",), ("restart_s",)),
    (
        "stop-start rescale request",
        "stop_start_s",
        ("rescale", "stop_start", "at_new_size_s"),
        ("rescale", "restart_at_new_size", "at_new_size_s"),
    ),
    (
        "live rescale request",
        "live_s",
        ("rescale", "live", "first_epoch_s"),
        ("rescale", "restart_at_new_size", "at_new_size_s"),
    ),
    (
        "live rescale request, at the new size",
        "live_at_new_size_s",
        ("rescale", "live", "at_new_size_s"),
        ("rescale", "restart_at_new_size", "at_new_size_s"),
    ),
)


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    figures: dict[str, Any] = {name: {} for name in CONTENDERS}
    ratios = {}
    for _, figure, ours_at, plain_at in FIGURES:
        for name, path in (("rescaler", ours_at), ("plain", plain_at)):
            mine = [r for r in runs if r["contender"] == name and "error" not in r]
            figures[name][figure] = common.spread(common.dig(r, *path) for r in mine)
        ours, plain = figures["rescaler"][figure], figures["plain"][figure]
        if ours and plain:
            ratios[figure] = round(ours["median"] / plain["median"], 2)
    figures["ratios"] = ratios
    return figures


def phase_profile(runs: list[dict[str, Any]], contender: str, *path: str) -> dict[str, float]:
    """A contender's start phases (at ``path`` in its runs), median over its runs."""
    mine = [
        common.dig(r, *path) or {} for r in runs if r["contender"] == contender and "error" not in r
    ]
    names = dict.fromkeys(n for phases in mine for n in phases)
    return {
        n: round(float(common.percentile([p.get(n, 0.0) for p in mine], 50) or 0.0), 2)
        for n in names
    }


def profiles(runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    return {
        "rescaler cold start": phase_profile(runs, "rescaler", "cold_phases"),
        "rescaler restart": phase_profile(runs, "rescaler", "restart_phases"),
        "plain cold start": phase_profile(runs, "plain", "cold_phases"),
        "plain restart": phase_profile(runs, "plain", "restart_phases"),
    }


def table(figures: dict[str, Any], phases: dict[str, dict[str, float]]) -> str:
    rows = [
        [
            label,
            common.fmt_spread(figures["rescaler"][f], ".2f", " s"),
            common.fmt_spread(figures["plain"][f], ".2f", " s"),
            f"{figures['ratios'].get(f, float('nan')):.2f}x",
        ]
        for label, f, _, _ in FIGURES
    ]
    text = common.format_table(
        ["to the first committed epoch after", "Rescaler", "plain query", "ratio"], rows
    )
    text += (
        "\nA rescale of the plain query is a stop and a launch on more task slots; the live"
        " rescale's first row is its first epoch after the request, records flowing."
    )
    for label, profile in phases.items():
        parts = ", ".join(f"{n} {s:.2f}" for n, s in profile.items())
        text += f"\n{label}, phase by phase (s): {parts}"
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--plain", nargs=2, metavar=("CHECKPOINT", "OUTPUT"), help=argparse.SUPPRESS
    )
    parser.add_argument("--keys", type=common.positive_int, default=1_600_000)
    parser.add_argument("--rows-per-epoch", type=common.positive_int, default=200_000)
    parser.add_argument("--quick", action="store_true", help="100k keys, one round")
    parser.add_argument("--out", help="result JSON (default bench/results/startup.json)")
    parser.add_argument("--keep", action="store_true", help="keep the run directory")
    common.add_trust_args(parser)
    args = parser.parse_args(argv)
    if args.plain:
        return plain_query(Path(args.plain[0]), Path(args.plain[1]))
    if args.quick:
        args.keys, args.repeat = 100_000, 1
        args.rows_per_epoch = min(args.rows_per_epoch, 50_000)
    validity, load = common.check_load(args.allow_load, prefix=LOG_PREFIX)
    machine = common.machine_info(packages=("pyspark",))  # before the runs: its load is the start's
    runs: list[dict[str, Any]] = []
    with common.RunDir("startup-", keep=args.keep, log_prefix=LOG_PREFIX) as run_dir:
        for index, name in common.interleaved(CONTENDERS, args.repeat):
            try:
                workdir = run_dir.path / f"{name}-{index}"
                runs.append(one_round(name, workdir, args, settle=validity.valid))
            except RuntimeError as exc:
                say(f"{name}: FAILED: {exc}")
                run_dir.keep = True
                runs.append({"contender": name, "error": str(exc)})
    figures = summarize(runs)
    phases = profiles(runs)
    text = table(figures, phases)
    report = {
        "benchmark": "startup",
        "command": common.command_line(),
        **common.trust_fields(validity, load, [r.get("load_avg_at_launch") for r in runs]),
        "machine": {**machine, "load_avg_at_end": [round(x, 2) for x in os.getloadavg()]},
        "parameters": {
            "keys": args.keys,
            "rows_per_epoch": args.rows_per_epoch,
            "repeat": args.repeat,
            "parallel_units": PARALLEL_UNITS,
            "live_granularity": "all_at_once",
            "spark_submit_opts": os.environ.get("SPARK_SUBMIT_OPTS"),
        },
        "runs": runs,
        "figures": figures,
        "phases_median_s": phases,
        "table": common.with_verdict(
            text,
            {
                "valid": validity.valid,
                "invalid_reason": validity.reason,
                "load": {"before_start": load},
            },
        ),
    }
    out = common.results_path(args.out, "startup", args.quick)
    common.write_json(out, report)
    print(report["table"])
    say(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    return 0 if all("error" not in r for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
