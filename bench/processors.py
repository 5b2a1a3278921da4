"""The processor the steady-state benchmark runs under both engines, unchanged: a count in a
ValueState and the sizes of the key's last batches in a ListState (value + list state), Row and
pandas interfaces, and the Rescaler pipelines that wrap them (``bench.processors:build_row``,
``bench.processors:build_pandas``) over ``wordcount``'s records (one word per line: the key).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql import Row
from pyspark.sql.streaming import StatefulProcessor

RECENT = 3
OUTPUT = "key string, count long"


class RecentCount(StatefulProcessor):
    """transformWithState (Row API)."""

    def init(self, handle: Any) -> None:
        self.count = handle.getValueState("count", "value long")
        self.recent = handle.getListState("recent", "n long")

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        n = sum(1 for _ in rows)
        old = self.count.get()
        total = (old[0] if old is not None else 0) + n
        self.count.update((total,))
        recent = [r for (r,) in self.recent.get()][-(RECENT - 1) :]
        self.recent.put([(r,) for r in (*recent, n)])
        yield Row(key=key[0], count=total)

    def close(self) -> None:
        pass


class PandasRecentCount(StatefulProcessor):
    """transformWithStateInPandas: the same logic, rows arrive as pandas DataFrames."""

    def init(self, handle: Any) -> None:
        self.count = handle.getValueState("count", "value long")
        self.recent = handle.getListState("recent", "n long")

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        import pandas as pd

        n = sum(len(frame) for frame in rows)
        old = self.count.get()
        total = (int(old[0]) if old is not None else 0) + n
        self.count.update((total,))
        recent = [int(r) for (r,) in self.recent.get()][-(RECENT - 1) :]
        self.recent.put([(r,) for r in (*recent, n)])
        yield pd.DataFrame({"key": [key[0]], "count": [total]})

    def close(self) -> None:
        pass


def _build(name: str, processor: StatefulProcessor, interface: str) -> Any:
    from workers.pipeline import Fragment, Pipeline
    from workers.pipeline.builtins import wordcount
    from workers.processor import ProcessorOperator

    operator = ProcessorOperator(
        processor, columns=("word",), output_schema=OUTPUT, interface=interface
    )
    return Pipeline(
        name=name,
        source_kind="lines",
        fragments=(Fragment("counts", operator, key="word", region=1),),
        prepare=wordcount().prepare,
        description="words → count and recent batch sizes per word (a StatefulProcessor)",
    )


def build_row() -> Any:
    return _build("bench_processor", RecentCount(), "row")


def build_pandas() -> Any:
    return _build("bench_processor_pandas", PandasRecentCount(), "pandas")
