"""Elastic workers on a real Spark standalone cluster: join, work, drain (docs/elastic-workers.md).

Each repetition, in a fresh process with its own standalone master and ``spark-class`` workers of
one core each (the local worker provider), runs the ``wordcount`` pipeline back to back and:

1. measures the steady throughput on one worker (its one PU);
2. adds a worker ("add worker"), and times it until its PU is bootstrapped (*join → ready*) and
   until an all-at-once live rescale has given it vnodes and an epoch committed work on it
   (*join → first work*);
3. measures the throughput on two workers (two PUs);
4. drains the first worker (a live all-at-once rescale off its PU), decommissions it and stops its
   process (*drain*: request → worker released);
5. checks every key against the oracle.

Throughput on two workers over one is a ratio in one run. On this 2-core machine the driver, the
master, two executors and their Python workers share two cores: the ratio shows the overhead of a
second executor more than a speed-up, and says nothing about a cluster of real machines.

    .venv/bin/python bench/elastic.py                 # 3 repetitions, 100k rows/epoch
    .venv/bin/python bench/elastic.py --quick         # 1 repetition, 10k rows/epoch

Prints a table and writes ``bench/results/elastic.json`` (``--quick``: ``elastic_quick.json``).
Nothing starts when the 1-minute load average is above 1.0, unless ``--allow-load`` (the result
is then marked invalid).
"""

from __future__ import annotations

import argparse
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

from bench import _common as common  # noqa: E402

LOG_PREFIX = "elastic"
PIPELINE = "wordcount"
FRAGMENT = "word_count"
CHILD = common.ChildRunner(Path(__file__).resolve(), LOG_PREFIX, timeout_s=1800)


def say(message: str) -> None:
    common.log(message, prefix=LOG_PREFIX)


@dataclass(frozen=True)
class Params:
    rows_per_epoch: int
    key_space: int
    zipf_s: float
    epochs: int  # measured epochs on one worker, then on two
    vnodes: int
    seed: int = 7


def rows_per_s(reports: list[Any]) -> float | None:
    """Rows over the wall time between the first and the last commit (back-to-back epochs)."""
    if len(reports) < 2:
        return None
    span = reports[-1].committed_at - reports[0].committed_at
    return sum(r.rows for r in reports[1:]) / span if span > 0 else None


def run_child(p: Params, workdir: Path) -> dict[str, Any]:
    from workers.config import RunnerConfig
    from workers.control import LocalControl
    from workers.oracle import compare, expected_from_generator
    from workers.provider import LocalMaster, LocalProvider
    from workers.readout import iter_state
    from workers.rescale.local import rescale
    from workers.rescale.protocol import OperationRequest
    from workers.runner import PipelineRunner

    master = LocalMaster(workdir / "spark")
    master.start()
    provider = LocalProvider(master.url, workdir / "spark" / "workers", memory="1g")
    out: dict[str, Any] = {}
    try:
        provider.add(1)
        config = RunnerConfig(
            pipeline=PIPELINE,
            words_per_line=1,
            key_space=p.key_space,
            zipf_s=p.zipf_s,
            seed=p.seed,
            rows_per_epoch=p.rows_per_epoch,
            trigger_interval_s=0,
            spark_ui=False,
            state_dir=workdir / "state",
            initial_pus=1,
            vnodes=p.vnodes,
            spark_master=master.url,
        )
        control = LocalControl(config.pipeline_dir / "control")
        epochs = common.Epochs()
        runner = PipelineRunner(config, control, on_epoch=epochs)
        running = threading.Event()

        def workers() -> dict[str, Any]:
            return {w.name: w for w in control.workers()}

        def until(predicate: Any, timeout: float, what: str) -> None:
            deadline = time.monotonic() + timeout
            while not predicate():
                if not running.is_set():
                    raise RuntimeError(f"the runner stopped before {what}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"timed out waiting for {what}")
                time.sleep(0.05)

        def measure(label: str) -> float | None:
            start = epochs.count() + 2  # two epochs to settle after a change
            epochs.wait_count(start + p.epochs, 600, label, running.is_set)
            window = epochs.rows[start : start + p.epochs]
            rate = rows_per_s(window)
            say(f"{label}: {rate:,.0f} rows/s over {len(window)} epochs")
            return rate

        def live(change: dict[str, list[int]]) -> dict[str, Any]:
            request = OperationRequest.parse(
                {
                    "changes": {FRAGMENT: change},
                    "strategy": "live",
                    "granularity": "all_at_once",
                }
            )
            tick = rescale(config.pipeline_dir, request, timeout_s=600).to_json()
            if tick["status"] != "completed":
                raise RuntimeError(f"rescale {change} ended {tick['status']}: {tick.get('error')}")
            return tick

        def control_loop() -> None:
            try:
                epochs.wait(lambda r: True, 300, "the first epoch", running.is_set)
                out["one_worker_rows_per_s"] = measure("one worker")
                added, added_at = time.monotonic(), time.time()
                provider.add(1)
                until(
                    lambda: (
                        (w := workers().get("w2")) is not None
                        and w.alive
                        and w.bootstrapped_epoch >= 0
                    ),
                    120,
                    "the second worker",
                )
                out["join_ready_s"] = round(time.monotonic() - added, 2)
                say(f"join: w2 ready {out['join_ready_s']}s after add worker")
                new_pu = workers()["w2"].parallel_units[0]
                live({"added_parallel_units": [new_pu]})
                first = epochs.wait(
                    lambda r: any(x.pu == new_pu and x.rows for x in r.per_pu),
                    120,
                    "the first epoch of work on the new PU",
                    running.is_set,
                )
                out["join_to_first_work_s"] = round(first.committed_at - added_at, 2)
                say(f"join: first work on PU {new_pu} {out['join_to_first_work_s']}s after add")
                out["two_workers_rows_per_s"] = measure("two workers")
                drain = time.monotonic()
                w1 = workers()["w1"]
                live({"removed_parallel_units": list(w1.parallel_units)})
                command = control.submit("worker.decommission", {"worker": "w1"})
                until(lambda: control.command_status(command) is not None, 120, "decommission")
                status = control.command_status(command)
                if status is None or status[0] != "done":
                    raise RuntimeError(f"decommission of w1: {status}")
                provider.release(w1)
                out["drain_s"] = round(time.monotonic() - drain, 2)
                say(f"drain: w1 drained, decommissioned and released in {out['drain_s']}s")
                after = epochs.count()
                epochs.wait_count(after + 3, 120, "3 more epochs", running.is_set)
                tasks = [x for r in epochs.rows for x in r.per_pu if x.fragment == FRAGMENT]
                home = {pu: w.executor_id for w in control.workers() for pu in w.parallel_units}
                home.update({0: w1.executor_id})
                out["locality"] = {
                    "tasks": len(tasks),
                    "on_home_executor": sum(1 for t in tasks if home.get(t.pu) == t.executor),
                }
            except Exception as exc:
                out["error"] = repr(exc)
                say(f"failed: {exc!r}")
            finally:
                runner.request_stop()

        thread = threading.Thread(target=control_loop, daemon=True)
        running.set()
        thread.start()
        try:
            runner.run()
        finally:
            running.clear()
            thread.join(timeout=60)
        end = epochs.rows[-1].source_offset.get("offset") if epochs.rows else 0
        actual = {
            row["key"]: int(row["value"])
            for row in iter_state(config.state_dir, PIPELINE, FRAGMENT, backend=config.backend)
        }
        expected = expected_from_generator(PIPELINE, common.generator_config(p), int(end or 0))
        problems = compare(expected.state[FRAGMENT], actual)
        out["verification"] = {"exact": not problems, "keys": len(actual), "problems": problems}
        out["epochs"] = [
            {
                "epoch": r.epoch,
                "rows": r.rows,
                "committed_at": r.committed_at,
                "duration_s": r.duration_s,
                "per_pu": [[x.pu, x.rows, x.executor] for x in r.per_pu],
            }
            for r in epochs.rows
        ]
        return out
    finally:
        provider.stop_all()
        master.stop()


FIGURES: common.Figures = {
    "join_ready_s": lambda r: r.get("join_ready_s"),
    "join_to_first_work_s": lambda r: r.get("join_to_first_work_s"),
    "drain_s": lambda r: r.get("drain_s"),
    "one_worker_rows_per_s": lambda r: r.get("one_worker_rows_per_s"),
    "two_workers_rows_per_s": lambda r: r.get("two_workers_rows_per_s"),
    "two_over_one": lambda r: (
        r["two_workers_rows_per_s"] / r["one_worker_rows_per_s"]
        if r.get("two_workers_rows_per_s") and r.get("one_worker_rows_per_s")
        else None
    ),
    "locality_share": lambda r: (
        r["locality"]["on_home_executor"] / r["locality"]["tasks"]
        if r.get("locality", {}).get("tasks")
        else None
    ),
}


def table(h: dict[str, Any], runs: list[dict[str, Any]]) -> str:
    rows = [
        ["add worker → its PU bootstrapped (s)", common.fmt_spread(h["join_ready_s"], ".1f")],
        [
            "add worker → first epoch of work on it (s)",
            common.fmt_spread(h["join_to_first_work_s"], ".1f"),
        ],
        ["drain + decommission + release a worker (s)", common.fmt_spread(h["drain_s"], ".1f")],
        ["rows/s on one worker", common.fmt_spread(h["one_worker_rows_per_s"])],
        ["rows/s on two workers", common.fmt_spread(h["two_workers_rows_per_s"])],
        ["two workers / one (same run)", common.fmt_spread(h["two_over_one"], ".2f", "x")],
        ["PU tasks on their home executor", common.fmt_spread(h["locality_share"], ".0%")],
        ["exact (every run)", common.exact_cell(runs)],
    ]
    return common.format_table(["figure", "median [min, max]"], rows)


def parent_main(args: argparse.Namespace) -> int:
    if args.quick:
        args.rows_per_epoch, args.key_space, args.epochs, args.repeat = 10_000, 50_000, 5, 1
    validity, load_before = common.check_load(args.allow_load, prefix=LOG_PREFIX)
    p = Params(
        rows_per_epoch=args.rows_per_epoch,
        key_space=args.key_space,
        zipf_s=args.zipf_s,
        epochs=args.epochs,
        vnodes=args.vnodes,
    )
    out = common.results_path(args.out, "elastic", args.quick)
    machine = common.machine_info()
    started = time.time()
    runs: list[dict[str, Any]] = []
    launches: list[dict[str, Any]] = []
    with common.RunDir("elastic-bench-", keep=args.keep, log_prefix=LOG_PREFIX) as run_dir:
        for rnd in range(args.repeat):
            r = CHILD.run(
                ["--child-params", json.dumps(asdict(p))],
                run_dir.path / f"run-{rnd}",
                f"run #{rnd + 1}",
                settle=validity.valid,
            )
            launches.append(
                {"round": rnd, "contender": "elastic", "load_avg": r.get("load_avg_at_launch")}
            )
            runs.append(r)
        run_dir.keep |= any("error" in r for r in runs) or not common.all_exact(runs)
    combined = common.combine_runs(runs, FIGURES)
    text = common.with_verdict(
        table(combined["headline"], runs),
        {
            "valid": validity.valid,
            "invalid_reason": validity.reason,
            "load": {"before_start": load_before},
        },
    )
    report = {
        "benchmark": "elastic",
        "command": common.command_line(),
        **common.trust_fields(validity, load_before, launches),
        "machine": {**machine, "load_avg_at_end": [round(x, 2) for x in os.getloadavg()]},
        "parameters": {**asdict(p), "repeat": args.repeat, "worker_cores": 1, "pipeline": PIPELINE},
        "elapsed_s": round(time.time() - started, 1),
        "note": (
            "two workers / one: on a 2-core machine the driver, the master, both executors and "
            "their Python workers share two cores, so the ratio shows a second executor's "
            "overhead more than a speed-up"
        ),
        "table": text,
        "results": combined,
    }
    common.write_json(out, report)
    print(text)
    print(f"\n{report['note']}\nwrote {out}")
    return 0 if not any("error" in r for r in runs) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows-per-epoch", type=int, default=100_000)
    parser.add_argument("--key-space", type=int, default=500_000)
    parser.add_argument("--zipf-s", type=float, default=0.0)
    parser.add_argument("--epochs", type=int, default=10, help="measured epochs per phase")
    parser.add_argument("--vnodes", type=int, default=64)
    common.add_trust_args(parser)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--child-params", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_params:
        p = Params(**json.loads(args.child_params))
        return CHILD.serve(Path(args.workdir), "elastic", lambda w: run_child(p, w))
    return parent_main(args)


if __name__ == "__main__":
    sys.exit(main())
