"""Recovery partitions benchmark: snapshot and restore throughput against state size, and the
stream's epoch latency while a snapshot is written.

**Throughput** (``--keys``, default 1.6M and 16M keys of word-count state on 2 PUs). Per size,
in one process on ``local[2]``, each contender on the same stores:

* ``spark``: the distributed path (workers/recovery): the barrier's store copies, then the write
  job (one Spark task per source PU into ``--partitions`` recovery partitions), then the restore
  job onto 4 PUs (one task per target PU);
* ``driver``: the same tasks one after another in the driver, which is where the stop-start's
  snapshot and restore ran before this path existed (one core, serial);
* ``copy``: a file copy of the stores (``cp -r``), what a user would do for a backup without
  Rescaler; it cannot restore at another size, and is the floor of a physical copy.

Keys/s and MB/s count the state's keys and key+value bytes. Restores are checked: every key of
the restored stores equals the original, on the PU its vnode maps to.

**Latency while a snapshot is written** (``--stream-epochs``): the runner on the generator,
``--stream-rows`` rows per epoch over ``--stream-keys`` keys, with a snapshot every
``--snapshot-every`` epochs, against the same run without snapshots, interleaved
(``--repeat``). It reports the epoch p99 of the snapshot runs' epochs that overlapped a
snapshot (from the barrier's copy to the manifest) over the steady p99 of the runs without.

    .venv/bin/python bench/recovery.py                  # 1.6M and 16M keys; the stream part
    .venv/bin/python bench/recovery.py --quick          # 200k keys, a short stream: minutes

Prints a table, writes ``bench/results/recovery.json`` and ``.png`` (``--quick``:
``recovery_quick.*``). Runs alone: it refuses to start above a 1-minute load of 1.0.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # runnable as `python bench/recovery.py` from anywhere
    sys.path.insert(0, str(ROOT))

from bench import _common as common  # noqa: E402  (needs ROOT on sys.path first)

LOG_PREFIX = "recovery"
FRAGMENT = "word_count"
VNODES = 256
SOURCE_PUS, TARGET_PUS = [0, 1], [0, 1, 2, 3]
CHUNK = 200_000


def say(message: str) -> None:
    common.log(message, prefix=LOG_PREFIX)


def build_stores(root: Path, keys: int, backend: str, value_bytes: int = 8) -> tuple[int, int]:
    """Word-count state of ``keys`` keys on 2 PUs (vnodes by the project's hash, values the
    operator's 8-byte counts, or ``value_bytes`` long states); returns (keys, bytes)."""
    import pyarrow as pa

    from workers.hashing import vnode_of
    from workers.layout import pu_store
    from workers.pipeline.placement import VnodeMapping
    from workers.state import open_store
    from workers.state.base import ColumnUpdates, encode_key

    mapping = VnodeMapping.initial(FRAGMENT, VNODES, SOURCE_PUS)
    size = 0
    stores = {pu: open_store(backend, pu_store(root, FRAGMENT, pu)) for pu in SOURCE_PUS}
    try:
        for epoch, start in enumerate(range(0, keys, CHUNK)):
            parts: dict[int, list[bytes]] = {pu: [] for pu in SOURCE_PUS}
            for i in range(start, min(start + CHUNK, keys)):
                word = f"w{i:09d}"
                parts[mapping.mapping[vnode_of(word, VNODES)]].append(
                    encode_key(vnode_of(word, VNODES), word.encode())
                )
            for pu, batch in parts.items():
                batch.sort()
                value = struct.pack("<q", 1) if value_bytes == 8 else os.urandom(value_bytes)
                new = pa.array([value] * len(batch), pa.binary())
                updates = ColumnUpdates(
                    pa.array(batch, pa.binary()), pa.nulls(len(batch), pa.binary()), new
                )
                stores[pu].commit_columns(epoch, updates)
                size += sum(len(k) for k in batch) + value_bytes * len(batch)
            say(f"  built {min(start + CHUNK, keys):,} / {keys:,} keys")
    finally:
        for store in stores.values():
            store.close()
    return keys, size


def read_all(root: Path, backend: str, pus: list[int]) -> dict[bytes, bytes]:
    from workers.layout import pu_store
    from workers.state import open_store

    out: dict[bytes, bytes] = {}
    for pu in pus:
        with open_store(backend, pu_store(root, FRAGMENT, pu), readonly=True) as store:
            out.update(store.scan())
    return out


def run_size(
    spark: Any, workdir: Path, keys: int, backend: str, partitions: int, value_bytes: int = 8
) -> dict[str, Any]:
    """Every contender on the same stores of ``keys`` keys."""
    from workers.layout import local_root, pu_store
    from workers.recovery.format import FragmentSnapshot, SnapshotManifest
    from workers.recovery.location import RecoveryLocation, snapshot_id
    from workers.recovery.restore import restore_placements, restore_stores
    from workers.recovery.tasks import staging_path
    from workers.recovery.write_job import snapshot_stores

    state = workdir / f"state-{keys}"
    say(f"{keys:,} keys: building the stores")
    n, size = build_stores(state, keys, backend, value_bytes)
    original = read_all(state, backend, SOURCE_PUS)
    result: dict[str, Any] = {"keys": n, "bytes": size, "contenders": {}}
    for contender in ("spark", "driver", "copy"):
        say(f"{keys:,} keys: {contender}")
        if contender == "copy":
            t0 = time.perf_counter()
            shutil.copytree(local_root(state) / "stores", workdir / "copy" / "stores")
            t1 = time.perf_counter()
            shutil.rmtree(workdir / "copy")
            result["contenders"][contender] = _rates(n, size, {"snapshot_s": t1 - t0})
            continue
        runner = spark if contender == "spark" else None
        location = RecoveryLocation(workdir / f"recovery-{contender}")
        sid = snapshot_id(time.time(), 1)
        t0 = time.perf_counter()
        staged: dict[int, list[str]] = {}
        from workers.state import open_store

        for pu in SOURCE_PUS:
            with open_store(backend, pu_store(state, FRAGMENT, pu)) as store:
                dest = staging_path(local_root(state), sid, FRAGMENT, pu)
                store.checkpoint(dest)
                staged[pu] = [FRAGMENT]
        t1 = time.perf_counter()
        runs, segments = snapshot_stores(
            runner,
            location=location,
            pipeline="bench",
            snapshot=sid,
            partitions=partitions,
            backend=backend,
            stores=staged,
            state_root=state,
        )
        t2 = time.perf_counter()
        manifest = SnapshotManifest(
            snapshot_id=sid,
            pipeline="bench",
            epoch=1,
            partitions=partitions,
            backend=backend,
            taken_at=time.time(),
            duration_s=t2 - t0,
            trigger="manual",
            requested_by="bench",
            source_offset={},
            checkpoint={},
            files={},
            fragments={FRAGMENT: FragmentSnapshot(VNODES, 1, tuple(SOURCE_PUS), tuple(segments))},
            tasks=runs,
        )
        location.commit(manifest)
        target = workdir / f"restored-{contender}"
        placements = restore_placements(manifest, TARGET_PUS)
        t3 = time.perf_counter()
        restored = restore_stores(
            runner,
            location=location,
            manifest=manifest,
            pipeline_dir=target,
            backend=backend,
            placements=placements,
        )
        t4 = time.perf_counter()
        got = read_all(target, backend, TARGET_PUS)
        exact = got == original
        result["contenders"][contender] = {
            **_rates(n, size, {"copy_s": t1 - t0, "snapshot_s": t2 - t0, "restore_s": t4 - t3}),
            "snapshot_tasks": [r.to_json() for r in runs],
            "restore_tasks": [r.to_json() for r in restored],
            "exact": exact,
        }
        shutil.rmtree(target)
        shutil.rmtree(workdir / f"recovery-{contender}")
        shutil.rmtree(state / "snapshot-staging", ignore_errors=True)
        say(
            f"  {contender}: snapshot {t2 - t0:.2f}s (copy {t1 - t0:.2f}s), restore "
            f"{t4 - t3:.2f}s, exact {exact}"
        )
    shutil.rmtree(state)
    return result


def _rates(keys: int, size: int, times: dict[str, float]) -> dict[str, Any]:
    out: dict[str, Any] = {k: round(v, 3) for k, v in times.items()}
    for phase in ("snapshot", "restore"):
        seconds = times.get(f"{phase}_s")
        if seconds:
            out[f"{phase}_keys_per_s"] = round(keys / seconds)
            out[f"{phase}_mb_per_s"] = round(size / seconds / 1e6, 1)
    return out


# -- the stream while a snapshot is written ---------------------------------------------------
def run_stream(
    workdir: Path, args: argparse.Namespace, snapshots: bool, rnd: int
) -> dict[str, Any]:
    """The runner on the generator, with or without periodic snapshots; its epochs and the
    snapshots' spans."""
    from workers.recovery.location import RecoveryLocation

    name = f"{'snap' if snapshots else 'plain'}-{rnd}"
    state = workdir / name / "state"
    recovery = workdir / name / "recovery"
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_MASTER": "local[2]",
        "RESCALER_RECOVERY_DIR": str(recovery),
        "RESCALER_SNAPSHOTS_KEPT": "1000",
    }
    cmd = [
        sys.executable, "-m", "workers", "run", "--pipeline", "wordcount",
        "--state-dir", str(state), "--no-spark-ui", "--trigger-interval", "0",
        "--epochs", str(args.stream_epochs), "--rows-per-epoch", str(args.stream_rows),
        "--key-space", str(args.stream_keys), "--zipf-s", "0",
    ]  # fmt: skip
    if snapshots:
        cmd += ["--snapshot-every", str(args.snapshot_every)]
    load = [round(x, 2) for x in os.getloadavg()]
    say(f"stream run {name}: {args.stream_epochs} epochs (load {load[0]})")
    log_path = workdir / f"{name}.log"
    with open(log_path, "wb") as log:
        code = subprocess.call(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    if code != 0:
        raise SystemExit(f"the runner failed ({code}); see {log_path}")
    epochs_path = state / "wordcount" / "control" / "epochs.jsonl"
    epochs = [json.loads(line) for line in epochs_path.read_text().splitlines() if line.strip()]
    spans = []
    if snapshots:
        location = RecoveryLocation(recovery)
        for sid in location.snapshot_ids("wordcount"):
            m = location.manifest("wordcount", sid)
            spans.append(
                {"epoch": m.epoch, "start": m.taken_at, "end": m.taken_at + m.duration_s,
                 "keys": m.keys, "bytes": m.bytes, "duration_s": m.duration_s}
            )  # fmt: skip
    return {"load_avg_at_launch": load, "epochs": epochs, "snapshots": spans}


def stream_summary(runs: dict[str, list[dict[str, Any]]], warmup: int) -> dict[str, Any]:
    steady = [e["duration_s"] for r in runs["plain"] for e in r["epochs"] if e["epoch"] >= warmup]
    during: list[float] = []
    for r in runs["snapshot"]:
        for e in r["epochs"]:
            if e["epoch"] < warmup:
                continue
            end, start = e["committed_at"], e["committed_at"] - e["duration_s"]
            if any(s["start"] <= end and start <= s["end"] for s in r["snapshots"]):
                during.append(e["duration_s"])
    p99_steady = common.percentile(steady, 99)
    p99_during = common.percentile(during, 99)
    written = [s for r in runs["snapshot"] for s in r["snapshots"]]
    return {
        "steady_p99_s": p99_steady,
        "during_snapshot_p99_s": p99_during,
        "ratio": round(p99_during / p99_steady, 3) if p99_during and p99_steady else None,
        "epochs_during_snapshots": len(during),
        "snapshots": len(written),
        "snapshot_duration_median_s": common.percentile([s["duration_s"] for s in written], 50),
        "goal": "<= 1.2",
    }


def table(report: dict[str, Any]) -> str:
    rows = []
    for size in report["sizes"]:
        for name, c in size["contenders"].items():
            rows.append(
                [
                    f"{size['keys']:,}",
                    name,
                    common.fmt(c.get("snapshot_s"), ".2f"),
                    common.fmt(c.get("snapshot_keys_per_s")),
                    common.fmt(c.get("snapshot_mb_per_s"), ".1f"),
                    common.fmt(c.get("restore_s"), ".2f"),
                    common.fmt(c.get("restore_keys_per_s")),
                    common.fmt(c.get("restore_mb_per_s"), ".1f"),
                    {True: "yes", False: "NO"}.get(c.get("exact"), "-"),
                ]
            )
    text = common.format_table(
        ["keys", "path", "snapshot s", "keys/s", "MB/s", "restore s", "keys/s", "MB/s", "exact"],
        rows,
    )
    stream = report.get("stream")
    if stream:
        text += (
            f"\n\nstream while a snapshot is written: epoch p99 "
            f"{common.fmt(stream['during_snapshot_p99_s'], '.3f')} s over steady p99 "
            f"{common.fmt(stream['steady_p99_s'], '.3f')} s = {common.fmt(stream['ratio'], '.2f')}x"
            f" (goal <= 1.2x; {stream['epochs_during_snapshots']} epochs overlapped "
            f"{stream['snapshots']} snapshots)"
        )
    return text


def plot(path: Path, report: dict[str, Any]) -> None:
    plt = common.pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, style in (("spark", "o-"), ("driver", "s--")):
        for phase in ("snapshot", "restore"):
            xs = [s["keys"] for s in report["sizes"]]
            ys = [s["contenders"][name].get(f"{phase}_s") for s in report["sizes"]]
            ax.plot(xs, ys, style, label=f"{phase}, {name}")
    ax.set_xscale("log")
    ax.set_xlabel("keys of state")
    ax.set_ylabel("seconds")
    ax.set_title("snapshot and restore time against state size (2 -> 4 PUs)")
    ax.legend()
    common.save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", default="1600000,16000000", help="state sizes, comma-separated")
    parser.add_argument("--backend", default="lmdb", choices=["lmdb", "rocksdb"])
    parser.add_argument(
        "--value-bytes", type=int, default=8, help="bytes per state value (8: word counts)"
    )
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--stream-epochs", type=int, default=40)
    parser.add_argument("--stream-rows", type=int, default=100_000)
    parser.add_argument("--stream-keys", type=int, default=1_000_000)
    parser.add_argument("--snapshot-every", type=int, default=6)
    parser.add_argument("--no-stream", action="store_true", help="only the throughput part")
    common.add_trust_args(parser)
    parser.add_argument("--quick", action="store_true", help="200k keys and a short stream")
    parser.add_argument("--out", help="JSON path (the PNG goes beside it)")
    parser.add_argument("--keep", action="store_true", help="keep the run directory")
    args = parser.parse_args(argv)
    if args.quick:
        args.keys, args.stream_epochs, args.stream_rows = "200000", 14, 20_000
        args.stream_keys, args.snapshot_every, args.repeat = 100_000, 4, 1
    out = common.results_path(args.out, "recovery", args.quick)
    validity, load_before = common.check_load(args.allow_load, prefix=LOG_PREFIX)
    machine = common.machine_info()
    started = time.time()
    sizes = [int(k) for k in args.keys.split(",") if k.strip()]
    report: dict[str, Any] = {"benchmark": "recovery", "command": common.command_line()}
    with common.RunDir("recovery-bench-", keep=args.keep, log_prefix=LOG_PREFIX) as run_dir:
        from bench import _spark as shared_spark

        # the driver is the executor here: its stores, built in this process, in one directory
        os.environ.setdefault("RESCALER_LOCAL_DIR", str(run_dir.path / "executor"))
        spark = shared_spark.spark_session("rescaler-recovery-bench", run_dir.path, ())
        try:
            report["sizes"] = [
                run_size(spark, run_dir.path, n, args.backend, args.partitions, args.value_bytes)
                for n in sizes
            ]
        finally:
            spark.stop()
        launches: list[dict[str, Any]] = []
        if not args.no_stream:
            runs: dict[str, list[dict[str, Any]]] = {"plain": [], "snapshot": []}
            for rnd, name in common.interleaved(["plain", "snapshot"], args.repeat):
                run = run_stream(run_dir.path, args, name == "snapshot", rnd)
                runs[name].append(run)
                launches.append(
                    {"round": rnd, "contender": name, "load_avg": run["load_avg_at_launch"]}
                )
            report["stream"] = {**stream_summary(runs, warmup=2), "runs": runs}
        run_dir.keep |= not all(
            c.get("exact", True) for s in report["sizes"] for c in s["contenders"].values()
        )
    report.update(
        common.trust_fields(validity, load_before, launches),
        machine={**machine, "load_avg_at_end": [round(x, 2) for x in os.getloadavg()]},
        parameters={
            "keys": sizes,
            "backend": args.backend,
            "partitions": args.partitions,
            "value_bytes": args.value_bytes,
            "vnodes": VNODES,
            "parallel_units": f"{len(SOURCE_PUS)} -> {len(TARGET_PUS)}",
            "spark_master": "local[2]",
            "stream": {
                "epochs": args.stream_epochs,
                "rows_per_epoch": args.stream_rows,
                "key_space": args.stream_keys,
                "snapshot_every_epochs": args.snapshot_every,
                "repeat": args.repeat,
            },
        },
        elapsed_s=round(time.time() - started, 1),
    )
    text = common.with_verdict(table(report), report)
    report["table"] = text
    png = common.save_report(out, report, lambda p: plot(p, report), prefix=LOG_PREFIX)
    print(text)
    print(f"\nwrote {out} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
