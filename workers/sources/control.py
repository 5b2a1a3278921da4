"""The control stream: an internal source unioned with the pipeline's own, so that the runner can
make Spark run an epoch on any source.

Structured Streaming starts a micro-batch only when one of the query's sources reports an offset
beyond its last committed one. A stream that receives nothing therefore reaches no barrier, and
everything applied at barriers (a rescale's steps, a cancel, a stop-start, a worker joining)
would wait for the next record (docs/rescale.md, "Idle streams"). The runner cannot rely on the
user's source for that: a Kafka topic or a JetStream stream knows nothing of the runner.

So the runner unions the user's stream with this one (``rescaler_control``). Its offset is the
runner's *barrier tick*, a counter in a file of the pipeline's directory
(:class:`workers.idle.BarrierTicks`); it never yields a record. When control work waits, the
runner increments the counter; the next trigger sees a new control offset and runs a micro-batch
in which the user's source may have no new data: an *empty epoch*, with its own epoch number,
offset-log entry and recorded plan. A tick never selects a record of the user's stream, so the
user's source stays exactly what it was: its offsets, its replay after a crash, its order.

It takes the user's schema (``readStream.schema(...)``) so the union needs no projection.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

CONTROL = "rescaler_control"


def read_ticks(path: str | Path | None) -> int:
    """The tick counter (0 when there is none yet)."""
    if not path:
        return 0
    try:
        return int(Path(path).read_text("ascii").strip() or 0)
    except (OSError, ValueError):
        return 0


class ControlStreamReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.ticks = options.get("barrier_ticks")

    def initialOffset(self) -> dict[str, Any]:
        return {"tick": read_ticks(self.ticks)}

    def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:
        return {"tick": max(read_ticks(self.ticks), int(start.get("tick", 0)))}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        return []  # a tick selects no record

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return iter(())

    def commit(self, end: dict[str, Any]) -> None:
        pass


class ControlSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return CONTROL

    def schema(self) -> str:
        return "`tick` bigint"  # only when no schema is given; the runner gives the user's

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return ControlStreamReader(dict(self.options))


def with_control(spark: Any, stream: Any, ticks_path: Path) -> Any:
    """``stream`` unioned with the control stream: the same records, plus epochs on demand."""
    control = (
        spark.readStream.format(CONTROL)
        .schema(stream.schema)
        .option("barrier_ticks", str(ticks_path))
        .load()
    )
    return stream.unionByName(control)
