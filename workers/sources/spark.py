"""The two sources as Spark streaming sources, through PySpark's Python Data Source API.

``rescaler_generator``: offsets are record counts; each micro-batch takes ``rows_per_epoch``
records (up to ``max_rows`` if set), read in ``partitions`` parallel slices.
``rescaler_jsonl``: offsets are positions in the directory's manifest; each micro-batch takes the
files that landed since the previous one (at most ``max_files_per_epoch``), one slice per file.

They are sources like any other: the runner forces barriers on an idle stream through its own
control stream (:mod:`workers.sources.control`), not through their offsets.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from workers.sources import jsonl
from workers.sources.generator import GeneratorConfig, generate

GENERATOR = "rescaler_generator"
JSONL = "rescaler_jsonl"


def _ddl(schema: pa.Schema) -> str:
    names = {pa.int64(): "bigint", pa.string(): "string"}
    return ", ".join(f"`{f.name}` {names[f.type]}" for f in schema)


def _with_malformed_column(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch.append_column("_malformed", pa.nulls(batch.num_rows, pa.string()))


@dataclass
class RangePartition(InputPartition):
    start: int
    end: int


class GeneratorStreamReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.config = GeneratorConfig.from_options(options)
        self.rows_per_epoch = int(options.get("rows_per_epoch", 10_000))
        self.max_rows = int(options["max_rows"]) if options.get("max_rows") else None
        self.slices = max(1, int(options.get("partitions", 2)))

    def initialOffset(self) -> dict[str, Any]:
        return {"offset": 0}

    def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:
        end = start["offset"] + self.rows_per_epoch
        if self.max_rows is not None:
            end = min(end, self.max_rows)
        return {"offset": max(end, start["offset"])}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        lo, hi = start["offset"], end["offset"]
        step = max(1, -(-(hi - lo) // self.slices))
        return [RangePartition(s, min(s + step, hi)) for s in range(lo, hi, step)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        for batch in generate(self.config, partition.start, partition.end):
            yield _with_malformed_column(batch)

    def commit(self, end: dict[str, Any]) -> None:
        pass

    def backlog(self, end: Mapping[str, Any]) -> int:
        """Records waiting past ``end``: none, ever. The generator makes each epoch's rows
        when the epoch asks for them (``rows_per_epoch``), so nothing waits for a slow one."""
        return 0


class GeneratorSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return GENERATOR

    def schema(self) -> str:
        config = GeneratorConfig.from_options(dict(self.options))
        return _ddl(config.schema) + ", `_malformed` string"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return GeneratorStreamReader(dict(self.options))


@dataclass
class FilePartition(InputPartition):
    index: int
    name: str


class JsonlStreamReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.kind = options.get("kind", "events")
        self.directory = Path(options["path"])
        self.manifest = jsonl.Manifest(self.directory, Path(options["manifest"]))
        self.max_files = int(options.get("max_files_per_epoch", 64))
        self._lines = jsonl.LineCounts(self.directory)

    def initialOffset(self) -> dict[str, Any]:
        return {"files": 0}

    def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:
        available = len(self.manifest.refresh())
        return {"files": min(available, start["files"] + self.max_files)}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        names = self.manifest.files()
        return [FilePartition(i, names[i]) for i in range(start["files"], end["files"])]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, FilePartition)
        yield jsonl.read_file(self.kind, self.directory / partition.name, partition.index)

    def commit(self, end: dict[str, Any]) -> None:
        pass

    def backlog(self, end: Mapping[str, Any]) -> int:
        """Records waiting past ``end``: those of every file that landed and is not read yet
        (each file's lines counted once, on the driver)."""
        unread = self.manifest.landed()[int(end.get("files", 0)) :]
        return sum(self._lines.of(name) for name in unread)


class JsonlSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return JSONL

    def schema(self) -> str:
        return _ddl(jsonl.schema_for(self.options.get("kind", "events")))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return JsonlStreamReader(dict(self.options))


def register(spark: Any) -> None:
    """Make both sources available to ``spark.readStream.format(...)``."""
    spark.dataSource.register(GeneratorSource)
    spark.dataSource.register(JsonlSource)
