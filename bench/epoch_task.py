"""Micro-benchmark of one PU's epoch task: the per-key path against the vectorised path.

No Spark: ``workers.epoch.run_task`` is called directly on a synthetic slice (the generator's
clickstream events, keys Zipf-distributed or uniform), as a Spark task would call it inside
mapInArrow. Each run uses a fresh store: one untimed epoch writes the keys' states, then the
timed epoch folds a second slice of as many rows into them (reading, updating and committing
existing state, which is the steady state of a stream). Operators: ``count`` (keyed by user),
and the clickstream's ``user_activity`` (by user) and ``page_stats`` (by page).

    .venv/bin/python -m bench.epoch_task                       # 200k rows, 3 repetitions
    .venv/bin/python -m bench.epoch_task --rows 20000 --allow-load --quick

The two paths run interleaved (per key, vectorised, then vectorised, per key, ...). The table
gives median [min, max] over the repetitions and whether every run of both paths left the
same store and emitted the same outputs; results go to bench/results/epoch_task.json
(epoch_task_quick.json with ``--quick``). Refuses to start when the 1-minute load average is
above 1.0 unless ``--allow-load``, which marks the result invalid.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # also runnable as `python bench/epoch_task.py`
    sys.path.insert(0, str(ROOT))

from bench._common import (  # noqa: E402
    add_trust_args,
    check_load,
    command_line,
    fmt_spread,
    format_table,
    interleaved,
    log,
    machine_info,
    results_path,
    spread,
    trust_fields,
    with_verdict,
    write_json,
)

PATHS = ("per_key", "vectorised")
OPERATORS = ("count", "user_activity", "page_stats")
DISTRIBUTIONS = {"zipf": 1.1, "uniform": 0.0}
VNODES = 256
PREFIX = "epoch_task"


def _operator(name: str) -> Any:
    from workers.operators import Count, PageStats, UserActivity

    return {"count": Count, "user_activity": UserActivity, "page_stats": PageStats}[name]()


def slices(operator: str, zipf_s: float, rows: int, key_space: int, seed: int) -> list[pa.Table]:
    """Two epochs' records as a task receives them (kind, key, seq, columns, src, vnode, ...)."""
    from workers.hashing import vnode_of
    from workers.sources.generator import GeneratorConfig, generate

    config = GeneratorConfig(kind="events", key_space=key_space, zipf_s=zipf_s, seed=seed)
    events = pa.Table.from_batches(generate(config, 0, 2 * rows), config.schema)
    key = events["page"] if operator == "page_stats" else events["user"]
    distinct = key.unique()
    vnode_of_distinct = pa.array([vnode_of(k, VNODES) for k in distinct.to_pylist()], pa.int32())
    positions = pa.compute.index_in(key, value_set=distinct)
    n = events.num_rows
    rng = np.random.default_rng(seed)
    table = pa.table(
        {
            "kind": pa.array(["rec"] * n),
            "key": key,
            "seq": events["seq"],
            "page": events["page"],
            "ts": events["ts"],
            "bytes": events["bytes"],
            "first_visit": pa.array(rng.integers(0, 2, n), pa.int64()),
            "src": pa.array(np.ones(n, np.int32)),
            "info": pa.nulls(n, pa.string()),
            "vnode": vnode_of_distinct.take(positions),
            "slot": pa.array(np.zeros(n, np.int32)),
        }
    )
    return [table.slice(0, rows), table.slice(rows, rows)]


def one_run(
    operator: str, path: str, epochs: list[pa.Table], backend: str, workdir: Path
) -> dict[str, Any]:
    """A fresh store, one untimed epoch, one timed epoch; returns the time and digests."""
    from workers.epoch import TaskSpec, run_task
    from workers.layout import pu_store
    from workers.state import checksum_items, open_store

    root = Path(tempfile.mkdtemp(prefix=f"{operator}-{path}-", dir=workdir))
    op = _operator(operator)

    def task(epoch: int, table: pa.Table) -> tuple[float, list[pa.RecordBatch]]:
        spec = TaskSpec(
            fragment="bench",
            operator=op,
            epoch=epoch,
            parallel_units=(0,),
            owned=(tuple(range(VNODES)),),
            state_root=str(root),
            backend=backend,
            terminal=False,
            vectorised=path == "vectorised",
        )
        batches = table.to_batches()
        gc.collect()
        started = time.perf_counter()
        out = list(run_task(spec, 0, iter(batches)))
        return time.perf_counter() - started, out

    task(0, epochs[0])
    seconds, out = task(1, epochs[1])
    emitted = pa.Table.from_batches(out).drop_columns(["info"])
    with open_store(backend, pu_store(root, "bench", 0), readonly=True) as store:
        state_digest = checksum_items(store.scan())
        keys = sum(s.keys for s in store.vnode_stats().values())
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, emitted.schema) as writer:
        # content, not chunking: the two paths may cut the same rows into different batches
        writer.write_table(
            emitted.filter(pa.compute.equal(emitted["kind"], "out")).combine_chunks()
        )
    return {
        "seconds": seconds,
        "rows_per_s": epochs[1].num_rows / seconds,
        "keys_in_store": keys,
        "state_digest": state_digest,
        "outputs_digest": hashlib.blake2b(sink.getvalue().to_pybytes(), digest_size=16).hexdigest(),
        "load_avg_at_launch": round(os.getloadavg()[0], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000, help="rows per epoch slice")
    parser.add_argument("--key-space", type=int, default=100_000, help="users (pages: 500)")
    parser.add_argument("--backend", choices=("lmdb", "rocksdb"), default="lmdb")
    parser.add_argument("--operators", default=",".join(OPERATORS))
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="write epoch_task_quick.json")
    parser.add_argument("--out", help="results file (default bench/results/epoch_task.json)")
    add_trust_args(parser)
    args = parser.parse_args(argv)
    validity, load_before = check_load(args.allow_load, prefix=PREFIX)
    operators = [o.strip() for o in args.operators.split(",") if o.strip()]
    unknown = set(operators) - set(OPERATORS)
    if unknown:
        raise SystemExit(f"unknown operators {sorted(unknown)}; choose from {OPERATORS}")

    cases: dict[str, dict[str, Any]] = {}
    launches: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-epoch-task-") as tmp:
        # the tasks run here: this process is their executor (workers/layout.py)
        os.environ.setdefault("RESCALER_LOCAL_DIR", str(Path(tmp) / "executor"))
        for operator in operators:
            for dist, zipf_s in DISTRIBUTIONS.items():
                case = f"{operator}/{dist}"
                epochs = slices(operator, zipf_s, args.rows, args.key_space, args.seed)
                runs: dict[str, list[dict[str, Any]]] = {p: [] for p in PATHS}
                for rnd, path in interleaved(PATHS, args.repeat):
                    run = one_run(operator, path, epochs, args.backend, Path(tmp))
                    run["round"] = rnd
                    runs[path].append(run)
                    launches.append(
                        {
                            "case": case,
                            "round": rnd,
                            "contender": path,
                            "load_avg": run["load_avg_at_launch"],
                        }
                    )
                    log(
                        f"{case} {path} round {rnd}: {run['seconds'] * 1000:,.1f} ms", prefix=PREFIX
                    )
                digests = {
                    (r["state_digest"], r["outputs_digest"]) for rs in runs.values() for r in rs
                }
                cases[case] = {
                    "operator": operator,
                    "zipf_s": zipf_s,
                    "identical": len(digests) == 1,
                    **{
                        path: {
                            "seconds": spread(r["seconds"] for r in rs),
                            "rows_per_s": spread(r["rows_per_s"] for r in rs),
                            "runs": rs,
                        }
                        for path, rs in runs.items()
                    },
                }

    report = {
        "benchmark": "epoch_task",
        "command": command_line(),
        "machine": machine_info(),
        **trust_fields(validity, load_before, launches),
        "config": {
            **vars(args),
            "vnodes": VNODES,
            "fsync": os.environ.get("RESCALER_STATE_FSYNC", "1"),
        },
        "cases": cases,
    }
    report["table"] = with_verdict(table(cases), report)
    print(report["table"])
    path = results_path(args.out, "epoch_task", args.quick)
    write_json(path, report)
    log(f"wrote {path}", prefix=PREFIX)
    return 0


def table(cases: dict[str, dict[str, Any]]) -> str:
    def ms(figure: dict[str, Any] | None) -> str:
        scaled = (
            None
            if figure is None
            else {**figure, **{k: figure[k] * 1000 for k in ("median", "min", "max")}}
        )
        return fmt_spread(scaled, ",.1f")

    speedup: Callable[[dict[str, Any]], str] = lambda c: (  # noqa: E731
        f"{c['per_key']['seconds']['median'] / c['vectorised']['seconds']['median']:.1f}x"
    )
    rows = [
        [
            case,
            ms(c["per_key"]["seconds"]),
            ms(c["vectorised"]["seconds"]),
            fmt_spread(c["per_key"]["rows_per_s"]),
            fmt_spread(c["vectorised"]["rows_per_s"]),
            speedup(c),
            "yes" if c["identical"] else "NO",
        ]
        for case, c in cases.items()
    ]
    headers = [
        "operator/keys",
        "per-key ms",
        "vectorised ms",
        "per-key rows/s",
        "vectorised rows/s",
        "speed-up",
        "identical",
    ]
    return format_table(headers, rows)


if __name__ == "__main__":
    raise SystemExit(main())
