"""The Spark side the benchmarks share: the transformWithState count, the counting query over
the project's generator, and reading a query's state back.

Apart from ``_common`` because importing this imports PySpark (``CountProcessor`` subclasses
``StatefulProcessor`` when it is defined), which the Spark-free benchmarks should not pay for.
Spark's Python workers unpickle ``CountProcessor`` by reference, importing this module: the
benchmarks put the repository root on their children's PYTHONPATH (``_common.ChildRunner``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import Row
from pyspark.sql.streaming import StatefulProcessor

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


class CountProcessor(StatefulProcessor):
    """transformWithState (Row API): the key's count in a ValueState, one output row per key
    (a ValueState is what Spark's checkpoint repartition can redistribute)."""

    def init(self, handle: Any) -> None:
        self.count = handle.getValueState("count", "value long")

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        n = sum(1 for _ in rows)
        old = self.count.get()
        total = (old[0] if old is not None else 0) + n
        self.count.update((total,))
        yield Row(key=key[0], count=total)

    def close(self) -> None:
        pass


def spark_conf(partitions: int, *extra: tuple[str, str]) -> tuple[tuple[str, str], ...]:
    """A Spark contender's settings: the RocksDB store, ``partitions`` state partitions, and
    enough progress reports kept to read every epoch's back."""
    return (
        ("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER),
        ("spark.sql.shuffle.partitions", str(partitions)),
        ("spark.sql.streaming.numRecentProgressUpdates", "1000"),
        *extra,
    )


def spark_session(
    app: str, workdir: Path, conf: Sequence[tuple[str, str]], master: str = "local[2]"
) -> Any:
    """A session with the project's settings (``workers.spark_session.build_spark``: ``local[2]``
    unless ``master`` says otherwise, the fast checkpoint file manager, no UI), so that only the
    stateful operator differs from the rescaler's runner."""
    from workers.config import RunnerConfig
    from workers.spark_session import build_spark

    config = RunnerConfig(
        spark_ui=False,
        state_dir=workdir,
        spark_master=master,
        spark_conf=tuple(conf),
        # the executor's directory (workers/layout.py): the one this process's own calls use
        local_dir=os.environ.get("RESCALER_LOCAL_DIR", ""),
    )
    return build_spark(config, app)


def keys_grouped(spark: Any, options: Mapping[str, str]) -> Any:
    """The generator's stream split as the ``wordcount`` pipeline splits it (one word per line:
    the key itself), grouped by key: what each Spark contender counts."""
    from pyspark.sql import functions as F

    from workers.sources.spark import GENERATOR, register

    register(spark)

    lines = spark.readStream.format(GENERATOR).options(**options).load()
    keys = lines.where(F.col("_malformed").isNull()).select(
        F.explode(F.split("line", " ")).alias("key")
    )
    return keys.where(F.col("key") != "").groupBy("key")


def tws_count(grouped: Any) -> Any:
    """The count per key with ``transformWithState`` and ``CountProcessor``."""
    return grouped.transformWithState(CountProcessor(), "key string, count long", "Update", "None")


def start_noop(counted: Any, checkpoint: Path, name: str) -> Any:
    """Start ``counted`` into a noop sink in update mode, back to back: only the stateful work
    is measured, not a sink."""
    return (
        counted.writeStream.format("noop")
        .outputMode("update")
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="0 seconds")
        .queryName(name)
        .start()
    )


def read_counts(spark: Any, checkpoint: Path, *, native: bool) -> Any:
    """The query's whole state through Spark's ``statestore`` batch reader, as an Arrow table of
    ``key``, ``count`` and ``partition_id``. ``native``: ``groupBy.count``'s state; otherwise
    the ``count`` ValueState of a transformWithState processor.

    The executors write it to Parquet beside the checkpoint and Python reads the files: a
    ``toArrow()`` collects every row through the driver's JVM heap, which 17M keys overflowed
    (``OutOfMemoryError`` in ``collectAsArrowToPython`` at Spark's default 1 GB)."""
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    reader = spark.read.format("statestore")
    if not native:
        reader = reader.option("stateVarName", "count")
    value = "value.count" if native else "value.value"
    out = checkpoint.parent / f"{checkpoint.name}-state"
    shutil.rmtree(out, ignore_errors=True)
    reader.load(str(checkpoint)).select(
        F.col("key.key").alias("key"), F.col(value).alias("count"), "partition_id"
    ).write.parquet(str(out))
    try:
        return pq.read_table(out)
    finally:
        shutil.rmtree(out, ignore_errors=True)
