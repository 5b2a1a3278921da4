"""Benchmark: a real broker against the built-in generator, in the same run.

Two questions an operator asks before moving a pipeline onto NATS JetStream:

1. **Throughput.** Records read from JetStream and folded, at ``--rows-per-epoch`` records per
   epoch, against the generator source feeding the same pipeline the same records (wordcount,
   one word per line, Zipf keys): rows/s over the epochs after the warm-up, ratio
   JetStream / generator. The stream is filled before the runs (the feeder's time is not
   counted); every run reads it from the start, so both contenders fold the same records.
2. **A rescale on an idle stream.** Once each run has read everything, the stream is idle; a live
   scale-out (2 → 3 PUs) is requested and timed to completion. Neither source knows anything of
   barriers (the runner's control stream forces them), so the two times should be level.

Each run is a fresh process with a fresh state directory; runs are interleaved (A B, B A, ...),
the load average is recorded at every launch, and every run's final state is compared with the
oracle (Counter of the published words). Prints a table and writes ``bench/results/sources.json``
and ``.png``.

    python bench/sources.py                       # 200k rows/epoch, 1 + 4 epochs, 2 rounds
    python bench/sources.py --quick               # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import _common as common

PREFIX = "sources"
CONTENDERS = ("generator", "jetstream")
NATS_URL = os.environ.get("RESCALER_NATS_URL", "nats://127.0.0.1:4222")


@dataclass(frozen=True)
class Workload:
    rows_per_epoch: int
    epochs: int  # measured epochs, after one warm-up epoch
    key_space: int
    zipf_s: float
    seed: int

    @property
    def total_epochs(self) -> int:
        return self.epochs + 1

    @property
    def rows(self) -> int:
        return self.rows_per_epoch * self.total_epochs

    def generator(self) -> Any:
        from workers.sources.generator import GeneratorConfig

        return GeneratorConfig(
            kind="lines",
            key_space=self.key_space,
            zipf_s=self.zipf_s,
            seed=self.seed,
            words_per_line=1,
        )


def say(message: str) -> None:
    common.log(message, prefix=PREFIX)


def fill_stream(w: Workload, stream: str) -> float:
    """Publish the workload into a fresh stream; returns the seconds it took."""
    from workers.natsio import close, connect
    from workers.sources.jetstream_feed import feed, generated, generated_ids

    async def drop() -> None:
        nc = await connect(NATS_URL)
        try:
            await nc.jetstream().delete_stream(stream)
        except Exception:
            pass
        finally:
            await close(nc)

    asyncio.run(drop())
    config = w.generator()
    started = time.perf_counter()
    shown = [0]

    def progress(sent: int, stored: int) -> None:
        if sent - shown[0] >= 200_000:
            shown[0] = sent
            say(f"feeding {stream}: {sent:,}/{w.rows:,}")

    stored = feed(
        NATS_URL,
        stream,
        f"{stream.lower()}.lines",
        generated(config, 0, w.rows),
        msg_ids=generated_ids(config, 0, w.rows),
        progress=progress,
    )
    if stored != w.rows:
        raise SystemExit(f"the stream stored {stored} records, not {w.rows}")
    return time.perf_counter() - started


def run_child(contender: str, w: Workload, stream: str, workdir: Path) -> dict[str, Any]:
    """One contender in this (fresh) process: run until every record is folded, time the epochs,
    then a live scale-out on the idle stream; the final state against the oracle."""
    from workers.config import RunnerConfig
    from workers.control import EpochReport, LocalControl
    from workers.oracle import generator_records
    from workers.readout import iter_state
    from workers.rescale.local import rescale
    from workers.rescale.protocol import OperationRequest
    from workers.runner import PipelineRunner

    config = RunnerConfig(
        pipeline="wordcount",
        source="generator" if contender == "generator" else f"nats:{stream}",
        nats_url=NATS_URL,
        sink="files",
        words_per_line=1,
        key_space=w.key_space,
        zipf_s=w.zipf_s,
        seed=w.seed,
        rows_per_epoch=w.rows_per_epoch,
        trigger_interval_s=0,
        spark_ui=False,
        state_dir=workdir / "state",
        initial_pus=2,
        parallel_units=4,
        spark_master="local[2]",
        source_rows=w.rows,  # the generator, like the filled stream, then goes idle
    )
    reports: list[dict[str, Any]] = []

    def on_epoch(report: EpochReport) -> None:
        reports.append({"epoch": report.epoch, "rows": report.rows, "at": time.time()})
        if report.rows:
            say(f"{contender}: epoch {report.epoch} {report.rows} rows")

    control = LocalControl(config.pipeline_dir / "control")
    runner = PipelineRunner(config, control, on_epoch=on_epoch)
    result: dict[str, Any] = {}

    def drive() -> None:
        deadline = time.monotonic() + 1200
        while sum(r["rows"] for r in reports) < w.rows and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(2.0)  # idle now: nothing left to read
        request = OperationRequest.parse(
            {
                "changes": {"word_count": {"added_parallel_units": [2]}},
                "strategy": "live",
                "granularity": "all_at_once",
            }
        )
        started = time.perf_counter()
        outcome = rescale(config.pipeline_dir, request, timeout_s=600).to_json()
        result["idle_rescale_s"] = round(time.perf_counter() - started, 3)
        result["idle_rescale_status"] = outcome["status"]
        control.submit("stop")

    threading.Thread(target=drive, daemon=True).start()
    runner.run()

    data = [r for r in reports if r["rows"]]
    measured = data[1:]  # after the warm-up epoch
    rows = sum(r["rows"] for r in measured)
    seconds = measured[-1]["at"] - data[0]["at"] if len(measured) >= 1 else 0.0
    expected = Counter(r["line"] for r in generator_records(w.generator(), w.rows))
    state = {
        row["key"]: int(row["value"])
        for row in iter_state(config.state_dir, "wordcount", "word_count")
    }
    return {
        "contender": contender,
        "rows_measured": rows,
        "seconds": round(seconds, 3),
        "rows_per_s": round(rows / seconds, 1) if seconds else None,
        "epochs_with_rows": len(data),
        **result,
        "verification": {"exact": state == dict(expected), "keys": len(state)},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows-per-epoch", type=common.positive_int, default=200_000)
    parser.add_argument("--epochs", type=common.positive_int, default=4, help="measured epochs")
    parser.add_argument("--key-space", type=common.positive_int, default=100_000)
    parser.add_argument("--zipf-s", type=float, default=1.1)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--quick", action="store_true", help="20k rows/epoch, 2 epochs, 1 round")
    parser.add_argument("--out", help="JSON path (default bench/results/sources.json)")
    parser.add_argument("--keep", action="store_true", help="keep the runs' directories")
    parser.add_argument("--child", choices=CONTENDERS, help=argparse.SUPPRESS)
    parser.add_argument("--stream", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    common.add_trust_args(parser)
    parser.set_defaults(repeat=2)
    args = parser.parse_args(argv)
    if args.quick:
        args.rows_per_epoch, args.epochs, args.repeat = 20_000, 2, 1
    w = Workload(args.rows_per_epoch, args.epochs, args.key_space, args.zipf_s, args.seed)
    child = common.ChildRunner(Path(__file__).resolve(), PREFIX, timeout_s=1800)
    if args.child:
        return child.serve(
            args.workdir, args.child, lambda d: run_child(args.child, w, args.stream, d)
        )

    validity, load = common.check_load(args.allow_load, prefix=PREFIX)
    stream = "RESCALER_BENCH_SOURCES"
    say(f"filling {stream} with {w.rows:,} records (not timed against either contender)")
    feed_s = fill_stream(w, stream)
    say(f"filled in {feed_s:.1f} s ({w.rows / feed_s:,.0f} records/s)")
    base = [
        "--rows-per-epoch", str(w.rows_per_epoch), "--epochs", str(w.epochs),
        "--key-space", str(w.key_space), "--zipf-s", str(w.zipf_s), "--seed", str(w.seed),
        "--stream", stream,
    ]  # fmt: skip
    with common.RunDir("rescaler-bench-sources-", keep=args.keep, log_prefix=PREFIX) as rundir:

        def run_one(name: str, rnd: int) -> dict[str, Any]:
            workdir = rundir.path / f"{name}-{rnd}"
            return child.run([*base, "--child", name], workdir, name, settle=validity.valid)

        runs, launches = common.run_rounds(CONTENDERS, args.repeat, run_one)
        if any("error" in r for rs in runs.values() for r in rs):
            rundir.keep = True
    figures: common.Figures = {
        "rows_per_s": lambda r: r.get("rows_per_s"),
        "idle_rescale_s": lambda r: r.get("idle_rescale_s"),
    }
    summary = {name: common.combine_runs(rs, figures)["headline"] for name, rs in runs.items()}

    def median(name: str, figure: str) -> float | None:
        spread = summary[name].get(figure) or {}
        value = spread.get("median")
        return float(value) if value is not None else None

    gen, js = median("generator", "rows_per_s"), median("jetstream", "rows_per_s")
    gen_idle, js_idle = median("generator", "idle_rescale_s"), median("jetstream", "idle_rescale_s")
    ratios = {
        "jetstream_over_generator_rows_per_s": round(js / gen, 3) if js and gen else None,
        "jetstream_over_generator_idle_rescale_s": (
            round(js_idle / gen_idle, 3) if js_idle and gen_idle else None
        ),
    }
    rows = [
        [
            name,
            common.fmt_spread(summary[name].get("rows_per_s")),
            common.fmt_spread(summary[name].get("idle_rescale_s"), ",.2f", " s"),
            common.exact_cell(runs[name]),
        ]
        for name in CONTENDERS
    ]
    table = common.format_table(["source", "rows/s", "idle-stream rescale", "exact"], rows)
    table += (
        f"\nJetStream / generator: rows/s {ratios['jetstream_over_generator_rows_per_s']}x, "
        f"idle rescale time {ratios['jetstream_over_generator_idle_rescale_s']}x"
    )
    report = {
        "benchmark": "sources",
        "command": common.command_line(),
        **common.trust_fields(validity, load, launches),
        "machine": common.machine_info(),
        "workload": {**w.__dict__, "pipeline": "wordcount", "words_per_line": 1},
        "feed_s": round(feed_s, 2),
        "summary": summary,
        "ratios": ratios,
        "runs": runs,
    }
    report["table"] = common.with_verdict(table, report)
    out = common.results_path(args.out, "sources", args.quick)

    def plot(png: Path) -> None:
        plt = common.pyplot()
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
        for ax, figure, title in (
            (axes[0], "rows_per_s", "rows/s folded (higher is better)"),
            (axes[1], "idle_rescale_s", "idle-stream live scale-out, s"),
        ):
            for i, name in enumerate(CONTENDERS):
                values = [float(r[figure]) for r in runs[name] if r.get(figure) is not None]
                ax.scatter([i] * len(values), values, label=name)
                if values:
                    ax.bar(i, sorted(values)[len(values) // 2], alpha=0.3)
            ax.set_xticks(range(len(CONTENDERS)), CONTENDERS)
            ax.set_title(title)
        common.save_figure(fig, png)

    common.save_report(out, report, plot, prefix=PREFIX)
    print(report["table"])
    say(f"wrote {out}")
    return 0 if all(common.all_exact(rs) for rs in runs.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
