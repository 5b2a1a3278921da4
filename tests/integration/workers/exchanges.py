"""How many shuffles an epoch's Spark job has: run as a child process (one JVM) that builds a
pipeline's epoch job over a batch of generator records and counts the ``Exchange`` nodes of its
physical plan. ``python -m tests.integration.workers.exchanges REF`` prints the number."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path


def count(ref: str) -> int:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from workers.config import RunnerConfig
    from workers.job import EpochJob
    from workers.pipeline.loading import load_pipeline
    from workers.pipeline.placement import EpochPlan, VnodeMapping
    from workers.sources.generator import GeneratorConfig, generate
    from workers.spark_session import build_spark

    pipeline = load_pipeline(ref)
    config = RunnerConfig(
        pipeline=pipeline.name,
        spark_ui=False,
        state_dir=Path(tempfile.mkdtemp()),
        parallel_units=2,
        sink="files",
    )
    spark = build_spark(config, "exchanges")
    import pyarrow as pa

    table = pa.Table.from_batches(
        list(generate(GeneratorConfig(kind=pipeline.source_kind), 0, 100))
    )
    table = table.append_column("_malformed", pa.nulls(table.num_rows, pa.string()))
    df = spark.createDataFrame(table.to_pandas())
    plan = EpochPlan(
        0, {f.name: VnodeMapping.initial(f.name, f.vnodes, [0, 1]) for f in pipeline.fragments}
    )
    physical = EpochJob(spark, config, pipeline).build(df, plan)._jdf.queryExecution()
    text = physical.executedPlan().toString()
    spark.stop()
    return sum(1 for line in text.splitlines() if "Exchange" in line)


if __name__ == "__main__":
    print(count(sys.argv[1]))
