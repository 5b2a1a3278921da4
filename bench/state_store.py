"""Micro-benchmark of the state store backends on the epoch task's access pattern.

Per epoch a task opens its store, reads the epoch's keys (Zipf-distributed over the preloaded
keys), writes every one back in a single ``commit_epoch`` with the epoch's outputs, reads the
per-vnode stats and closes the store (workers/epoch/task.py does exactly this). Besides that loop it
measures an idle open+close, a vnode's export + ingest + drop, and the disk footprint.

    .venv/bin/python -m bench.state_store            # 1M keys, 100k reads per epoch
    .venv/bin/python -m bench.state_store --quick    # seconds: a smoke run

Prints a table (with lmdb/rocksdb ratios) and writes bench/results/state_store.json
(state_store.quick.json for --quick).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # also runnable as `python bench/state_store.py`
    sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "bench" / "results" / "state_store.json"
ZIPF_S = 1.0
TRANSFER_VNODES = (0, 37, 85, 128, 170, 211, 255)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Workload:
    """Keys, values and per-epoch key sets, generated once and shared by every backend."""

    def __init__(self, keys: int, reads: int, epochs: int, vnodes: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.vnodes = vnodes
        user_keys = [b"k%07d" % i for i in range(keys)]
        # crc32 stands in for the pipeline's xxhash64: only the spread over vnodes matters here.
        self.store_keys = [(zlib.crc32(u) % vnodes).to_bytes(2, "big") + u for u in user_keys]
        self.values = self._values(rng, keys)
        # Zipf over ranks, ranks scattered over key ids, so hot keys land in every vnode.
        weights = 1.0 / np.arange(1, keys + 1, dtype=np.float64) ** ZIPF_S
        cdf = np.cumsum(weights)
        cdf /= cdf[-1]
        rank_to_id = rng.permutation(keys)
        self.epoch_keys: list[list[int]] = []
        self.records_drawn: list[int] = []
        for _ in range(epochs):
            ids, drawn = self._distinct_zipf(rng, cdf, rank_to_id, min(reads, keys))
            self.epoch_keys.append(ids)
            self.records_drawn.append(drawn)
        self.new_values = [self._values(rng, len(ids)) for ids in self.epoch_keys]
        self.outputs = [rng.bytes(16 * len(ids)) for ids in self.epoch_keys]

    @staticmethod
    def _values(rng: np.random.Generator, n: int) -> list[bytes]:
        lengths = rng.integers(8, 25, size=n)
        blob = rng.bytes(int(lengths.sum()))
        ends = np.cumsum(lengths)
        starts = ends - lengths
        return [blob[s:e] for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]

    @staticmethod
    def _distinct_zipf(
        rng: np.random.Generator, cdf: np.ndarray, rank_to_id: np.ndarray, want: int
    ) -> tuple[list[int], int]:
        """``want`` distinct key ids in first-seen order of a Zipf record stream, and how many
        records it took: a task reads each key of its batch once."""
        seen: dict[int, None] = {}
        drawn = 0
        while len(seen) < want:
            batch = rank_to_id[np.searchsorted(cdf, rng.random(max(want, 1024)))]
            for key_id in batch.tolist():
                drawn += 1
                seen.setdefault(key_id, None)
                if len(seen) == want:
                    break
        return list(seen), drawn


def disk_bytes(path: Path) -> int:
    """Allocated bytes (st_blocks), so a sparse file counts for what it really uses."""
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file())


def written_bytes() -> int | None:
    """Bytes this process has caused to be written to storage (Linux), background threads
    (RocksDB's flushes and compactions) included."""
    try:
        with open("/proc/self/io") as f:
            for line in f:
                if line.startswith("write_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


class BackendRun:
    """One backend's stores and measurements. main() interleaves the backends step by step, so
    that whatever else loads the machine weighs on both alike."""

    def __init__(self, backend: str, w: Workload, root: Path) -> None:
        self.backend = backend
        self.w = w
        self.path = root / backend / "store"
        self.target = root / backend / "target"
        self.current = list(w.values)
        self.res: dict[str, Any] = {}
        self.phases: dict[str, list[float]] = {
            k: [] for k in ("open", "get_many", "commit", "stats", "close", "task", "idle", "io")
        }
        self.moved = 0
        self.transfer: dict[str, float] = {"export": 0.0, "ingest": 0.0, "drop": 0.0}

    def preload(self, chunk: int) -> None:
        """Chunks of ``chunk`` keys per epoch into a store kept open (a stop-start restore)."""
        from workers.state import Update, open_store

        w, n = self.w, len(self.w.store_keys)
        store = open_store(self.backend, self.path)
        start = time.perf_counter()
        for epoch, lo in enumerate(range(0, n, chunk)):
            hi = min(lo + chunk, n)
            store.commit_epoch(
                epoch, [Update(w.store_keys[i], None, w.values[i]) for i in range(lo, hi)]
            )
        self.res["preload_updates_per_s"] = n / (time.perf_counter() - start)
        store.close()
        self.res["disk_after_preload_mib"] = disk_bytes(self.path) / 2**20
        log(f"{self.backend}: preload {self.res['preload_updates_per_s']:,.0f} updates/s")

    def task(self, e: int) -> None:
        """One epoch task, as workers/epoch/task.py runs it."""
        from workers.state import Update, open_store

        ids = self.w.epoch_keys[e]
        keys = [self.w.store_keys[i] for i in ids]
        news = self.w.new_values[e]
        io_start = written_bytes()
        task_start = time.perf_counter()
        store, t_open = timed(lambda: open_store(self.backend, self.path))
        applied = store.applied_epoch()
        olds, t_get = timed(lambda: store.get_many(keys))
        updates = [Update(k, o, v) for k, o, v in zip(keys, olds, news, strict=True)]
        ok, t_commit = timed(lambda: store.commit_epoch(applied + 1, updates, self.w.outputs[e]))
        assert ok, "the epoch was not committed"
        _, t_stats = timed(store.vnode_stats)
        _, t_close = timed(store.close)
        self.phases["task"].append(time.perf_counter() - task_start)
        io_end = written_bytes()
        if io_start is not None and io_end is not None:
            self.phases["io"].append(io_end - io_start)
        self.phases["open"].append(t_open)
        self.phases["get_many"].append(len(keys) / t_get)
        self.phases["commit"].append(len(keys) / t_commit)
        self.phases["stats"].append(t_stats)
        self.phases["close"].append(t_close)
        for i, v in zip(ids, news, strict=True):
            self.current[i] = v
        log(
            f"{self.backend}: epoch {e + 1}/{len(self.w.epoch_keys)} open {t_open * 1e3:.1f} ms, "
            f"get {len(keys) / t_get:,.0f}/s, commit {len(keys) / t_commit:,.0f}/s, "
            f"close {t_close * 1e3:.1f} ms"
        )

    def idle_cycle(self) -> None:
        """Open, read the marker, close: what a task pays before doing anything."""
        from workers.state import open_store

        start = time.perf_counter()
        store = open_store(self.backend, self.path)
        store.applied_epoch()
        store.close()
        self.phases["idle"].append(time.perf_counter() - start)

    def move(self, vnode: int) -> None:
        """A vnode leaving as a live step moves it: seal, export (its rows as columns into a
        file with a columnar checksum, read back), ingest that file into another store, drop."""
        from workers.rescale import transfer
        from workers.state import open_store
        from workers.storage import location

        at = location(self.target.parent)
        export = f"exports/vnode-{vnode:05d}.arrow"
        if not self.moved:  # the first call loads Arrow's IPC and compute modules: not timed
            import pyarrow as pa

            empty = pa.array([], pa.binary())
            transfer.write_export(at, export, vnode, empty, empty)
            transfer.read_export(at, export)
        with (
            open_store(self.backend, self.path) as src,
            open_store(self.backend, self.target) as dst,
        ):
            src.seal([vnode])
            held = src.vnode_stats().get(vnode)
            count = held.keys if held else 0
            manifest, t = timed(
                lambda: transfer.write_export(at, export, vnode, *src.vnode_columns(vnode, count))
            )
            self.transfer["export"] += t
            _, t = timed(lambda: transfer.ingest_export(dst, at, export))
            self.transfer["ingest"] += t
            dropped, t = timed(lambda: src.drop_vnode(vnode))
            self.transfer["drop"] += t
            assert dropped == manifest["keys"] == count, (dropped, manifest, count)
            assert dst.vnode_stats()[vnode].keys == count
            self.moved += count

    def finish(self, moved_vnodes: set[int]) -> dict[str, Any]:
        from workers.state import open_store

        res, ph = self.res, self.phases
        res["get_many_keys_per_s"] = statistics.median(ph["get_many"])
        res["commit_updates_per_s"] = statistics.median(ph["commit"])
        for name in ("open", "close", "stats", "task", "idle"):
            res[f"{name}_ms"] = statistics.median(ph[name]) * 1e3
        res["disk_after_epochs_mib"] = disk_bytes(self.path) / 2**20
        res["written_per_task_mib"] = statistics.median(ph["io"]) / 2**20 if ph["io"] else None
        for name, t in self.transfer.items():
            res[f"{name}_keys_per_s"] = self.moved / t
        res["transfer_keys"] = self.moved
        # Spot check: the store holds what the workload wrote, and nothing of the moved vnodes.
        keys = self.w.store_keys
        sample = list(range(0, len(keys), max(len(keys) // 1000, 1)))
        with open_store(self.backend, self.path, readonly=True) as store:
            got = store.get_many([keys[i] for i in sample])
        for i, value in zip(sample, got, strict=True):
            gone = int.from_bytes(keys[i][:2], "big") in moved_vnodes
            expected = None if gone else self.current[i]
            assert value == expected, f"{self.backend}: key {keys[i]!r} holds {value!r}"
        return res


ROWS = [
    # key, label, higher is better
    ("preload_updates_per_s", "preload, store kept open (updates/s)", True),
    ("get_many_keys_per_s", "get_many (keys/s, median)", True),
    ("commit_updates_per_s", "commit_epoch (updates/s, median)", True),
    ("open_ms", "open in task (ms, median)", False),
    ("close_ms", "close in task (ms, median)", False),
    ("stats_ms", "vnode_stats (ms, median)", False),
    ("task_ms", "whole task (ms/epoch, median)", False),
    ("idle_ms", "idle open+close (ms, median)", False),
    ("export_keys_per_s", "export: vnode to file, columnar (keys/s)", True),
    ("ingest_keys_per_s", "ingest: file to store, verified (keys/s)", True),
    ("drop_keys_per_s", "drop_vnode (keys/s)", True),
    ("written_per_task_mib", "written to disk per task (MiB, median)", False),
    ("disk_after_preload_mib", "disk after preload (MiB)", False),
    ("disk_after_epochs_mib", "disk after epochs (MiB)", False),
]


def fmt(value: float) -> str:
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def table(results: dict[str, dict[str, Any]]) -> str:
    backends = list(results)
    pair = "lmdb" in results and "rocksdb" in results
    head = f"{'metric':<40}" + "".join(f"{b:>14}" for b in backends)
    if pair:
        head += f"{'lmdb/rocksdb':>14}  better"
    lines = [head, "-" * len(head)]
    for key, label, higher in ROWS:
        if any(results[b].get(key) is None for b in backends):
            continue
        line = f"{label:<40}" + "".join(f"{fmt(results[b][key]):>14}" for b in backends)
        if pair:
            ratio = results["lmdb"][key] / results["rocksdb"][key]
            lmdb_wins = ratio > 1 if higher else ratio < 1
            line += f"{ratio:>14.2f}  {'lmdb' if lmdb_wins else 'rocksdb'}"
        lines.append(line)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000, help="keys preloaded")
    parser.add_argument("--reads", type=int, default=100_000, help="distinct keys per epoch")
    parser.add_argument("--epochs", type=int, default=10, help="epoch tasks per backend")
    parser.add_argument("--vnodes", type=int, default=256)
    parser.add_argument("--open-cycles", type=int, default=20)
    parser.add_argument("--backends", default="lmdb,rocksdb")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument("--dir", type=Path, default=None, help="where stores go (default: tmp)")
    parser.add_argument(
        "--out", type=Path, default=None, help=f"default {RESULTS.name} (--quick: *.quick.json)"
    )
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    if args.quick:
        args.keys, args.reads, args.epochs, args.open_cycles = 100_000, 10_000, 3, 5
    if args.out is None:
        # A smoke run must not overwrite the full-size numbers that docs/state-stores.md cites.
        args.out = RESULTS.with_suffix(".quick.json") if args.quick else RESULTS

    from workers.state import BACKENDS, fsync_enabled

    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = set(backends) - set(BACKENDS)
    if unknown:
        parser.error(f"unknown backends {sorted(unknown)}; known: {BACKENDS}")

    log(f"generating workload: {args.keys:,} keys, {args.epochs} epochs of {args.reads:,} reads")
    started = time.perf_counter()
    w = Workload(args.keys, args.reads, args.epochs, args.vnodes, args.seed)
    # Millions of workload objects would make every cyclic GC pass walk them; a Spark worker has
    # no such heap, so keep them out of the collector's way.
    gc.collect()
    gc.freeze()
    log(f"workload ready in {time.perf_counter() - started:.1f} s")

    root = Path(tempfile.mkdtemp(prefix="state-store-bench-", dir=args.dir))
    load_before = os.getloadavg()
    results: dict[str, dict[str, Any]] = {}
    try:
        runs = [BackendRun(b, w, root) for b in backends]
        for run in runs:
            log(f"{run.backend}: preloading {args.keys:,} keys")
            run.preload(max(args.reads, 1))
        for e in range(args.epochs):
            for run in runs:
                run.task(e)
        for _ in range(args.open_cycles):
            for run in runs:
                run.idle_cycle()
        moved_vnodes = sorted({v % args.vnodes for v in TRANSFER_VNODES})
        for vnode in moved_vnodes:
            for run in runs:
                run.move(vnode)
        for run in runs:
            results[run.backend] = run.finish(set(moved_vnodes))
            log(f"{run.backend}: moved {run.moved:,} keys in {len(moved_vnodes)} vnodes")
    finally:
        shutil.rmtree(root, ignore_errors=True)

    config = {
        "keys": args.keys,
        "reads_per_epoch": args.reads,
        "epochs": args.epochs,
        "vnodes": args.vnodes,
        "zipf_s": ZIPF_S,
        "records_drawn_per_epoch": statistics.mean(w.records_drawn),
        "value_bytes": "8-24 random",
        "outputs_bytes_per_epoch": 16 * args.reads,
        "fsync": fsync_enabled(),
        "quick": args.quick,
    }
    environment = {
        "python": platform.python_version(),
        "lmdb": metadata.version("lmdb"),
        "rocksdict": metadata.version("rocksdict"),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        # Other work on the machine skews absolute numbers; the interleaving keeps ratios fair.
        "loadavg_1m_before_after": [load_before[0], os.getloadavg()[0]],
    }
    report: dict[str, Any] = {"config": config, "environment": environment, "results": results}
    if "lmdb" in results and "rocksdb" in results:
        report["ratios_lmdb_over_rocksdb"] = {
            key: results["lmdb"][key] / results["rocksdb"][key]
            for key, _, _ in ROWS
            if results["lmdb"].get(key) is not None and results["rocksdb"].get(key)
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")

    print(
        f"state store benchmark: {args.keys:,} keys, {args.epochs} epochs x {args.reads:,} "
        f"distinct Zipf({ZIPF_S}) keys, {args.vnodes} vnodes, fsync={'on' if config['fsync'] else 'off'}"
    )
    print(table(results))
    log(f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
