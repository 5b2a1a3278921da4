"""The pipeline ``bench/startup.py`` starts: Spark's own ``rate-micro-batch`` source (a JVM
source, as a user's Kafka would be), each row's value folded into one of ``$STARTUP_KEYS`` keys
and counted per key. The plain query it is measured beside reads the same source."""

from __future__ import annotations

import os
from typing import Any

from workers.operators import Count
from workers.pipeline import Fragment, Pipeline
from workers.sinks.files import FileSink

ROWS_ENV, KEYS_ENV = "STARTUP_ROWS_PER_EPOCH", "STARTUP_KEYS"


def source(spark: Any) -> Any:
    return (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", os.environ.get(ROWS_ENV, "10000"))
        .option("numPartitions", 2)
        .load()
    )


def key_expr() -> str:
    """The key of a rate row, in Spark SQL (the plain query groups by the same)."""
    return f"cast(value % {int(os.environ.get(KEYS_ENV, '100000'))} as string)"


def prepare(df: Any) -> Any:
    return df.selectExpr(
        "value AS seq", f"{key_expr()} AS word", "CAST(NULL AS string) AS _malformed", "1 AS src"
    )


def build() -> Pipeline:
    return Pipeline(
        name="startup",
        source_kind="lines",
        source=source,
        prepare=prepare,
        fragments=(Fragment("word_count", Count(), key="word", region=1, vnodes=64),),
        sink=FileSink(),
    )
