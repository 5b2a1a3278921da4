"""The control stream of checkpoints written before it became Spark's file source
(:mod:`workers.sources.control`): a Python data source, ``rescaler_control``, whose offset is
``{"tick": N}``, N a counter in the file ``barrier-ticks`` of the pipeline's directory. Spark's
file source cannot read those offsets, so a query resumed from such a checkpoint keeps this
source; a new state directory never uses it.

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
