"""Live rescale benchmark: a 2→4 scale-out of ≥ 1M keys of state while the stream keeps running.

One workload (``count per key``: the ``wordcount`` pipeline with one word per line, keys from the
project's deterministic generator) is warmed up until its state holds ``--keys`` keys, runs
``--steady-epochs`` epochs to measure the steady state, then scales out from 2 to 4 parallel units
by one of these strategies, each in its own fresh subprocess and state directory (no JVM, Python
worker, store or disk cache is shared between strategies):

* ``fluid``       — live, epoch-aligned ICADD, one vnode per step (``--fluid-in-flight`` steps
  in flight, so a 128-vnode move finishes in minutes rather than tens of minutes);
* ``fluid_cut``   — fluid with ``max_keys_per_step`` at ``--key-cap`` (a quarter of a vnode's
  keys by default): each vnode moves key range by key range, only the range in flight held
  (not among the defaults; its goal compares its hottest vnode's held records per epoch with
  fluid's in the same round);
* ``fluid_hot_first``, ``fluid_hot_last``, ``fluid_by_vnode`` and the same of ``batched`` —
  fluid or batched with the steps ordered by the vnodes' measured load
  (``granularity.hot_vnodes``: the hottest first, as plain fluid and batched do by default,
  or last) or by vnode (null); not among the defaults: they answer Meces' question, which order
  keeps latency lower;
* ``batched``     — live, ``--batch-vnodes`` vnodes per step, ``--batched-in-flight`` in flight;
* ``all_at_once`` — live, every vnode of a (source, target) pair in one step, all in flight;
* ``stop_start``  — the runner drains at a barrier, snapshots into recovery partitions and
  restores at the new size (the stream waits for all of it);
* ``spark_tws``   — Spark's own route for a ``transformWithState`` query holding the same
  state (RocksDB store, 2 state partitions): wait for the last batch to commit, stop the query,
  ``spark._streamingCheckpointManager.repartition(checkpoint, 4)`` (private, experimental in
  Spark 4.2+, RocksDB only), restart it and wait for its first batch;
* ``spark_native`` — the same with ``groupBy(key).count()`` (by default Spark's route is this
  one, the faster of the two; ``spark_tws`` is optional).

Per strategy it reports (the definitions are also in the JSON's ``legend``):

* downtime: the longest interval during the operation in which non-moving keys' records were not
  committed (the longest gap between epoch commits), minus the steady p99 of that gap, measured
  before the operation in the same run (0: zero downtime);
* non-moving keys: max and p99 epoch latency (the runner's ``duration_s`` of each epoch that ran
  during the operation) divided by the steady-state p99. Records of vnodes not in transit are
  applied in the epoch they arrive (invariant I4), so their latency is that epoch's duration;
* moving keys: extra delay of held records, in epochs (``acquire_epoch - collect_epoch``) and in
  seconds (commit of the acquire epoch minus commit of the collect epoch: the records of the
  collect epoch would have been applied at its commit), max over steps;
* total duration (request to completed), keys moved, keys moved per second (over the total
  duration, and over the export time alone: the union of the steps' collecting→exported spans);
* the CPU profile (``cpu``, runner strategies): the cores the steady epochs keep busy and their
  CPU per row, the operation's CPU beyond the stream's for as many rows, and its slowest epoch's
  gap against its CPU floor (busy CPU-seconds over the cores), by role (the driver's Python, the
  JVM's compiler, collector and task threads, the Python workers); the driver JVM's options
  are ``SPARK_SUBMIT_OPTS``, recorded in the report;
* exact: after the operation the stream runs ``--post-epochs`` more epochs and stops; every key
  of the state is compared with ``workers.oracle`` (and, for the runner, each key must sit on
  the PU its vnode maps to, once).

Strategies run ``--repeat`` times (3), interleaved: each round runs every strategy once, the
order reversed in every other round, so that the drifting load of a shared machine falls on all
of them alike. Each figure is the median with [min, max] over the runs; exact means every run's
state was exact, and a goal is met only when every run met it. Nothing starts when the 1-minute
load average is above 1.0, unless ``--allow-load``: then the result is marked invalid
(``"valid": false`` in the JSON, ``INVALID`` over the table).

    .venv/bin/python bench/rescale.py                  # full: 2M-key space, ≥ 1M keys, 200k rows
    .venv/bin/python bench/rescale.py --quick          # ~100k keys, 20k rows/epoch, 32 vnodes
    .venv/bin/python bench/rescale.py --strategies fluid,spark_tws --keep
    .venv/bin/python bench/rescale.py --cluster --keys 1600000 --value-bytes 1024 \
        --strategies all_at_once                      # between two executors' own disks

``--cluster`` runs the runner's strategies on a Spark standalone cluster of two one-core
workers, each with a disk of its own and two PUs (PUs 0 and 1 on the first, 2 and 3 on the
second), with the durable location in moto's S3: the 2→4 scale-out moves half of the state from
the first executor's disk to the second's through the object store.

Prints a table, writes ``bench/results/rescale.json`` and ``bench/results/rescale.png``
(``--quick``: ``rescale_quick.*``). Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any, cast

import psutil

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # runnable as `python bench/rescale.py` from anywhere
    sys.path.insert(0, str(ROOT))

from bench import _common as common  # noqa: E402  (needs ROOT on sys.path first)
from bench import _spark as shared_spark  # noqa: E402
from bench.processors import PADDED_VALUE_BYTES  # noqa: E402

LOG_PREFIX = "rescale"
FRAGMENT = "word_count"
PIPELINE = "wordcount"
# the same records and counts with 1 KB states (--value-bytes): bench.processors.PaddedCount
PADDED_PIPELINE = "bench.processors:build_padded"

# fluid and batched with their steps in each order of granularity.hot_vnodes: the hottest
# vnodes first (the default, as plain fluid and batched), last, or by vnode (null)
HOT_ORDERED: dict[str, tuple[str, str | None]] = {
    f"{base}_{name}": (base, order)
    for base in ("fluid", "batched")
    for name, order in (("hot_first", "first"), ("hot_last", "last"), ("by_vnode", None))
}
LIVE = ("fluid", "fluid_cut", "batched", "all_at_once", *HOT_ORDERED)
RUNNER_STRATEGIES = (*LIVE, "stop_start")
SPARK_STRATEGIES = ("spark_tws", "spark_native")
STRATEGIES = (*RUNNER_STRATEGIES, *SPARK_STRATEGIES)
# Spark's route for the goal "live all-at-once vs stop + offline repartition + restart" is the
# native aggregation's: it is the faster of Spark's two (the repartition call is the same), and
# transformWithState's warm-up to 1M keys at 200k rows/epoch alone takes about 25 min a run.
DEFAULT_STRATEGIES = ("fluid", "batched", "all_at_once", "stop_start", "spark_native")
LABELS = {
    "fluid": "fluid (live)",
    "fluid_cut": "fluid, key-capped (live)",
    **{
        name: f"{base}, {f'hottest {order}' if order else 'by vnode'} (live)"
        for name, (base, order) in HOT_ORDERED.items()
    },
    "batched": "batched (live)",
    "all_at_once": "all-at-once (live)",
    "stop_start": "stop-start",
    "spark_tws": "Spark TWS repartition",
    "spark_native": "Spark groupBy.count repartition",
}
PUS_BEFORE, PUS_AFTER = 2, 4
OPERATION_TIMEOUT_S = 3600.0


def say(message: str) -> None:
    common.log(message, prefix=LOG_PREFIX)


# every run of a contender: this script again, in a fresh process
CHILD = common.ChildRunner(Path(__file__).resolve(), LOG_PREFIX, timeout_s=2 * 3600)


@dataclass(frozen=True)
class Params:
    """Everything that defines the records, the state and the operation."""

    key_space: int
    zipf_s: float
    rows_per_epoch: int
    target_keys: int
    warmup_epochs: int  # epochs until the state holds target_keys keys (computed by the parent)
    steady_epochs: int
    post_epochs: int
    vnodes: int
    fluid_in_flight: int
    batch_vnodes: int
    batched_in_flight: int
    seed: int = 7
    # 8: the count's own encoding (9 bytes); larger: each state padded to it (bench.processors)
    value_bytes: int = 8
    # fluid_cut's max_keys_per_step: a vnode over it moves key range by key range
    key_cap: int = 0
    # on a standalone cluster of two workers with disks of their own (--cluster)
    cluster: bool = False

    @property
    def pipeline(self) -> str:
        return PIPELINE if self.value_bytes <= 8 else PADDED_PIPELINE

    @property
    def pre_epochs(self) -> int:
        return self.warmup_epochs + self.steady_epochs

    def generator_options(self, max_rows: int) -> dict[str, str]:
        """The generator's options exactly as the runner passes them for ``wordcount``."""
        return common.generator_options(self, max_rows, pages=500)

    def granularity(self, strategy: str) -> dict[str, Any] | str:
        if strategy == "fluid":
            return {"vnodes_per_step": 1, "steps_in_flight": self.fluid_in_flight}
        if strategy in HOT_ORDERED:
            base, order = HOT_ORDERED[strategy]
            return {**cast(dict[str, Any], self.granularity(base)), "hot_vnodes": order}
        if strategy == "fluid_cut":
            return {
                "vnodes_per_step": 1,
                "steps_in_flight": self.fluid_in_flight,
                "max_keys_per_step": self.key_cap,
            }
        if strategy == "batched":
            return {"vnodes_per_step": self.batch_vnodes, "steps_in_flight": self.batched_in_flight}
        return "all_at_once"  # stop_start ignores it


def request_body(strategy: str, p: Params) -> dict[str, Any]:
    return {
        "changes": {FRAGMENT: {"added_parallel_units": list(range(PUS_BEFORE, PUS_AFTER))}},
        "strategy": "stop_start" if strategy == "stop_start" else "live",
        "granularity": p.granularity(strategy),
    }


# -- the oracle ------------------------------------------------------------------------------------
def distinct_keys_per_epoch(p: Params, target: int, then: int, limit: int = 10_000) -> list[int]:
    """Distinct keys after each epoch of the stream, until ``then`` epochs after the state
    first holds ``target`` keys (or ``limit`` epochs)."""
    import pyarrow.compute as pc

    from workers.sources.generator import generate

    config = common.generator_config(p)
    seen: set[str] = set()
    counts: list[int] = []
    reached: int | None = None
    for epoch in range(limit):
        lo, hi = epoch * p.rows_per_epoch, (epoch + 1) * p.rows_per_epoch
        for batch in generate(config, lo, hi):
            seen.update(pc.unique(batch.column("line")).to_pylist())
        counts.append(len(seen))
        if reached is None and len(seen) >= target:
            reached = epoch
        if reached is not None and epoch >= reached + then:
            break
    return counts


def verify(p: Params, end_offset: int, actual: dict[str, int], dupes: int) -> dict[str, Any]:
    """Every key of the state against ``workers.oracle`` over the records [0, end_offset)."""
    from workers.oracle import expected_from_generator

    say(f"oracle: expected state of the first {end_offset:,} records")
    expected = expected_from_generator(PIPELINE, common.generator_config(p), end_offset)
    return {
        "end_offset": end_offset,
        **common.compare_counts(expected.state[FRAGMENT], actual, dupes),
    }


# -- child: the rescaler's runner ----------------------------------------------------------------
class EpochLog:
    """The runner's committed epochs, appended from its ``on_epoch`` callback (inside the epoch's
    ``foreachBatch``, so it only copies a few numbers, reads the CPU counters and logs a
    line)."""

    def __init__(self, strategy: str) -> None:
        self.strategy = strategy
        self.rows: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self.runner: Any = None  # its last_timings are the epoch's, when it calls back

    def __call__(self, report: Any) -> None:
        per_pu = {p.pu: p.keys for p in report.per_pu if p.fragment == FRAGMENT}
        row = {
            "epoch": report.epoch,
            "rows": report.rows,
            "duration_s": report.duration_s,
            "committed_at": report.committed_at,
            "keys": sum(per_pu.values()),
            "keys_per_pu": {str(pu): n for pu, n in sorted(per_pu.items())},
            "mapping_version": report.mapping_versions.get(FRAGMENT),
            "end_offset": report.source_offset.get("offset"),
            # the machine may be shared: the load beside each epoch explains outliers
            "load1": round(os.getloadavg()[0], 2),
            # the machine's busy CPU-seconds so far: the CPU profile of the operation's epochs
            "busy_cpu_s": round(common.busy_cpu_s(), 3),
            # and the runner's own CPU so far by role, its JVM's threads by kind (a few ms of
            # /proc reads)
            "cpu_s_by_role": {k: round(v, 3) for k, v in common.cpu_s_by_role().items()},
        }
        timings = getattr(self.runner, "last_timings", None)
        if timings is not None:  # where the epoch's time went on the driver (the profile)
            row["timings_s"] = {k: round(v, 4) for k, v in dataclasses.asdict(timings).items()}
        with self._cond:
            self.rows.append(row)
            self._cond.notify_all()
        say(
            f"{self.strategy}: epoch {report.epoch} {report.rows} rows in "
            f"{report.duration_s:.3f}s, {row['keys']:,} keys on {len(per_pu)} PUs"
        )

    def wait_for(self, count: int, alive: Callable[[], bool]) -> None:
        with self._cond:
            while len(self.rows) < count:
                if not alive():
                    raise RuntimeError(f"the runner ended before epoch {count}")
                self._cond.wait(0.5)

    def __len__(self) -> int:
        with self._cond:
            return len(self.rows)


def run_runner_child(strategy: str, p: Params, workdir: Path) -> dict[str, Any]:
    """One runner strategy in local mode, or (``p.cluster``) on a standalone cluster of two
    one-core workers with a disk of their own each and the durable location in moto's S3: the
    state then moves from the first worker's disk to the second's through the object store."""
    if not p.cluster:
        return _run_runner(strategy, p, workdir, {})
    from bench import _cluster as clusters

    with clusters.standalone(workdir, workers=2) as cluster:
        return _run_runner(
            strategy,
            p,
            workdir,
            {
                "spark_master": cluster.master_url,
                "durable_location": cluster.durable_location,
                "recovery_dir": cluster.recovery_dir,
                "local_dir": "",  # each worker's executors keep their stores on its own disk
                # two PUs a worker: PUs 0 and 1 on the first, 2 and 3 on the second, so the
                # 2 -> 4 scale-out moves half of the state from one executor to the other
                "parallel_units": PUS_AFTER // 2,
            },
        )


def _run_runner(strategy: str, p: Params, workdir: Path, where: dict[str, Any]) -> dict[str, Any]:
    from workers.config import RunnerConfig
    from workers.control import LocalControl
    from workers.rescale.local import plan_local, rescale
    from workers.rescale.protocol import OperationRequest, Tick
    from workers.runner import PipelineRunner

    settings: dict[str, Any] = {
        "parallel_units": PUS_AFTER,
        "spark_master": "local[2]",
        **where,
    }
    config = RunnerConfig(
        pipeline=p.pipeline,
        sink="files",  # what the built-in writes: the same sink for both encodings
        words_per_line=1,
        key_space=p.key_space,
        zipf_s=p.zipf_s,
        seed=p.seed,
        rows_per_epoch=p.rows_per_epoch,
        epochs=None,  # runs until the controller stops it
        trigger_interval_s=0,
        spark_ui=False,
        state_dir=workdir / "state",
        initial_pus=PUS_BEFORE,
        vnodes=p.vnodes,
        **settings,
    )
    epochs = EpochLog(strategy)
    runner = PipelineRunner(config, LocalControl(config.pipeline_dir / "control"), on_epoch=epochs)
    epochs.runner = runner
    outcome: dict[str, Any] = {}
    running = threading.Event()

    def control() -> None:
        """Warm up, measure the steady state, rescale, run a few more epochs, stop."""
        try:
            alive = running.is_set
            epochs.wait_for(p.pre_epochs, alive)
            request = OperationRequest.parse(request_body(strategy, p))
            plan = plan_local(config.pipeline_dir, request).to_json()
            frag = plan["fragments"][FRAGMENT]
            say(
                f"{strategy}: requesting {frag['vnodes_moved']} vnodes "
                f"({frag['keys_moved']:,} keys) in {len(plan['steps'])} steps; "
                f"state {epochs.rows[-1]['keys']:,} keys"
            )
            last_log = [0.0]

            def on_tick(tick: Tick) -> None:
                now = time.monotonic()
                if now - last_log[0] < 5:
                    return
                last_log[0] = now
                steps = tick.progress.steps if tick.progress else ()
                done = sum(1 for s in steps if s.phase == "done")
                say(f"{strategy}: {tick.status}, steps done {done}/{len(plan['steps'])}")

            outcome["epochs_before"] = len(epochs)
            outcome["requested_at"] = time.time()
            result = rescale(
                config.pipeline_dir, request, timeout_s=OPERATION_TIMEOUT_S, on_tick=on_tick
            ).to_json()
            outcome["completed_at"] = time.time()
            outcome["result"] = result
            outcome["plan"] = {
                "vnodes_moved": frag["vnodes_moved"],
                "keys_moved": frag["keys_moved"],
                "steps": len(plan["steps"]),
                "estimated_duration_s": plan["estimated_duration_s"],
                "granularity": plan["granularity"],
            }
            say(
                f"{strategy}: {result['status']} in "
                f"{outcome['completed_at'] - outcome['requested_at']:.1f}s {result['error']}"
            )
            epochs.wait_for(len(epochs) + p.post_epochs, alive)
        except Exception as exc:  # reported in the result; the runner must still stop
            outcome["error"] = repr(exc)
            say(f"{strategy}: controller failed: {exc!r}")
        finally:
            runner.request_stop()

    controller = threading.Thread(target=control, name="controller", daemon=True)
    running.set()
    controller.start()
    try:
        runner.run()
    finally:
        running.clear()
        controller.join(timeout=60)

    rows = list(epochs.rows)
    say(f"{strategy}: stopped after {len(rows)} epochs; reading the state back")
    verification = verify_runner(config, p, rows[-1]["end_offset"]) if rows else {}
    return {
        "epochs": rows,
        **outcome,
        "cores": psutil.cpu_count(),  # of the machine that ran it: the CPU profile's floor
        "progress_log": progress_log(config.pipeline_dir / "control" / "progress.jsonl"),
        "verification": verification,
    }


def progress_log(path: Path) -> list[dict[str, Any]]:
    """When each progress report was made, with the operation's status and phase: the runner
    reports at every phase change, so the stop-start's snapshot, clear and restore times can
    be read from it (they all happen inside one barrier)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text("utf-8").splitlines():
        if line.strip():
            d = json.loads(line)
            out.append({"at": d["at"], "status": d["status"], "phase": d["phase"]})
    return out


def verify_runner(config: Any, p: Params, end_offset: int) -> dict[str, Any]:
    from bench.processors import padding, padding_digest
    from workers.hashing import vnode_of
    from workers.pipeline.placement import PlacementStore
    from workers.readout import iter_state

    placements = PlacementStore(config.pipeline_dir).load()
    assert placements is not None
    mapping = placements[FRAGMENT].mapping
    actual: dict[str, int] = {}
    dupes = misplaced = bad_padding = key_bytes = 0
    padded = p.value_bytes > 8
    for row in iter_state(config.state_dir, p.pipeline, FRAGMENT, backend=config.backend):
        key = row["key"]
        dupes += key in actual
        key_bytes += len(key.encode())
        if padded:  # the count, and a padding that is the key's own, byte for byte
            actual[key] = int(row["value"]["count"])
            bad_padding += row["value"]["padding"] != padding_digest(padding(key, p.value_bytes))
        else:
            actual[key] = int(row["value"])
        vnode = vnode_of(key, len(mapping))
        misplaced += row["vnode"] != vnode or row["pu"] != mapping[vnode]
    result = verify(p, end_offset, actual, dupes)
    if misplaced:
        result["problems"].append(f"{misplaced} keys are not on the PU their vnode maps to")
        result["exact"] = False
    if bad_padding:
        result["problems"].append(f"{bad_padding} keys' padding differs from their key's")
        result["exact"] = False
    # keys and values as stored (a count: 9 bytes; a padded state: value_bytes)
    result["state_bytes"] = key_bytes + len(actual) * max(p.value_bytes, 9)
    result["parallel_units_after"] = list(placements[FRAGMENT].parallel_units)
    result["vnodes_per_pu_after"] = {
        str(pu): sum(1 for owner in mapping if owner == pu)
        for pu in placements[FRAGMENT].parallel_units
    }
    return result


# -- child: Spark's own route --------------------------------------------------------------------------
def _batches(query: Any) -> list[dict[str, Any]]:
    """The query's finished batches with input: id, rows, triggerExecution and commit time."""
    out = []
    for b in common.progress_batches(query):
        if b["num_input_rows"] == 0:
            continue  # an idle trigger (the source had nothing new)
        started = common.spark_time(b["timestamp"])
        trigger_s = b["duration_ms"]["triggerExecution"] / 1000
        out.append(
            {
                "epoch": b["batch"],
                "rows": b["num_input_rows"],
                "duration_s": trigger_s,
                "started_at": started,
                "committed_at": started + trigger_s,
            }
        )
    return out


def run_spark_child(strategy: str, p: Params, workdir: Path) -> dict[str, Any]:
    # the query's state partitions are its "PUs" (the repartition changes them 2 -> 4)
    spark = shared_spark.spark_session(
        f"rescale-{strategy}", workdir, shared_spark.spark_conf(PUS_BEFORE)
    )
    checkpoint = workdir / "checkpoint"
    native = strategy == "spark_native"

    def start(max_rows: int) -> Any:
        grouped = shared_spark.keys_grouped(spark, p.generator_options(max_rows))
        counted = grouped.count() if native else shared_spark.tws_count(grouped)
        return shared_spark.start_noop(counted, checkpoint, f"rescale_{strategy}")

    loads: dict[int, float] = {}

    def on_batch(d: dict[str, Any]) -> None:
        batch = int(d["batchId"])
        loads[batch] = round(os.getloadavg()[0], 2)
        say(
            f"{strategy}: batch {batch} {d['numInputRows']} rows in "
            f"{d['durationMs'].get('triggerExecution', 0)} ms"
        )

    try:
        # The source ends after the warm-up and steady epochs (max_rows), so the query stops
        # with its last batch committed: the repartition refuses a checkpoint whose last batch
        # did not commit, and stopping a running processingTime query can leave one.
        query = start(p.pre_epochs * p.rows_per_epoch)
        with common.ProgressPoller(query, on_batch):
            query.processAllAvailable()
        timeline = {"data_done_at": time.time()}
        query.stop()
        timeline["stopped_at"] = time.time()
        before = _batches(query)
        say(f"{strategy}: stopped after {len(before)} batches; repartitioning to {PUS_AFTER}")
        spark._streamingCheckpointManager.repartition(str(checkpoint), PUS_AFTER)
        timeline["repartitioned_at"] = time.time()
        end_rows = (p.pre_epochs + p.post_epochs) * p.rows_per_epoch
        query = start(end_rows)
        timeline["restarted_at"] = time.time()
        with common.ProgressPoller(query, on_batch):
            while not _batches(query):  # the first batch after the restart
                if not query.isActive:
                    raise RuntimeError(f"the restarted query stopped: {query.exception()}")
                time.sleep(0.05)
            timeline["first_batch_seen_at"] = time.time()
            query.processAllAvailable()
        query.stop()
        after = _batches(query)
        timeline["last_commit_before"] = before[-1]["committed_at"]
        timeline["first_commit_after"] = after[0]["committed_at"]
        say(
            f"{strategy}: stop {timeline['stopped_at'] - timeline['data_done_at']:.2f}s, "
            f"repartition {timeline['repartitioned_at'] - timeline['stopped_at']:.2f}s, "
            f"restart {timeline['restarted_at'] - timeline['repartitioned_at']:.2f}s, first "
            f"batch {after[0]['duration_s']:.2f}s; reading the state back"
        )
        table = shared_spark.read_counts(spark, checkpoint, native=native)
    finally:
        spark.stop()
    keys = table.column("key").to_pylist()
    actual = dict(zip(keys, table.column("count").to_pylist(), strict=True))
    verification = verify(p, end_rows, actual, len(keys) - len(actual))
    verification["state_partitions_after"] = len(set(table.column("partition_id").to_pylist()))
    epochs = [{**e, "load1": loads.get(e["epoch"])} for e in before + after]
    return {"epochs": epochs, "timeline": timeline, "verification": verification}


def child_main(args: argparse.Namespace) -> int:
    p = Params(**json.loads(args.child_params))
    strategy = args.strategy

    def work(workdir: Path) -> dict[str, Any]:
        if strategy in RUNNER_STRATEGIES:
            return run_runner_child(strategy, p, workdir)
        return run_spark_child(strategy, p, workdir)

    return CHILD.serve(Path(args.workdir), strategy, work)


# -- parent: run the children ------------------------------------------------------------------------
def run_strategy(
    name: str, rnd: int, *, p: Params, run_dir: Path, keys_at_operation: int, settle: bool
) -> dict[str, Any]:
    """One run of one strategy in its own process, summarized."""
    args = ["--strategy-child", name, "--child-params", json.dumps(asdict(p))]
    r = CHILD.run(args, run_dir / f"{name}-{rnd}", f"{name} #{rnd + 1}", settle=settle)
    if "error" not in r or "epochs" in r:
        r["keys_at_operation"] = keys_at_operation
        _summarize_run(name, r, p)
    return r


def _summarize_run(name: str, r: dict[str, Any], p: Params) -> None:
    try:
        r["summary"] = summarize(name, r, p)
    except (KeyError, IndexError, TypeError) as exc:  # a partial run: keep the rest
        r["summary"] = {"error": f"cannot summarize: {exc!r}"}


# -- parent: the numbers -----------------------------------------------------------------------------
def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _gaps(epochs: list[dict[str, Any]]) -> list[tuple[dict[str, Any], float]]:
    """(epoch, seconds since the previous epoch's commit) for every epoch but the first."""
    return [(cur, cur["committed_at"] - prev["committed_at"]) for prev, cur in pairwise(epochs)]


def _union_s(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for lo, hi in sorted(spans):
        if hi > end:
            total += hi - max(lo, end)
            end = hi
    return total


def _window_ends(
    epochs: list[dict[str, Any]], span: list[dict[str, Any]], field: str
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The epoch before ``span`` (consecutive epochs of ``epochs``) and its last one, when every
    one of them carries ``field``."""
    first = next(i for i, e in enumerate(epochs) if e["epoch"] == span[0]["epoch"])
    if first == 0 or any(field not in e for e in (epochs[first - 1], *span)):
        return None
    return epochs[first - 1], span[-1]


def _cpu_window(epochs: list[dict[str, Any]], span: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Wall time, busy CPU-seconds and rows from the commit before ``span`` to its last commit."""
    ends = _window_ends(epochs, span, "busy_cpu_s")
    if ends is None:
        return None
    start, end = ends
    wall = end["committed_at"] - start["committed_at"]
    cpu = end["busy_cpu_s"] - start["busy_cpu_s"]
    return {"wall_s": wall, "cpu_s": cpu, "rows": sum(e["rows"] for e in span)}


def _roles_window(
    epochs: list[dict[str, Any]], span: list[dict[str, Any]]
) -> dict[str, float] | None:
    """CPU-seconds by role from the commit before ``span`` to its last commit."""
    ends = _window_ends(epochs, span, "cpu_s_by_role")
    if ends is None:
        return None
    start, end = ends[0]["cpu_s_by_role"], ends[1]["cpu_s_by_role"]
    # a role whose reading went down lost a process or thread in between: its end reading is
    # what the window can vouch for
    return {k: v - start.get(k, 0.0) if v >= start.get(k, 0.0) else v for k, v in end.items()}


def cpu_profile(
    epochs: list[dict[str, Any]],
    steady: list[dict[str, Any]],
    during: list[dict[str, Any]],
    after: list[dict[str, Any]] | None = None,
    cores: int | None = None,
) -> dict[str, Any] | None:
    """Where the operation's epochs' time went in CPU: the profile behind the latency goals.

    The machine's busy CPU-seconds (``busy_cpu_s``, read at each commit) over the steady epochs
    give the stream's CPU per row and how many of the cores it keeps busy; over the epochs that
    ran during the operation, the CPU beyond what the stream needs for their rows is the
    operation's own (exports, ingests, replays, barriers). An epoch cannot commit sooner after
    the previous one than its busy CPU-seconds over the cores: ``slowest.cpu_floor_s`` is that
    bound for the operation's slowest epoch, so a slowest gap close to it was spent computing,
    not waiting, and only less CPU (or the same spread over more epochs) can shorten it. The
    epochs ``after`` the operation, at the new size, cost more per row where the new PUs
    outnumber the cores: the slowest epoch's ``extra_cpu_s_over_after`` leaves that out.
    ``cores``: the run's machine's (a report from before it was recorded: this machine's)."""
    cores = cores or psutil.cpu_count() or 1
    if not steady or not during:
        return None
    base, op = _cpu_window(epochs, steady), _cpu_window(epochs, during)
    if base is None or op is None or not base["rows"] or base["wall_s"] <= 0:
        return None
    cpu_per_row, wall_per_row = base["cpu_s"] / base["rows"], base["wall_s"] / base["rows"]
    gaps = dict((e["epoch"], g) for e, g in _gaps(epochs))
    slowest = max(during, key=lambda e: gaps.get(e["epoch"], 0.0))
    one = _cpu_window(epochs, [slowest])
    out: dict[str, Any] = {
        "cores": cores,
        "steady": {
            "cores_busy": _r(base["cpu_s"] / base["wall_s"], 2),
            "cpu_s_per_100k_rows": _r(cpu_per_row * 100_000, 3),
            "wall_s_per_100k_rows": _r(wall_per_row * 100_000, 3),
        },
        "during": {
            "epochs": len(during),
            "wall_s": _r(op["wall_s"]),
            "cpu_s": _r(op["cpu_s"]),
            "rows": op["rows"],
            "cores_busy": _r(op["cpu_s"] / op["wall_s"], 2) if op["wall_s"] > 0 else None,
            # beyond what the stream's steady state spends on the same rows
            "extra_cpu_s": _r(op["cpu_s"] - op["rows"] * cpu_per_row),
            "extra_wall_s": _r(op["wall_s"] - op["rows"] * wall_per_row),
        },
    }
    new_size = _cpu_window(epochs, after) if after else None
    after_per_row = None
    if new_size is not None and new_size["rows"] and new_size["wall_s"] > 0:
        after_per_row = new_size["cpu_s"] / new_size["rows"]
        out["after"] = {
            "epochs": len(after or ()),
            "cores_busy": _r(new_size["cpu_s"] / new_size["wall_s"], 2),
            "cpu_s_per_100k_rows": _r(after_per_row * 100_000, 3),
        }
    roles = _roles_window(epochs, steady), _roles_window(epochs, [slowest])
    if roles[0] is not None and roles[1] is not None:
        # CPU-seconds per epoch by role: the steady epochs' mean against the slowest epoch
        per_epoch = {k: v / len(steady) for k, v in roles[0].items()}
        out["by_role_s"] = {
            k: {"steady_per_epoch": _r(per_epoch.get(k, 0.0)), "slowest": _r(roles[1].get(k, 0.0))}
            for k in sorted(set(per_epoch) | set(roles[1]))
        }
    if one is not None:
        out["slowest"] = {
            "epoch": slowest["epoch"],
            "gap_s": _r(one["wall_s"]),
            "cpu_s": _r(one["cpu_s"]),
            "extra_cpu_s": _r(one["cpu_s"] - one["rows"] * cpu_per_row),
            "extra_cpu_s_over_after": _r(one["cpu_s"] - one["rows"] * after_per_row)
            if after_per_row is not None
            else None,
            "cpu_floor_s": _r(one["cpu_s"] / cores),
            "cores_busy": _r(one["cpu_s"] / one["wall_s"], 2) if one["wall_s"] > 0 else None,
        }
    return out


def summarize(strategy: str, r: dict[str, Any], p: Params) -> dict[str, Any]:
    """Downtime, latency ratios, moving keys' delay, duration and rate of one strategy's run."""
    epochs = sorted(r["epochs"], key=lambda e: e["epoch"])
    spark = strategy in SPARK_STRATEGIES
    if spark:
        tl = r["timeline"]
        # The operator stops the query once its last batch committed; the stream is back when
        # the first batch after the restart commits.
        t0, t1 = tl["last_commit_before"], tl["first_commit_after"]
        before = [e for e in epochs if e["committed_at"] <= t0]
    else:
        if "requested_at" not in r:
            return {"error": r.get("error", "the operation never started")}
        t0, t1 = r["requested_at"], r["completed_at"]
        before = epochs[: r["epochs_before"]]
    steady = before[-p.steady_epochs :]
    steady_lat = [e["duration_s"] for e in steady]
    # the gap into each steady epoch, the first one's included
    steady_gaps = [g for e, g in _gaps(before) if e in steady]
    # Epochs that ran (at least partly) during the operation.
    during = [
        e for e in epochs if e["committed_at"] > t0 and e["committed_at"] - e["duration_s"] < t1
    ]
    if spark:
        during = [e for e in epochs if e["committed_at"] > t0][:1]
    after = [e for e in epochs if e["committed_at"] - e["duration_s"] >= t1]
    gaps_during = [g for e, g in _gaps(epochs) if e in during]
    if spark and during:
        # The first batch after the restart processes records that were due when the query
        # stopped: their latency is the whole stop + repartition + restart + batch.
        op_lat = [during[0]["committed_at"] - t0]
    else:
        op_lat = [e["duration_s"] for e in during]
    p99 = common.percentile(steady_lat, 99) or 0.0
    # the steady state at the new size: on a machine whose cores the operation does not add
    # (this one), more PUs than task slots make every epoch after a scale-out slower
    after_p50 = common.percentile([e["duration_s"] for e in after], 50) or 0.0
    p50_gap = common.percentile(steady_gaps, 50) or 0.0
    p99_gap = common.percentile(steady_gaps, 99) or 0.0
    longest = max(gaps_during, default=0.0)
    total_s = t1 - t0
    out: dict[str, Any] = {
        "status": "completed" if spark else (r.get("result") or {}).get("status"),
        "operation_error": r.get("error") or (r.get("result") or {}).get("error") or "",
        "steady": {
            "epochs": len(steady),
            "p50_latency_s": _r(common.percentile(steady_lat, 50)),
            "p99_latency_s": _r(p99),
            "p50_gap_s": _r(p50_gap),
            "p99_gap_s": _r(p99_gap),
            "max_gap_s": _r(max(steady_gaps, default=None)),
        },
        "after": {
            "epochs": len(after),
            "p50_latency_s": _r(after_p50) if after else None,
        },
        "epochs_during": len(during),
        "downtime": {
            # The definition: the longest interval during the operation in which
            # non-moving keys' records were not committed, minus the steady p99 of that
            # interval. Records of vnodes not in transit are applied in the epoch they arrive
            # (invariant I4), so that interval is the gap between two epoch commits.
            "downtime_s": _r(max(0.0, longest - p99_gap)),
            "longest_gap_s": _r(longest),
            "longest_gap_over_steady_p99_gap": _r(longest / p99_gap, 2) if p99_gap else None,
            "excess_over_p50_s": _r(max(0.0, longest - p50_gap)),
            # time during which the whole stream was stopped by the operation (Spark: stop to
            # restart; stop-start: its barrier); a live operation has no such phase
            "stopped_s": None,
        },
        "non_moving": {
            "max_latency_s": _r(max(op_lat, default=None)),
            "p99_latency_s": _r(common.percentile(op_lat, 99)),
            "max_over_steady_p99": _r(max(op_lat) / p99, 2) if op_lat and p99 else None,
            "p99_over_steady_p99": _r((common.percentile(op_lat, 99) or 0) / p99, 2)
            if p99
            else None,
            "max_over_after_p50": _r(max(op_lat) / after_p50, 2) if op_lat and after_p50 else None,
        },
        "total_s": _r(total_s),
        "operation_window": {"start": t0, "end": t1},
    }
    if not spark:
        out["cpu"] = cpu_profile(epochs, steady, during, after, r.get("cores"))
    keys_at_start = before[-1].get("keys") if before else None
    if strategy == "fluid_cut" and keys_at_start:
        # the share of a vnode's keys a key range holds at most, by the cap
        out["key_cap_share"] = _r(min(p.key_cap / (keys_at_start / p.vnodes), 1.0), 3)
    if spark:
        tl = r["timeline"]
        # the query runs nothing from its stop until its restart
        out["downtime"]["stopped_s"] = _r(tl["restarted_at"] - tl["data_done_at"])
        out["phases_s"] = {
            "stop": _r(tl["stopped_at"] - tl["data_done_at"]),
            "repartition": _r(tl["repartitioned_at"] - tl["stopped_at"]),
            "restart": _r(tl["restarted_at"] - tl["repartitioned_at"]),
            "first_batch": _r(during[0]["duration_s"]) if during else None,
        }
        keys_state = r["keys_at_operation"]
        repartition_s = tl["repartitioned_at"] - tl["stopped_at"]
        # The repartition rewrites every key (about half change partition: hash mod 2 -> mod 4)
        out["moving"] = {"extra_epochs_max": 0, "extra_s_max": _r(max(0.0, longest - p99_gap))}
        out["keys"] = {
            "state": keys_state,
            "moved": None,
            "rewritten": keys_state,
            "per_s_total": _r(keys_state / total_s, 0),
            "per_s_transfer": _r(keys_state / repartition_s, 0),
            "transfer_s": _r(repartition_s),
        }
        return out
    progress = (r.get("result") or {}).get("progress") or {}
    steps = progress.get("steps", [])
    commit = {e["epoch"]: e["committed_at"] for e in epochs}
    if strategy == "stop_start":
        moved = r["plan"]["keys_moved"]
        log_ = r.get("progress_log", [])
        at = {entry["phase"]: entry["at"] for entry in log_}
        if log_ and "restored" in at:
            # begun (at the barrier) -> snapshotted -> cleared -> restored: the stream waits
            snapshotted = at.get("snapshotted", log_[0]["at"])
            # the restore now removes the old stores itself: no "cleared" phase since
            restore_from = at.get("cleared", snapshotted)
            out["phases_s"] = {
                "wait_for_barrier": _r(log_[0]["at"] - t0),
                "snapshot": _r(snapshotted - log_[0]["at"]),
                "clear": _r(at["cleared"] - snapshotted) if "cleared" in at else None,
                "restore": _r(at["restored"] - restore_from),
                "barrier_total": _r(at["restored"] - log_[0]["at"]),
            }
            # the barrier holds every record of the stream while it snapshots and restores
            out["downtime"]["stopped_s"] = out["phases_s"]["barrier_total"]
        # Every key, moving or not, waits for the whole barrier: no extra wait beyond that.
        out["moving"] = {"extra_epochs_max": 0, "extra_s_max": _r(max(0.0, longest - p99_gap))}
        out["keys"] = {
            "state": keys_at_start,
            "moved": moved,
            "rewritten": keys_at_start,
            "per_s_total": _r(moved / total_s, 0) if total_s else None,
            "per_s_transfer": None,
            "transfer_s": None,
        }
        return out
    extra_epochs = [s["acquire_epoch"] - s["collect_epoch"] for s in steps if s["acquire_epoch"]]
    extra_s = [
        commit[s["acquire_epoch"]] - commit[s["collect_epoch"]]
        for s in steps
        if s["acquire_epoch"] in commit and s["collect_epoch"] in commit
    ]
    held_s = [
        s["timings"]["acquiring"] - s["timings"]["collecting"]
        for s in steps
        if "acquiring" in s["timings"] and "collecting" in s["timings"]
    ]
    export_spans = [
        (s["timings"]["collecting"], s["timings"]["exported"])
        for s in steps
        if "exported" in s["timings"] and "collecting" in s["timings"]
    ]
    export_s = _union_s(export_spans)
    # From the request until the last step's acquire epoch committed: every moved key is
    # served by its new PU from then on; the rest of the total is drops and the finish barrier.
    acquired = [commit[s["acquire_epoch"]] for s in steps if s["acquire_epoch"] in commit]
    out["last_acquired_s"] = _r(max(acquired) - t0) if acquired else None
    moved = progress.get("keys_moved", 0)
    moved_bytes = progress.get("bytes_moved", 0)
    held_total, held_per_epoch = _held_per_epoch(steps)
    load_moved = _load_moved(steps, commit, t0)
    hot_vnode = max(held_total, key=lambda v: (held_total[v], -v)) if held_total else None
    out["moving"] = {
        "steps": len(steps),
        "extra_epochs_max": max(extra_epochs, default=None),
        "extra_epochs_p50": common.percentile(extra_epochs, 50),
        "extra_s_max": _r(max(extra_s, default=None)),
        "extra_s_p50": _r(common.percentile(extra_s, 50)),
        "collect_to_acquire_s_max": _r(max(held_s, default=None)),
        "hold_queue_max": max((s["hold_queue"] for s in steps), default=0),
        "export_s_max": _r(max((hi - lo for lo, hi in export_spans), default=None)),
        "key_range_steps": sum(1 for s in steps if s.get("key_range")),
        # the vnode whose records were held most, and the most of them held in one epoch
        "hot_vnode": hot_vnode,
        "hot_vnode_held_per_epoch": held_per_epoch.get(hot_vnode)
        if hot_vnode is not None
        else None,
        "held_per_epoch_by_vnode": {str(v): x for v, x in sorted(held_per_epoch.items())},
        **load_moved,
    }
    out["keys"] = {
        "state": keys_at_start,
        "moved": moved,
        "rewritten": moved,
        "per_s_total": _r(moved / total_s, 0) if total_s else None,
        "per_s_transfer": _r(moved / export_s, 0) if export_s else None,
        "transfer_s": _r(export_s),
        "bytes_moved": moved_bytes,
        "mb_per_s_transfer": _r(moved_bytes / export_s / 1e6, 1) if export_s else None,
    }
    out["state_bytes"] = (r.get("verification") or {}).get("state_bytes")
    return out


def _held_per_epoch(steps: list[dict[str, Any]]) -> tuple[dict[int, int], dict[int, float]]:
    """Per vnode: its records held over the operation, and the most of them held per epoch by
    one of its steps (a cut vnode has a step per key range: its held records are that range's)."""
    total: dict[int, int] = {}
    per_epoch: dict[int, float] = {}
    for s in steps:
        if s.get("acquire_epoch") is None or s.get("collect_epoch") is None:
            continue
        epochs = max(s["acquire_epoch"] - s["collect_epoch"], 1)
        for vnode, figures in (s.get("per_vnode") or {}).items():
            held = int(figures.get("hold_queue") or 0)
            total[int(vnode)] = total.get(int(vnode), 0) + held
            per_epoch[int(vnode)] = max(per_epoch.get(int(vnode), 0.0), held / epochs)
    return total, {v: round(x, 1) for v, x in per_epoch.items()}


def _load_moved(
    steps: list[dict[str, Any]], commit: Mapping[int, float], t0: float
) -> dict[str, float | None]:
    """When the moving records' load reached the new PUs: each step's vnodes weighted by the
    records per epoch they received while held (their load), at the commit of the step's acquire
    epoch. ``load_moved_mean_s``: the load-weighted mean of those times since the request
    (moving the hottest first lowers it); ``load_half_moved_s``: when half the load had moved."""
    moved: list[tuple[float, float]] = []  # (seconds since the request, records per epoch)
    for s in steps:
        acquire, collect = s.get("acquire_epoch"), s.get("collect_epoch")
        if acquire is None or collect is None or acquire not in commit:
            continue
        epochs = max(acquire - collect, 1)
        rate = sum(int(f.get("hold_queue") or 0) for f in (s.get("per_vnode") or {}).values())
        moved.append((commit[acquire] - t0, rate / epochs))
    total = sum(rate for _, rate in moved)
    if not total:
        return {"load_moved_mean_s": None, "load_half_moved_s": None}
    half, so_far = None, 0.0
    for at, rate in sorted(moved):
        so_far += rate
        if half is None and so_far >= total / 2:
            half = at
    return {
        "load_moved_mean_s": _r(sum(at * rate for at, rate in moved) / total),
        "load_half_moved_s": _r(half),
    }


def goals(
    strategy: str, s: dict[str, Any], peers: Mapping[str, dict[str, Any]], value_bytes: int = 8
) -> dict[str, Any]:
    """The issue's goals, measured (not asserted) on one run. ``peers``: the summaries of the
    other strategies' runs in the same round (the ratios compare runs that shared the machine's
    state at the time)."""
    out: dict[str, Any] = {}
    down = s["downtime"]
    # Zero downtime: nothing stopped the stream, and no interval without a commit of non-moving
    # keys' records was longer than the steady p99 of that interval.
    out["downtime_0s"] = {
        "value_s": down["downtime_s"],
        "longest_gap_s": down["longest_gap_s"],
        "steady_p99_gap_s": s["steady"]["p99_gap_s"],
        "stopped_s": down.get("stopped_s"),
        "met": not down.get("stopped_s") and down["downtime_s"] == 0,
    }
    if strategy in LIVE:
        ratio = s["non_moving"]["max_over_steady_p99"]
        out["non_moving_max_le_1.2x_steady_p99"] = {
            "value": ratio,
            "met": ratio is not None and ratio <= 1.2,
        }
        out["downtime_le_0.1s"] = {
            "value_s": down["downtime_s"],
            "met": down["downtime_s"] is not None and down["downtime_s"] <= 0.1,
        }
        extra = s["moving"].get("extra_epochs_max")
        out["moving_extra_le_2_epochs"] = {"value": extra, "met": extra is not None and extra <= 2}
    if strategy == "all_at_once":
        transfer, mb_s = s["keys"].get("per_s_transfer"), s["keys"].get("mb_per_s_transfer")
        if value_bytes > 8:  # large states: bytes per second
            out["ge_200MB_per_s_transfer"] = {
                "value": mb_s,
                "met": mb_s is not None and mb_s >= 200,
            }
        else:
            out["ge_2M_keys_per_s_transfer"] = {
                "value": transfer,
                "met": transfer is not None and transfer >= 2_000_000,
            }
        spark = next((peers[n] for n in SPARK_STRATEGIES if "phases_s" in peers.get(n, {})), None)
        if spark is not None:
            phases = spark["phases_s"]
            # The yardstick is stop + repartition + restart; the first batch after the restart
            # is reported beside it, not counted.
            spark_s = phases["stop"] + phases["repartition"] + phases["restart"]
            ratio = spark_s / s["total_s"] if s["total_s"] else None
            out["ge_5x_sooner_than_spark"] = {
                "value": _r(ratio, 2),
                "total_s": s["total_s"],
                "spark_stop_repartition_restart_s": _r(spark_s),
                "spark_to_first_commit_s": spark["total_s"],
                "met": ratio is not None and ratio >= 5,
            }
    if strategy == "fluid_cut" and "moving" in peers.get("fluid", {}):
        # the vnode fluid held most (same round): its records held per epoch cut by the key cap
        # against moved whole, at most the cap's share of its keys
        hot = peers["fluid"]["moving"].get("hot_vnode")
        whole = peers["fluid"]["moving"].get("hot_vnode_held_per_epoch")
        cut = s["moving"].get("held_per_epoch_by_vnode", {}).get(str(hot))
        share = s.get("key_cap_share")
        ratio = cut / whole if cut is not None and whole else None
        out["hot_vnode_held_le_cap_share"] = {
            "value": _r(ratio, 3),
            "vnode": hot,
            "cap_share": share,
            "held_per_epoch_cut": cut,
            "held_per_epoch_whole": whole,
            "met": ratio is not None and share is not None and ratio <= share,
        }
    if strategy == "fluid" and "total_s" in peers.get("all_at_once", {}):
        aao = peers["all_at_once"]["total_s"]
        ratio = s["total_s"] / aao if aao else None
        out["le_5x_all_at_once_time"] = {
            "value": _r(ratio, 2),
            "all_at_once_total_s": aao,
            "met": ratio is not None and ratio <= 5,
        }
    return out


def _failed(r: Mapping[str, Any]) -> bool:
    return "error" in r or "error" in r.get("summary", {})


def _read(*path: str) -> Callable[[Mapping[str, Any]], Any]:
    """One figure of a run's summary; None for a run that failed, whose numbers would mislead."""

    def read(r: Mapping[str, Any]) -> Any:
        return None if _failed(r) else common.dig(r, "summary", *path)

    return read


def _moved_by_s(r: Mapping[str, Any]) -> Any:
    s = r.get("summary", {})
    return _read("last_acquired_s" if "last_acquired_s" in s else "total_s")(r)


def _keys_moved(r: Mapping[str, Any]) -> Any:
    moved = _read("keys", "moved")(r)
    return moved if moved is not None else _read("keys", "rewritten")(r)


FIGURES: common.Figures = {
    "downtime_s": _read("downtime", "downtime_s"),
    "longest_gap_s": _read("downtime", "longest_gap_s"),
    "stopped_s": _read("downtime", "stopped_s"),
    "steady_p99_gap_s": _read("steady", "p99_gap_s"),
    "non_moving_max_over_steady_p99": _read("non_moving", "max_over_steady_p99"),
    "non_moving_p99_over_steady_p99": _read("non_moving", "p99_over_steady_p99"),
    "non_moving_max_over_after_p50": _read("non_moving", "max_over_after_p50"),
    "moving_extra_epochs_max": _read("moving", "extra_epochs_max"),
    "moving_extra_s_max": _read("moving", "extra_s_max"),
    "total_s": _read("total_s"),
    "moved_by_s": _moved_by_s,
    "keys_moved": _keys_moved,
    "keys_per_s": _read("keys", "per_s_total"),
    "keys_per_s_transfer": _read("keys", "per_s_transfer"),
    "mb_per_s_transfer": _read("keys", "mb_per_s_transfer"),
    "hot_vnode_held_per_epoch": _read("moving", "hot_vnode_held_per_epoch"),
    "load_moved_mean_s": _read("moving", "load_moved_mean_s"),
    "steady_cores_busy": _read("cpu", "steady", "cores_busy"),
    "during_cores_busy": _read("cpu", "during", "cores_busy"),
    "extra_cpu_s": _read("cpu", "during", "extra_cpu_s"),
    "slowest_gap_s": _read("cpu", "slowest", "gap_s"),
    "slowest_cpu_floor_s": _read("cpu", "slowest", "cpu_floor_s"),
}


def _round_summaries(results: dict[str, dict[str, Any]], rnd: int) -> dict[str, dict[str, Any]]:
    """Every strategy's summary in round ``rnd`` (runs at one index shared a round)."""
    out = {}
    for name, r in results.items():
        runs = r["runs"]
        if rnd < len(runs) and not _failed(runs[rnd]) and "summary" in runs[rnd]:
            out[name] = runs[rnd]["summary"]
    return out


def run_goals(results: dict[str, dict[str, Any]], value_bytes: int = 8) -> None:
    """Each run's goals, and per strategy how many runs met each: a goal is met only when
    every run met it, as one lucky run proves nothing."""
    for name, r in results.items():
        for rnd, run in enumerate(r["runs"]):
            run.pop("goals", None)
            if "downtime" in run.get("summary", {}):
                run["goals"] = goals(
                    name, run["summary"], _round_summaries(results, rnd), value_bytes
                )
        names = dict.fromkeys(g for run in r["runs"] for g in run.get("goals", {}))
        r["goals"] = {}
        for g in names:
            met = sum(1 for run in r["runs"] if common.dig(run, "goals", g, "met") is True)
            r["goals"][g] = {"met_runs": met, "runs": len(r["runs"]), "met": met == len(r["runs"])}


def table(results: dict[str, dict[str, Any]]) -> str:
    headers = [
        "strategy",
        "downtime s",
        "longest gap s",
        "steady p99 gap s",
        "stopped s",
        "non-moving max/p99",
        "non-moving p99/p99",
        "non-moving max/after p50",
        "moving extra epochs",
        "moving extra s",
        "total s",
        "moved by s",
        "keys moved",
        "keys/s",
        "keys/s transfer",
        "MB/s transfer",
        "hot vnode held/epoch",
        "load moved, mean s",
        "cores busy steady",
        "cores busy during",
        "extra CPU s",
        "slowest gap s",
        "its CPU floor s",
        "exact",
    ]
    rows = []
    for name, r in results.items():
        h = r["headline"]
        if h["total_s"] is None:  # not one run gave numbers
            rows.append([LABELS[name], "failed", *[""] * 21, common.first_error(r["runs"])])
            continue
        rows.append(
            [
                LABELS[name],
                common.fmt_spread(h["downtime_s"], ".2f"),
                common.fmt_spread(h["longest_gap_s"], ".2f"),
                common.fmt_spread(h["steady_p99_gap_s"], ".2f"),
                common.fmt_spread(h["stopped_s"], ".2f"),
                common.fmt_spread(h["non_moving_max_over_steady_p99"], ".2f", "x"),
                common.fmt_spread(h["non_moving_p99_over_steady_p99"], ".2f", "x"),
                common.fmt_spread(h["non_moving_max_over_after_p50"], ".2f", "x"),
                common.fmt_spread(h["moving_extra_epochs_max"], "g"),
                common.fmt_spread(h["moving_extra_s_max"], ".2f"),
                common.fmt_spread(h["total_s"], ".1f"),
                common.fmt_spread(h["moved_by_s"], ".1f"),
                common.fmt_spread(h["keys_moved"]),
                common.fmt_spread(h["keys_per_s"]),
                common.fmt_spread(h["keys_per_s_transfer"]),
                common.fmt_spread(h["mb_per_s_transfer"], ".1f"),
                common.fmt_spread(h["hot_vnode_held_per_epoch"], ".0f"),
                common.fmt_spread(h["load_moved_mean_s"], ".1f"),
                common.fmt_spread(h["steady_cores_busy"], ".2f"),
                common.fmt_spread(h["during_cores_busy"], ".2f"),
                common.fmt_spread(h["extra_cpu_s"], ".2f"),
                common.fmt_spread(h["slowest_gap_s"], ".2f"),
                common.fmt_spread(h["slowest_cpu_floor_s"], ".2f"),
                common.exact_cell(r["runs"]),
            ]
        )
    return common.format_table(headers, rows)


LEGEND = (
    "downtime s: the longest interval during the operation in which non-moving keys' records "
    "were not committed (the longest gap between epoch commits: records of vnodes not in transit "
    "are applied in the epoch they arrive), minus the steady p99 of that gap measured before the "
    "operation in the same run; 0 is zero downtime. longest gap s, steady p99 gap s: the two "
    "terms. stopped s: time the whole stream was stopped by the operation (Spark: stop + "
    "repartition + restart; stop-start: its barrier; live: no such phase). non-moving max/p99, "
    "p99/p99: max and p99 latency of the epochs that ran during the operation (the runner's "
    "foreachBatch duration; Spark: the first batch after the restart counted from the last "
    "commit before the stop) over the steady p99. non-moving max/after p50: the same max over "
    "the median epoch after the operation, at the new size (more PUs than this machine's two "
    "task slots make each epoch after a scale-out slower, whatever the operation did). moving "
    "extra epochs/s: max over steps of "
    "acquire_epoch - collect_epoch, and of the commit of the acquire epoch minus the commit of "
    "the collect epoch (stop-start and Spark: every key waits the downtime). total s: request to "
    "completed (Spark: last commit before the stop to the first commit after the restart); "
    "moved by s: until the last step's acquire epoch committed (every moved key served by its "
    "new PU; the rest is drops and the finish barrier). keys moved: keys of vnodes that changed "
    "PU (Spark: every key of the state is rewritten); keys/s over the total, and over the "
    "transfer alone (live: union of the steps' collecting->exported spans; Spark: the "
    "repartition call). hot vnode held/epoch: the vnode whose records were held most, the "
    "most of them held in one epoch by one of its steps (fluid, key-capped: each vnode over the "
    "key cap moves key range by key range, so a step holds one range's records; its goal reads "
    "the vnode fluid held most in the same round). load moved, mean s: the moving records' "
    "load (each step's records per epoch held) weighted mean of the times, since the request, "
    "at which it reached its new PU (the commit of the step's acquire epoch); moving the "
    "hottest vnodes first lowers it. cores busy steady, during: the machine's busy "
    "CPU-seconds per second over the steady epochs and over the epochs that ran during the "
    "operation (runs alone: the benchmark's own). extra CPU s: those epochs' busy CPU beyond "
    "what the steady state spends on as many rows (the operation's exports, ingests, replays "
    "and barriers). slowest gap s, its CPU floor s: the operation's longest commit-to-commit "
    "gap, and its busy CPU-seconds over the cores, the least time that CPU takes on this "
    "machine. "
    "exact: every key equals the oracle after a few more epochs, in every "
    "run. Each figure: median [min, max] over the interleaved runs; the plot shows the run "
    "with the median total s; goals: runs that met each, met only if all did."
)


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The run with the median total duration: the plot shows one run per strategy."""
    ok = [r for r in runs if "operation_window" in r.get("summary", {})]
    if not ok:
        return None
    return sorted(ok, key=lambda r: r["summary"]["total_s"])[len(ok) // 2]


def plot(path: Path, results: dict[str, dict[str, Any]], warmup: int) -> None:
    plt = common.pyplot()
    shown = {n: run for n, r in results.items() if (run := _median_run(r["runs"])) is not None}
    if not shown:
        return
    fig, axes = plt.subplots(len(shown), 1, figsize=(10, 2.6 * len(shown)), squeeze=False)
    for ax, (name, r) in zip(axes[:, 0], shown.items(), strict=True):
        s = r["summary"]
        t0, t1 = s["operation_window"]["start"], s["operation_window"]["end"]
        # from the first steady epoch: warm-up epochs (JIT, worker start) would set the scale
        epochs = sorted(r["epochs"], key=lambda e: e["epoch"])[warmup:]
        xs = [e["committed_at"] - t0 for e in epochs]
        ax.plot(xs, [e["duration_s"] for e in epochs], marker="o", ms=3, label="epoch latency")
        gaps = _gaps(epochs)
        ax.plot(
            [e["committed_at"] - t0 for e, _ in gaps],
            [g for _, g in gaps],
            lw=0.8,
            alpha=0.6,
            label="gap since previous commit",
        )
        ax.axvspan(0, t1 - t0, color="tab:orange", alpha=0.15, label="operation")
        ax.axvline(0, color="tab:orange", lw=1)
        ax.axvline(t1 - t0, color="tab:orange", lw=1)
        loads = [(x, e.get("load1")) for x, e in zip(xs, epochs, strict=True)]
        loads = [(x, v) for x, v in loads if v is not None]
        if loads:
            twin = ax.twinx()
            twin.plot(*zip(*loads, strict=True), color="0.6", lw=0.8, ls=":")
            twin.set_ylabel("load avg (1 min)", fontsize=7, color="0.5")
            twin.tick_params(labelsize=7, colors="0.5")
            twin.set_ylim(bottom=0)
        p99 = s["steady"]["p99_latency_s"]
        if p99:
            ax.axhline(1.5 * p99, color="tab:red", ls="--", lw=0.8, label="1.5x steady p99")
        ax.set_title(
            f"{LABELS[name]} (run {r.get('round', 0) + 1}, the median): {s['total_s']:.1f}s, "
            f"downtime {s['downtime']['downtime_s']:.2f}s "
            f"(longest gap {s['downtime']['longest_gap_s']:.2f}s)",
            fontsize=9,
        )
        ax.set_ylim(bottom=0)
        ax.set_ylabel("seconds")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    axes[-1, 0].set_xlabel("seconds since the operation started (at each epoch's commit)")
    common.save_figure(fig, path)


def parent_main(args: argparse.Namespace) -> int:
    if args.quick:
        args.keys, args.key_space, args.rows_per_epoch, args.vnodes = 100_000, 200_000, 20_000, 32
        args.batch_vnodes = min(args.batch_vnodes, 4)
        args.fluid_in_flight = min(args.fluid_in_flight, 2)
        args.steady_epochs = min(args.steady_epochs, 6)
    key_space = args.key_space or 2 * args.keys
    strategies = common.parse_names(args.strategies, STRATEGIES, "strategies")
    if args.value_bytes > 8 and (spark := [n for n in strategies if n in SPARK_STRATEGIES]):
        raise SystemExit(
            f"--value-bytes {args.value_bytes} runs the rescaler's strategies only (Spark's "
            f"routes hold counts): drop {', '.join(spark)} from --strategies"
        )
    if args.cluster and (spark := [n for n in strategies if n in SPARK_STRATEGIES]):
        raise SystemExit(
            f"--cluster runs the rescaler's strategies only: drop {', '.join(spark)} from "
            f"--strategies"
        )
    out = common.results_path(args.out, "rescale", args.quick)
    # Before anything that loads the machine (counting the keys below keeps a core busy).
    validity, load_before = common.check_load(args.allow_load, prefix=LOG_PREFIX)

    base = Params(
        key_space=key_space,
        zipf_s=args.zipf_s,
        rows_per_epoch=args.rows_per_epoch,
        target_keys=args.keys,
        warmup_epochs=0,
        steady_epochs=args.steady_epochs,
        post_epochs=args.post_epochs,
        vnodes=args.vnodes,
        fluid_in_flight=args.fluid_in_flight,
        batch_vnodes=args.batch_vnodes,
        batched_in_flight=args.batched_in_flight,
        value_bytes=args.value_bytes,
        cluster=args.cluster,
    )
    say(f"counting the generator's distinct keys until {args.keys:,}")
    counts = distinct_keys_per_epoch(base, args.keys, args.steady_epochs)
    warmup = next((i + 1 for i, n in enumerate(counts) if n >= args.keys), None)
    if warmup is None:
        raise SystemExit(f"the key space {key_space:,} cannot give {args.keys:,} distinct keys")
    keys_at_operation = counts[warmup + args.steady_epochs - 1]
    # fluid_cut's cap: by default a quarter of a vnode's keys, so each vnode moves in 4 ranges
    key_cap = args.key_cap or max(keys_at_operation // args.vnodes // 4, 1)
    p = Params(**{**asdict(base), "warmup_epochs": warmup, "key_cap": key_cap})
    machine = common.machine_info()
    say(
        f"{len(strategies)} strategies x {args.repeat} runs; {p.rows_per_epoch:,} rows/epoch "
        f"over {key_space:,} keys (zipf s={p.zipf_s}), {p.warmup_epochs} warm-up epochs to "
        f"{counts[warmup - 1]:,} keys, {keys_at_operation:,} keys at the operation; "
        f"load {machine['load_avg_at_start']}"
    )
    started = time.time()
    with common.RunDir("rescale-bench-", keep=args.keep, log_prefix=LOG_PREFIX) as run_dir:
        run_one = functools.partial(
            run_strategy,
            p=p,
            run_dir=run_dir.path,
            keys_at_operation=keys_at_operation,
            settle=validity.valid,
        )
        runs, launches = common.run_rounds(strategies, args.repeat, run_one)
        failed = any("error" in r for rs in runs.values() for r in rs)
        run_dir.keep |= failed or not all(common.all_exact(rs) for rs in runs.values())
    report = {
        "benchmark": "rescale",
        "command": common.command_line(),
        **common.trust_fields(validity, load_before, launches),
        "machine": {**machine, "load_avg_at_end": [round(x, 2) for x in os.getloadavg()]},
        "parameters": {
            **asdict(p),
            "strategies": strategies,
            "keys_at_operation": keys_at_operation,
            "parallel_units": f"{PUS_BEFORE} -> {PUS_AFTER}",
            "spark_master": (
                "standalone: 2 workers of 1 core, 2 PUs each, own disks, durable location in "
                "moto's S3"
                if p.cluster
                else "local[2]"
            ),
            # the driver JVM's options, when set (spark-submit passes them to the JVM it starts)
            "spark_submit_opts": os.environ.get("SPARK_SUBMIT_OPTS"),
            "trigger": "processingTime 0 (back to back)",
            "granularities": {n: p.granularity(n) for n in LIVE},
            "state_fsync": os.environ.get("RESCALER_STATE_FSYNC", "1 (default)"),
            "repeat": args.repeat,
            "order": "interleaved, every strategy once per round, reversed every other round",
            "quick": args.quick,
        },
        "elapsed_s": round(time.time() - started, 1),
        "results": {name: {"runs": rs} for name, rs in runs.items()},
    }
    return finish(report, p, out)


def resummarize(path: Path, out: Path | None) -> int:
    """Recompute the summaries, goals, table and plot of an earlier report from its raw data."""
    report = json.loads(path.read_text("utf-8"))
    p = Params(
        **{
            k: report["parameters"][k]
            for k in Params.__dataclass_fields__
            if k in report["parameters"]
        }
    )
    for name, r in report["results"].items():
        runs = r.get("runs", [r])  # a report from before --repeat holds one run
        for run in runs:
            if "epochs" in run:
                _summarize_run(name, run, p)
        report["results"][name] = {"runs": runs}
    report["resummarized"] = common.command_line()
    return finish(report, p, out or path)


def finish(report: dict[str, Any], p: Params, out: Path) -> int:
    """Goals, table, JSON, plot and stdout of a report whose results have summaries."""
    results: dict[str, dict[str, Any]] = report["results"]
    for r in results.values():
        r.update(common.combine_runs(r["runs"], FIGURES))
    run_goals(results, p.value_bytes)
    text = common.with_verdict(table(results), report)
    report.update(legend=LEGEND, table=text)
    png = common.save_report(
        out, report, lambda path: plot(path, results, p.warmup_epochs), prefix=LOG_PREFIX
    )
    print(text)
    print(f"\n{LEGEND}")
    for name, r in results.items():
        met = {k: f"{g['met_runs']}/{g['runs']}" for k, g in r["goals"].items()}
        print(f"goals {LABELS[name]} (runs that met each): {met}")
    print(f"\nwrote {out} and {png}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000, help="keys of state at the start")
    parser.add_argument("--key-space", type=int, help="distinct keys of the generator (2 x keys)")
    parser.add_argument("--zipf-s", type=float, default=0.0, help="0: uniform keys (default)")
    parser.add_argument(
        "--value-bytes",
        type=int,
        default=8,
        choices=(8, PADDED_VALUE_BYTES),
        help=f"8: counts; {PADDED_VALUE_BYTES}: every state padded to 1 KB (runner strategies only)",
    )
    parser.add_argument("--rows-per-epoch", type=int, default=200_000)
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="on a standalone cluster of two workers with disks of their own and the durable "
        "location in moto's S3 (the runner's strategies only)",
    )
    parser.add_argument("--vnodes", type=int, default=256)
    parser.add_argument("--steady-epochs", type=int, default=10)
    parser.add_argument("--post-epochs", type=int, default=3)
    parser.add_argument("--fluid-in-flight", type=int, default=8, help="fluid: steps in flight")
    parser.add_argument("--batch-vnodes", type=int, default=16, help="batched: vnodes per step")
    parser.add_argument("--batched-in-flight", type=int, default=1)
    parser.add_argument(
        "--key-cap",
        type=int,
        default=0,
        help="fluid_cut's max_keys_per_step (default: a quarter of a vnode's keys)",
    )
    parser.add_argument("--strategies", default=",".join(DEFAULT_STRATEGIES))
    common.add_trust_args(parser)
    parser.add_argument("--quick", action="store_true", help="~100k keys, a few minutes")
    parser.add_argument("--out", help="JSON path (the PNG goes beside it)")
    parser.add_argument("--keep", action="store_true", help="keep the run directory")
    parser.add_argument(
        "--resummarize", type=Path, help="recompute an earlier report's numbers from its raw data"
    )
    # internal: one strategy in this process
    parser.add_argument("--strategy-child", help=argparse.SUPPRESS)
    parser.add_argument("--child-params", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.strategy_child:
        args.strategy = args.strategy_child
        return child_main(args)
    if args.resummarize:
        return resummarize(args.resummarize, Path(args.out) if args.out else None)
    return parent_main(args)


if __name__ == "__main__":
    sys.exit(main())
