"""The compatibility suite's oracle: every case of ``tws_compat.processors`` under Spark's own
``transformWithState`` (or ``transformWithStateInPandas``), in one JVM, one micro-batch per
input batch (a Parquet file each, read one per trigger).

Run as a child process (the JVM is gone when it ends)::

    python -m tests.integration.workers.compat_spark --out spark.json [--case NAME ...]

For each case it writes every batch's outputs, the batch's input row count (a no-data batch has
none) and every key's state after the last batch, read back with Spark's state data source, all
in the normal form of :func:`normal`.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import decimal
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def normal(value: Any) -> Any:
    """A value as both engines' outputs and states are compared: Rows and tuples as lists,
    datetimes in UTC ISO form, decimals and binaries as strings, maps with sorted keys."""
    if hasattr(value, "asDict"):
        return [normal(v) for v in value]
    if isinstance(value, dict):
        return {"$map": sorted([normal(k), normal(v)] for k, v in value.items())}
    if isinstance(value, list | tuple):
        return [normal(v) for v in value]
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return {"$timestamp": value.isoformat()}
    if isinstance(value, dt.date):
        return {"$date": value.isoformat()}
    if isinstance(value, decimal.Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, bytes | bytearray):
        return {"$binary": base64.b64encode(bytes(value)).decode("ascii")}
    return value


def _write_batches(spark: Any, case: Any, source: Path, staging: Path) -> None:
    """One Parquet file per batch, with increasing modification times (the file source takes
    the oldest first, one per trigger)."""
    source.mkdir(parents=True)
    base = time.time() - 10_000
    for i, rows in enumerate(case.batches):
        out = staging / f"b{i}"
        spark.createDataFrame(rows, case.input_schema).coalesce(1).write.parquet(str(out))
        (part,) = out.glob("part-*.parquet")
        target = source / f"{i:04d}.parquet"
        shutil.move(str(part), target)
        os.utime(target, (base + i * 10, base + i * 10))


def run_case(spark: Any, case: Any, work: Path) -> dict[str, Any]:
    from tests.integration.workers.tws_reference import _spark_state, _wait_idle
    from workers.processor import ProcessorHandle

    source = work / case.name / "in"
    _write_batches(spark, case, source, work / case.name / "staging")
    stream = (
        spark.readStream.schema(case.input_schema)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(source))
    )
    if case.event_time:
        stream = stream.withWatermark(case.event_time, f"{case.watermark_delay_ms} milliseconds")
    grouped = stream.groupBy("key")
    transform = (
        grouped.transformWithStateInPandas
        if case.interface == "pandas"
        else grouped.transformWithState
    )
    initial = None
    if case.initial_state is not None:
        initial = spark.createDataFrame(case.initial_state, case.initial_schema).groupBy("key")
    options = {"eventTimeColumnName": case.event_time_column} if case.event_time_column else {}
    result = transform(
        case.make(), case.output_schema, "Append", case.time_mode, initialState=initial, **options
    )
    if case.then is not None:  # chained: grouped by an output column of the first
        result = result.groupBy(case.then.key).transformWithState(
            case.then.make(), case.then.output_schema, "Append", case.then.time_mode
        )
    batches: dict[int, list[Any]] = {}

    def collect(df: Any, batch: int) -> None:
        batches[batch] = sorted(
            (normal(list(r)) for r in df.collect()), key=lambda r: json.dumps(r, sort_keys=True)
        )

    checkpoint = str(work / case.name / "checkpoint")
    query = result.writeStream.foreachBatch(collect).option("checkpointLocation", checkpoint)
    running = query.start()
    rows = sum(len(b) for b in case.batches)
    deadline = time.monotonic() + 300
    while sum(p["numInputRows"] for p in running.recentProgress) < rows:
        if running.exception() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{case.name}: Spark read too little: {running.exception()}")
        time.sleep(0.1)
    idle = case.time_mode == "EventTime"  # ProcessingTime runs no-data batches without end
    if idle:
        _wait_idle(running, lambda: len(batches))
    else:  # the last data batch's own outputs
        while max(batches, default=-1) < running.recentProgress[-1]["batchId"]:
            time.sleep(0.05)
    running.stop()
    inputs = {p["batchId"]: p["numInputRows"] for p in running.recentProgress}
    # foreachBatch ran for every batch Spark ran (an idle stream's progress events name the
    # next batch, which has not run)
    kept = sorted(b for b in batches if inputs.get(b, 0) > 0 or idle)
    stages = [(case.make, case.time_mode)]
    if case.then is not None:
        stages.append((case.then.make, case.then.time_mode))
    states = []
    for index, (make, time_mode) in enumerate(stages):
        # Spark numbers stateful operators from the sink back: the last one is operator 0
        operator_id = len(stages) - 1 - index
        handle = ProcessorHandle(time_mode.lower())
        make().init(handle)  # its state variables, to read them back
        variables = SimpleNamespace(variables=handle.variables, has_timers=time_mode != "None")
        state = _spark_state(spark, checkpoint, kept[-1], variables, operator_id)
        states.append(
            {
                key: {name: _normal_state(handle, name, v) for name, v in variables.items()}
                for key, variables in state.items()
            }
        )
    return {
        "batches": [{"rows": inputs[b], "outputs": batches.get(b, [])} for b in kept],
        "state": states[0],
        "then_state": states[1] if len(states) > 1 else None,
    }


def _normal_state(handle: Any, name: str, value: Any) -> Any:
    """A state variable in normal form; a map's entries in the order of their JSON."""
    value = normal(value)
    var = handle.variables.get(name)
    if var is not None and var.kind == "map":
        value = sorted(value, key=lambda pair: json.dumps(pair, sort_keys=True))
    return value


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--case", action="append", default=[])
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from tws_compat.processors import CASES

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("tws-compat")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
        .config("spark.sql.streaming.numRecentProgressUpdates", "100000")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    work = Path(tempfile.mkdtemp(prefix="compat-", dir=args.out.parent))
    found = {}
    for case in CASES:
        if args.case and case.name not in args.case:
            continue
        started = time.monotonic()
        found[case.name] = run_case(spark, case, work)
        print(f"{case.name}: {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    args.out.write_text(json.dumps(found), "utf-8")


if __name__ == "__main__":
    main()
