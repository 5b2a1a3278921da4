"""Spark's own ``transformWithState`` as the oracle of a processor pipeline: the same processor
object, the same generator input cut into the same micro-batches, run by Spark alone.

Run as a child process (one JVM, gone when it ends)::

    python -m tests.integration.workers.tws_reference --pipeline userpipe.sessions:build \
        --rows-per-epoch 1000 --rows 12000 --key-space 300 --out ref.json

It writes the outputs of every batch that read records and every key's state after the last
such batch, read back with Spark's state data source, in the form of :func:`normal_state`. With
``--idle``, the stream is then left idle until Spark stops running batches, and its no-data
batches (an ``EventTime`` processor's timers due at the last watermark fire there) are written
too, the state read after the last of them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def normal_state(to_json: dict[str, Any]) -> dict[str, Any]:
    """A key's state as ``ProcessorOperator.to_json`` shows it (a keyed region: by operator),
    in a form both engines give."""
    if "state" not in to_json:  # a region: one section per operator
        return {label: normal_state(section) for label, section in to_json.items()}
    out: dict[str, Any] = {}
    for name, var in to_json["state"].items():
        if var["kind"] == "value":
            out[name] = list(var["value"])
        elif var["kind"] == "list":
            out[name] = [list(v) for v in var["values"]]
        else:
            out[name] = sorted([list(k), list(v)] for k, v in var["entries"])
    if to_json["timers"]:
        out["$timers"] = sorted(to_json["timers"])
    return out


def _plain(value: Any) -> list[Any]:
    """A state value as Spark's state reader gives it, without its TTL expiry (a value with a
    TTL is read back as (value, ttlExpirationMs))."""
    fields = getattr(value, "__fields__", ())
    if "ttlExpirationMs" in fields:
        value = value[0]
    return list(value)


def _spark_state(
    spark: Any, checkpoint: str, batch: int, operator: Any, operator_id: int = 0
) -> dict[str, Any]:
    state: dict[str, dict[str, Any]] = {}

    def read(**options: str) -> list[Any]:
        reader = spark.read.format("statestore").option("path", checkpoint)
        reader = reader.option("batchId", str(batch)).option("operatorId", str(operator_id))
        for k, v in options.items():
            reader = reader.option(k, v)
        return list(reader.load().collect())

    for name, var in operator.variables.items():
        for row in read(stateVarName=name):
            key = state.setdefault(row.key[0], {})
            if var.kind == "value":
                key[name] = _plain(row.value)
            elif var.kind == "list":
                key.setdefault(name, []).append(_plain(row.list_element))
            else:
                entry = [list(row.user_map_key), _plain(row.user_map_value)]
                key.setdefault(name, []).append(entry)
    for key in state.values():
        for name, var in operator.variables.items():
            if var.kind == "map" and name in key:
                key[name] = sorted(key[name])
    if operator.has_timers:
        for row in read(readRegisteredTimers="true"):
            state.setdefault(row.key[0], {}).setdefault("$timers", []).append(
                row.expiration_timestamp_ms
            )
        for key in state.values():
            if "$timers" in key:
                key["$timers"] = sorted(key["$timers"])
    return state


def _wait_idle(query: Any, ran: Any, quiet_s: float = 3.0) -> None:
    """Until Spark has run no batch for ``quiet_s`` (its no-data batches are over): ``ran()``
    counts the batches foreachBatch was called for (an idle query's progress events name a
    batch that has not run, so they are not counted)."""
    last, since = ran(), time.monotonic()
    deadline = since + 300
    while time.monotonic() - since < quiet_s:
        if time.monotonic() > deadline:
            raise RuntimeError("Spark kept running batches on an idle stream")
        time.sleep(0.2)
        now = ran()
        if now != last or query.status["isTriggerActive"]:
            last, since = now, time.monotonic()


def run(
    ref: str, rows_per_epoch: int, rows: int, key_space: int, out: Path, idle: bool = False
) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from workers.config import RunnerConfig
    from workers.job import EpochJob
    from workers.pipeline.loading import load_pipeline
    from workers.region import Region
    from workers.sources.spark import register

    pipeline = load_pipeline(ref)
    frag = pipeline.fragments[0]
    op = frag.operator
    # a keyed region is Spark's chain of transformWithState operators on the same key
    chain = list(op.operators) if isinstance(op, Region) else [op]
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("tws-reference")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
        # ProcessingTime with timers runs no-data batches forever: keep every batch's progress
        .config("spark.sql.streaming.numRecentProgressUpdates", "100000")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    work = Path(tempfile.mkdtemp(prefix="tws-", dir=out.parent))
    config = RunnerConfig(
        pipeline=pipeline.name,
        rows_per_epoch=rows_per_epoch,
        key_space=key_space,
        epochs=rows // rows_per_epoch,
        state_dir=work,
        sink="files",
    )
    # the pipeline's own stream, without the runner's control stream: Spark alone reads it
    source = EpochJob(spark, config, pipeline).source_stream()
    records = pipeline.prepare(source).select(*op.columns)
    if pipeline.event_time:
        records = records.withWatermark(
            pipeline.event_time, f"{pipeline.watermark_delay_ms} milliseconds"
        )
    result, key = records, frag.key
    for member in chain:
        grouped = result.groupBy(key)
        transform = (
            grouped.transformWithStateInPandas
            if member.interface == "pandas"
            else grouped.transformWithState
        )
        initial = None
        if member.initial_state is not None:  # Spark's initialState: grouped by its own column
            initial = member.initial_state(spark).groupBy(member.initial_state_key or key)
        result = transform(
            member.processor,
            member.output_schema_spark,
            "Append",
            member.time_mode_spark,
            initialState=initial,
        )
        key = member.output_key
    batches: dict[int, list[list[Any]]] = {}

    def collect(df: Any, batch: int) -> None:
        batches[batch] = [list(r) for r in df.collect()]

    checkpoint = str(work / "checkpoint")
    query = result.writeStream.foreachBatch(collect).option("checkpointLocation", checkpoint)
    running = query.start()
    # not processAllAvailable: with processing-time timers Spark never stops running batches
    deadline = time.monotonic() + 600
    while sum(p["numInputRows"] for p in running.recentProgress) < rows:
        if running.exception() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"Spark's query did not read {rows} rows: {running.exception()}")
        time.sleep(0.2)
    if idle:
        _wait_idle(running, lambda: len(batches))
    running.stop()
    inputs = {p["batchId"]: p["numInputRows"] for p in running.recentProgress}
    # foreachBatch ran for every batch Spark ran (an idle stream's progress events name the
    # next batch, which has not run)
    data = sorted(b for b in batches if inputs.get(b, 0) > 0 or idle)
    op.inspect()  # the state variables, to read them back
    if isinstance(op, Region):
        state: dict[str, Any] = {}
        ids = list(range(len(chain)))
        for label, member in zip(op.labels, chain, strict=True):
            # Spark numbers stateful operators in its own plan order: find this one's
            found = None
            for i in ids:
                try:
                    found = _spark_state(spark, checkpoint, data[-1], member, i)
                except Exception:
                    continue
                ids.remove(i)
                break
            assert found is not None, f"no stateful operator of Spark's holds {label}'s state"
            for key, value in found.items():
                state.setdefault(key, {})[label] = value
    else:
        state = _spark_state(spark, checkpoint, data[-1], op)
    body = {
        "batches": [{"batch": b, "rows": inputs[b], "outputs": batches.get(b, [])} for b in data],
        "state": state,
    }
    spark.stop()
    out.write_text(json.dumps(body, default=str), "utf-8")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pipeline", required=True)
    parser.add_argument("--rows-per-epoch", type=int, required=True)
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--key-space", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--idle", action="store_true", help="and its no-data batches after")
    args = parser.parse_args()
    run(args.pipeline, args.rows_per_epoch, args.rows, args.key_space, args.out, args.idle)


if __name__ == "__main__":
    main()
