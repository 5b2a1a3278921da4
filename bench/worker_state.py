"""State on the workers (docs/elastic-workers.md, "Where state lives"): what keeping each PU's store
on its executor's own disk, with a durable copy outside the cluster, costs and saves, against the
shared directory it replaced and against Spark's own stateful operator on the same cluster.

Every run is a fresh process with its own Spark standalone master and two one-core
``spark-class`` workers (the local worker provider), the pipeline on two PUs, one per worker.

**steady** (``--phase steady``): keyed counting, Zipf keys, 100k rows/epoch, the state checked
against the oracle at the end. Contenders:

* ``shared``: the workers share one disk for their stores, and the durable location is the state
  directory (the model before issue 45), no snapshots;
* ``dir``: each worker has a disk of its own; exports, hold queues, the ``files`` sink and the
  snapshots in a local directory outside the cluster; a snapshot every ``--snapshot-every``;
* ``s3``: the same with the durable and recovery locations in an object store (moto's S3
  server on this machine);
* ``native``: Spark's ``groupBy().count()`` on the same cluster, RocksDB with changelog
  checkpointing into a local directory (Spark has no S3 filesystem here without hadoop-aws,
  which is not on PyPI: ``dir`` is the like-for-like contender).

It reports rows/s (between the first and the last measured commit), epoch p50/p99, and for the
runner the share of PU tasks that ran on their home executor.

**loss** (``--phase loss``): uniform keys until the state holds ``--keys`` keys, a few steady
epochs, then worker 2's host is lost: its worker and executor killed with SIGKILL and (for the
runner) its disk deleted. Reported: the time from the kill to the next committed epoch that
covers the whole stream, and the epochs after it; the state is checked against the oracle.
Contenders ``s3`` (the runner rebuilds the lost PU's store on worker 1 from the newest snapshot
and the epochs after it) and ``native`` (Spark reloads the lost state partitions on worker 1 from
its checkpoint: snapshot plus changelog).

    .venv/bin/python bench/worker_state.py                   # both phases, 3 runs each
    .venv/bin/python bench/worker_state.py --phase steady --repeat 1
    .venv/bin/python bench/worker_state.py --quick           # a smoke run, minutes

Prints a table and writes ``bench/results/worker_state.json`` and ``.png``
(``--quick``: ``worker_state_quick.*``). Nothing starts when the 1-minute load average is above
1.0, unless ``--allow-load`` (the result is then marked invalid).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import _cluster as clusters  # noqa: E402
from bench import _common as common  # noqa: E402

LOG_PREFIX = "worker-state"
PIPELINE = "wordcount"
FRAGMENT = "word_count"
STEADY = ("shared", "dir", "s3", "native")
LOSS = ("s3", "native")
LABELS = {
    "shared": "shared directory (before)",
    "dir": "own disks, durable copy in a directory",
    "s3": "own disks, durable copy in S3",
    "native": "Spark groupBy().count(), RocksDB changelog",
}
CHANGELOG_CONF = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
CHILD = common.ChildRunner(Path(__file__).resolve(), LOG_PREFIX, timeout_s=3600)


def say(message: str) -> None:
    common.log(message, prefix=LOG_PREFIX)


@dataclass(frozen=True)
class Params:
    phase: str  # "steady" or "loss"
    key_space: int
    zipf_s: float
    rows_per_epoch: int
    warmup: int  # epochs before the measured ones (loss: until the state holds its keys)
    epochs: int  # measured epochs (loss: steady epochs before the loss)
    after: int  # epochs after the loss (loss only)
    snapshot_every: str
    vnodes: int = 64
    seed: int = 7

    @property
    def total_epochs(self) -> int:
        return self.warmup + self.epochs + self.after + 1


# -- child: the runner -----------------------------------------------------------------------------
def run_runner(name: str, p: Params, workdir: Path) -> dict[str, Any]:
    from workers.config import RunnerConfig
    from workers.control import EpochReport, LocalControl
    from workers.oracle import compare, expected_from_generator
    from workers.readout import iter_state
    from workers.runner import PipelineRunner

    with clusters.standalone(
        workdir, private_disks=name != "shared", object_store=name == "s3"
    ) as cluster:
        durable, recovery = cluster.durable_location, cluster.recovery_dir
        if name == "dir":
            durable, recovery = str(workdir / "durable"), str(workdir / "recovery")
        config = RunnerConfig(
            pipeline=PIPELINE,
            words_per_line=1,
            key_space=p.key_space,
            zipf_s=p.zipf_s,
            seed=p.seed,
            rows_per_epoch=p.rows_per_epoch,
            # the loss phase runs until its controller stops it, some epochs after the loss
            epochs=p.total_epochs if p.phase == "steady" else None,
            trigger_interval_s=0,
            spark_ui=False,
            state_dir=workdir / "state",
            initial_pus=2,
            vnodes=p.vnodes,
            spark_master=cluster.master_url,
            durable_location=durable if name != "shared" else "",
            recovery_dir=recovery if name != "shared" else "",
            snapshot_every=p.snapshot_every if name != "shared" else "",
            local_dir="",  # each worker's executors use its own disk (RESCALER_LOCAL_DIR)
        )
        commits = common.Epochs()
        pus: dict[int, str] = {}  # PU -> its home executor, as the control plane saw it

        def on_epoch(report: EpochReport) -> None:
            tasks = [(t.pu, t.executor, t.rows) for t in report.per_pu if t.fragment == FRAGMENT]
            commits(
                {
                    "epoch": report.epoch,
                    "rows": report.rows,
                    "committed_at": report.committed_at,
                    "duration_s": report.duration_s,
                    "tasks": tasks,
                    "home": {str(pu): pus.get(pu) for pu, _, _ in tasks},
                    "keys": sum(t.keys for t in report.per_pu if t.fragment == FRAGMENT),
                }
            )
            say(f"{name}: epoch {report.epoch} {report.rows} rows in {report.duration_s:.3f}s")

        control = LocalControl(config.pipeline_dir / "control")
        runner = PipelineRunner(config, control, on_epoch=on_epoch)
        running = threading.Event()
        out: dict[str, Any] = {}

        def homes() -> None:
            while running.is_set():
                for w in control.workers():
                    for pu in w.parallel_units:
                        pus[pu] = w.executor_id
                time.sleep(0.2)

        def loss() -> None:
            """After the warm-up, the first snapshot, then ``epochs`` epochs: the rebuild
            replays the epochs since that snapshot, as Spark's replays its changelogs since
            its last snapshot."""
            from workers.recovery.location import RecoveryLocation

            try:
                commits.wait_count(p.warmup, 900, "the warm-up", running.is_set)
                location = RecoveryLocation(config.recovery_location)
                deadline = time.monotonic() + 600
                while not location.snapshot_ids(PIPELINE):
                    if not running.is_set() or time.monotonic() > deadline:
                        raise RuntimeError("no snapshot was taken before the loss")
                    time.sleep(0.2)
                out["snapshot_seen_at_epoch"] = len(commits.rows)
                commits.wait_count(
                    commits.count() + p.epochs, 900, "the epochs before the loss", running.is_set
                )
                out["lost"] = cluster.lose_host(2)
                out["lost_at"] = time.time()
                say(f"{name}: lost {out['lost']}")
                commits.wait_count(
                    commits.count() + p.after, 900, "the epochs after the loss", running.is_set
                )
            except Exception as exc:
                out["error"] = repr(exc)
            finally:
                runner.request_stop()

        running.set()
        threads = [threading.Thread(target=homes, daemon=True)]
        if p.phase == "loss":
            threads.append(threading.Thread(target=loss, daemon=True))
        for t in threads:
            t.start()
        started = time.time()
        try:
            runner.run()
        finally:
            running.clear()
            for t in threads:
                t.join(timeout=30)
        out["run_s"] = round(time.time() - started, 1)
        rows = commits.rows
        end = rows[-1]["epoch"] + 1 if rows else 0
        say(f"{name}: reading the state back")
        actual = {
            row["key"]: int(row["value"])
            for row in iter_state(config.state_dir, PIPELINE, FRAGMENT, backend=config.backend)
        }
        expected = expected_from_generator(
            PIPELINE, common.generator_config(p), end * p.rows_per_epoch
        )
        problems = compare(expected.state[FRAGMENT], actual)
        disks = cluster.disks()
        out["verification"] = {
            "exact": not problems,
            "keys": len(actual),
            "problems": problems[:12],
            # nothing of a store in the driver's state directory
            "stores_in_state_dir": len(list((workdir / "state").glob("**/stores/*/pu-*"))),
            "disks": [str(d) for d in disks],
        }
        out["epochs"] = rows
        return out


# -- child: Spark's own operator -----------------------------------------------------------------
def run_native(name: str, p: Params, workdir: Path) -> dict[str, Any]:
    from bench import _spark as shared_spark

    with clusters.standalone(workdir, private_disks=False, object_store=False) as cluster:
        conf = shared_spark.spark_conf(2, (CHANGELOG_CONF, "true"))
        spark = shared_spark.spark_session(
            f"worker-state-{name}", workdir, conf, master=cluster.master_url
        )
        checkpoint = workdir / "checkpoint"
        out: dict[str, Any] = {}
        try:
            end_rows = p.total_epochs * p.rows_per_epoch
            options = common.generator_options(p, end_rows)
            counted = shared_spark.keys_grouped(spark, options).count()
            query = shared_spark.start_noop(counted, checkpoint, "worker_state_native")
            seen: list[int] = []

            def on_batch(d: dict[str, Any]) -> None:
                seen.append(int(d["batchId"]))
                say(f"native: batch {d['batchId']} in {d['durationMs'].get('triggerExecution')} ms")
                if p.phase == "loss" and len(seen) == p.warmup + p.epochs and "lost" not in out:
                    out["lost"] = cluster.lose_host(2)
                    out["lost_at"] = time.time()
                    say(f"native: lost {out['lost']}")

            started = time.time()
            with common.ProgressPoller(query, on_batch):
                query.processAllAvailable()
            query.stop()
            out["run_s"] = round(time.time() - started, 1)
            batches = common.progress_batches(query)
            say("native: reading the state back (statestore reader)")
            table = shared_spark.read_counts(spark, checkpoint, native=True)
        finally:
            spark.stop()
    keys = table.column("key").to_pylist()
    actual = dict(zip(keys, table.column("count").to_pylist(), strict=True))
    from workers.oracle import expected_from_generator

    expected = expected_from_generator(PIPELINE, common.generator_config(p), end_rows)
    out["verification"] = common.compare_counts(
        expected.state[FRAGMENT], actual, len(keys) - len(actual)
    )
    out["epochs"] = [
        {
            "epoch": b["batch"],
            "rows": b["rows"],
            "duration_s": b["duration_ms"].get("triggerExecution", 0) / 1000,
            "committed_at": common.spark_time(b["timestamp"])
            + b["duration_ms"].get("triggerExecution", 0) / 1000,
        }
        for b in batches
        if b["rows"] > 0
    ]
    return out


# -- parent: figures ---------------------------------------------------------------------------------
def steady_figures(r: dict[str, Any], p: Params) -> dict[str, Any]:
    epochs = sorted(r.get("epochs", []), key=lambda e: e["epoch"])
    window = epochs[p.warmup : p.warmup + p.epochs]
    if len(window) < 2:
        return {"error": r.get("error", "too few epochs")}
    span = window[-1]["committed_at"] - window[0]["committed_at"]
    durations = [e["duration_s"] for e in window]
    out: dict[str, Any] = {
        "rows_per_s": sum(e["rows"] for e in window[1:]) / span if span > 0 else None,
        "p50_epoch_s": common.percentile(durations, 50),
        "p99_epoch_s": common.percentile(durations, 99),
    }
    tasks = [
        (pu, executor, e["home"].get(str(pu)))
        for e in window
        for pu, executor, rows in e.get("tasks", [])
        if rows
    ]
    if tasks:
        out["tasks"] = len(tasks)
        out["at_home"] = sum(1 for _, ex, home in tasks if home is not None and ex == home)
        out["locality"] = out["at_home"] / len(tasks)
    return out


def loss_figures(r: dict[str, Any], p: Params) -> dict[str, Any]:
    epochs = sorted(r.get("epochs", []), key=lambda e: e["committed_at"])
    lost_at = r.get("lost_at")
    if lost_at is None:
        return {"error": r.get("error", "no loss happened")}
    before = [e for e in epochs if e["committed_at"] <= lost_at][-p.epochs :]
    after = [e for e in epochs if e["committed_at"] > lost_at]
    if not after:
        return {"error": "no epoch committed after the loss"}
    durations = [e["duration_s"] for e in before]
    return {
        "to_next_commit_s": after[0]["committed_at"] - lost_at,
        "steady_p50_epoch_s": common.percentile(durations, 50),
        "steady_p99_epoch_s": common.percentile(durations, 99),
        "after_p50_epoch_s": common.percentile([e["duration_s"] for e in after[1:]], 50),
        "keys_at_loss": before[-1].get("keys") if before else None,
    }


STEADY_FIGURES: common.Figures = {
    "rows_per_s": lambda r: common.dig(r, "figures", "rows_per_s"),
    "p50_epoch_s": lambda r: common.dig(r, "figures", "p50_epoch_s"),
    "p99_epoch_s": lambda r: common.dig(r, "figures", "p99_epoch_s"),
    "locality": lambda r: common.dig(r, "figures", "locality"),
}
LOSS_FIGURES: common.Figures = {
    "to_next_commit_s": lambda r: common.dig(r, "figures", "to_next_commit_s"),
    "steady_p99_epoch_s": lambda r: common.dig(r, "figures", "steady_p99_epoch_s"),
    "after_p50_epoch_s": lambda r: common.dig(r, "figures", "after_p50_epoch_s"),
}


def ratio_spread(
    runs: dict[str, list[dict[str, Any]]], a: str, b: str, figure: str
) -> dict[str, Any] | None:
    """``a``'s figure over ``b``'s, run by run within a round (the same load drift)."""
    by_round = {r["round"]: common.dig(r, "figures", figure) for r in runs.get(b, [])}
    ratios = []
    for r in runs.get(a, []):
        x, y = common.dig(r, "figures", figure), by_round.get(r["round"])
        ratios.append(x / y if x and y else None)
    return common.spread(ratios)


#: each phase's table: (header, figure, format) for a contender's own figures, then "vs <peer>"
#: ratios of one figure, run by run
COLUMNS: dict[str, tuple[list[tuple[str, str, str]], str, tuple[str, ...]]] = {
    "steady": (
        [
            ("rows/s", "rows_per_s", ",.0f"),
            ("p99 epoch s", "p99_epoch_s", ".3f"),
            ("PU tasks at home", "locality", ".1%"),
        ],
        "rows_per_s",
        ("shared", "native"),
    ),
    "loss": (
        [
            ("loss → next commit s", "to_next_commit_s", ".1f"),
            ("steady p99 epoch s", "steady_p99_epoch_s", ".3f"),
            ("p50 epoch after s", "after_p50_epoch_s", ".3f"),
        ],
        "to_next_commit_s",
        ("native",),
    ),
}


def phase_table(phase: str, results: dict[str, Any], runs: dict[str, list[dict[str, Any]]]) -> str:
    own, compared, peers = COLUMNS[phase]
    rows = []
    for name in results:
        h = results[name]["headline"]
        cells = [common.fmt_spread(h[figure], spec) for _, figure, spec in own]
        ratios = [
            common.fmt_spread(ratio_spread(runs, name, peer, compared), ".2f", "x")
            if name != peer
            else "1"
            for peer in peers
        ]
        rows.append([LABELS[name], *cells, *ratios, common.exact_cell(results[name]["runs"])])
    headers = ["contender", *(h for h, _, _ in own), *(f"vs {p}" for p in peers), "exact"]
    return common.format_table(headers, rows)


def plot(path: Path, report: dict[str, Any]) -> None:
    plt = common.pyplot()
    phases = [ph for ph in ("steady", "loss") if ph in report["phases"]]
    fig, axes = plt.subplots(1, len(phases), figsize=(6 * len(phases), 4), squeeze=False)
    for ax, phase in zip(axes[0], phases, strict=True):
        results = report["phases"][phase]["results"]
        for name, r in results.items():
            run = next((x for x in r["runs"] if x.get("epochs")), None)
            if run is None:
                continue
            epochs = sorted(run["epochs"], key=lambda e: e["committed_at"])
            t0 = epochs[0]["committed_at"]
            ax.plot(
                [e["committed_at"] - t0 for e in epochs],
                [e["duration_s"] for e in epochs],
                marker=".",
                label=LABELS[name],
            )
            if run.get("lost_at"):
                ax.axvline(run["lost_at"] - t0, linestyle=":", color="grey")
        ax.set_title(f"{phase}: epoch duration (first run)")
        ax.set_xlabel("s since the first commit")
        ax.set_ylabel("epoch s")
        ax.legend(fontsize=7)
    common.save_figure(fig, path)


def run_one(name: str, rnd: int, *, p: Params, run_dir: Path, settle: bool) -> dict[str, Any]:
    args = ["--contender", name, "--child-params", json.dumps(asdict(p))]
    r = CHILD.run(
        args, run_dir / f"{p.phase}-{name}-{rnd}", f"{p.phase} {name} #{rnd + 1}", settle=settle
    )
    if r.get("epochs"):
        r["figures"] = steady_figures(r, p) if p.phase == "steady" else loss_figures(r, p)
    return r


def warmup_to(p: Params, keys: int) -> int:
    """Epochs until the generator's stream has given ``keys`` distinct keys."""
    import pyarrow.compute as pc

    from workers.sources.generator import generate

    config = common.generator_config(p)
    seen: set[str] = set()
    for epoch in range(10_000):
        lo, hi = epoch * p.rows_per_epoch, (epoch + 1) * p.rows_per_epoch
        for batch in generate(config, lo, hi):
            seen.update(pc.unique(batch.column("line")).to_pylist())
        if len(seen) >= keys:
            return epoch + 1
    raise SystemExit(f"the key space {p.key_space:,} cannot give {keys:,} distinct keys")


def parent_main(args: argparse.Namespace) -> int:
    if args.quick:
        args.rows_per_epoch, args.keys, args.epochs, args.repeat = 20_000, 100_000, 6, 1
    validity, load_before = common.check_load(args.allow_load, prefix=LOG_PREFIX)
    out = common.results_path(args.out, "worker_state", args.quick)
    machine = common.machine_info()
    started = time.time()
    phases: dict[str, Any] = {}
    launches: list[dict[str, Any]] = []
    texts: list[str] = []
    wanted = ("steady", "loss") if args.phase == "both" else (args.phase,)
    with common.RunDir("worker-state-bench-", keep=args.keep, log_prefix=LOG_PREFIX) as run_dir:
        for phase in wanted:
            if phase == "steady":
                p = Params(
                    phase="steady",
                    key_space=1_000_000,
                    zipf_s=1.1,
                    rows_per_epoch=args.rows_per_epoch,
                    warmup=5,
                    epochs=args.epochs * 2,
                    after=0,
                    snapshot_every=args.snapshot_every,
                )
                names = common.parse_names(args.steady, STEADY, "contenders")
            else:
                base = Params(
                    phase="loss",
                    key_space=2 * args.keys,
                    zipf_s=0.0,
                    rows_per_epoch=2 * args.rows_per_epoch,
                    warmup=0,
                    epochs=args.epochs,
                    after=args.epochs,
                    snapshot_every=args.snapshot_every,
                )
                say(f"counting the generator's distinct keys until {args.keys:,}")
                p = Params(**{**asdict(base), "warmup": warmup_to(base, args.keys)})
                names = common.parse_names(args.loss, LOSS, "contenders")
            say(f"{phase}: {names} x {args.repeat}, {p}")
            one = functools.partial(run_one, p=p, run_dir=run_dir.path, settle=validity.valid)
            runs, phase_launches = common.run_rounds(names, args.repeat, one)
            launches += [{**x, "phase": phase} for x in phase_launches]
            figures = STEADY_FIGURES if phase == "steady" else LOSS_FIGURES
            results = {name: common.combine_runs(rs, figures) for name, rs in runs.items()}
            text = phase_table(phase, results, runs)
            texts.append(f"{phase}\n{text}")
            phases[phase] = {"parameters": asdict(p), "results": results, "table": text}
            bad = any("error" in r for rs in runs.values() for r in rs)
            run_dir.keep |= bad or not all(common.all_exact(rs) for rs in runs.values())
    report: dict[str, Any] = {
        "benchmark": "worker_state",
        "command": common.command_line(),
        **common.trust_fields(validity, load_before, launches),
        "machine": {**machine, "load_avg_at_end": [round(x, 2) for x in os.getloadavg()]},
        "parameters": {
            "repeat": args.repeat,
            "workers": "2 standalone workers of 1 core, 2 GB; the pipeline on 2 PUs",
            "snapshot_every": args.snapshot_every,
            "order": "interleaved, every contender once per round, reversed every other round",
        },
        "elapsed_s": round(time.time() - started, 1),
        "phases": phases,
    }
    text = common.with_verdict("\n\n".join(texts), report)
    report["table"] = text
    png = common.save_report(out, report, lambda path: plot(path, report), prefix=LOG_PREFIX)
    print(text)
    print(f"\nwrote {out} and {png}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phase", choices=("steady", "loss", "both"), default="both")
    parser.add_argument("--steady", default=",".join(STEADY), help="the steady phase's contenders")
    parser.add_argument("--loss", default=",".join(LOSS), help="the loss phase's contenders")
    parser.add_argument("--rows-per-epoch", type=int, default=100_000, help="steady; loss: 2x")
    parser.add_argument("--keys", type=int, default=1_600_000, help="loss: keys of state")
    parser.add_argument("--epochs", type=int, default=10, help="measured epochs (steady: 2x)")
    parser.add_argument("--snapshot-every", default="20s", help="RESCALER_SNAPSHOT_EVERY")
    common.add_trust_args(parser)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--contender", help=argparse.SUPPRESS)
    parser.add_argument("--child-params", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.contender:
        p = Params(**json.loads(args.child_params))
        work = run_native if args.contender == "native" else run_runner
        return CHILD.serve(Path(args.workdir), args.contender, lambda w: work(args.contender, p, w))
    return parent_main(args)


if __name__ == "__main__":
    sys.exit(main())
