"""The processor the steady-state benchmark runs under both engines, unchanged: a count in a
ValueState and the sizes of the key's last batches in a ListState (value + list state), Row and
pandas interfaces, and the Rescaler pipelines that wrap them (``bench.processors:build_row``,
``bench.processors:build_pandas``) over ``wordcount``'s records (one word per line: the key);
and ``bench.processors:build_padded``, the rescale benchmark's count per word with every state
padded to 1 KB (``bench/rescale.py --value-bytes 1024``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql import Row
from pyspark.sql.streaming import StatefulProcessor

from workers.operators import Count, FixedForm, KeyedOperator, StateVersionError

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


# -- large states: the rescale benchmark's ``--value-bytes`` -------------------------------------
PADDED_VALUE_BYTES = 1024


def padding(key: str, size: int = PADDED_VALUE_BYTES) -> bytes:
    """The ``size`` - 9 bytes a key's padded state carries after its count: a function of the
    key alone, so a state read back after a rescale is checked byte for byte."""
    seed = hashlib.blake2b(key.encode(), digest_size=64).digest()
    n = size - PaddedCount.form.dtype.itemsize
    return (seed * (n // len(seed) + 1))[:n]


class PaddedCount(KeyedOperator):
    """Records per key, stored with padding to ``PADDED_VALUE_BYTES`` per state (1 KB): the same
    records and counts as ``wordcount``, so the oracle is the same, but every moved key carries a
    kilobyte. It runs the per-key path (the vectorised kernels are the built-ins')."""

    name = "padded_count"
    order_sensitive = False
    output_fields = (("count", "int64"),)
    form = FixedForm(1, "i")

    def combine(self, table: Any) -> Any:
        return Count().combine(table)

    def update(self, key: str, state: Any, records: Sequence[Any]) -> tuple[Any, list[Any]]:
        count = (state[0] if state else 0) + records[0][0]
        return (count, padding(key)), [(key, count)]

    def encode(self, state: Any) -> bytes:
        return self.form.pack(state[0]) + state[1]

    def decode(self, data: bytes) -> Any:
        size = self.form.dtype.itemsize
        if len(data) < size or data[0] != self.state_version:
            raise StateVersionError(f"{self.name}: not a padded count ({len(data)} bytes)")
        return (self.form.struct.unpack(data[:size])[-1], bytes(data[size:]))

    def to_json(self, state: Any) -> Any:
        return {"count": state[0], "padding": padding_digest(state[1])}


def padding_digest(pad: bytes) -> str:
    """What ``PaddedCount.to_json`` shows of a padding, for a check against ``padding(key)``."""
    return hashlib.blake2b(pad, digest_size=8).hexdigest()


def build_padded() -> Any:
    """``wordcount`` with 1 KB states (``bench/rescale.py --value-bytes 1024``)."""
    from workers.pipeline import Fragment, Pipeline
    from workers.pipeline.builtins import wordcount

    return Pipeline(
        name="wordcount_padded",
        source_kind="lines",
        fragments=(Fragment("word_count", PaddedCount(), key="word", region=1),),
        prepare=wordcount().prepare,
        description="lines → words → count per word, each state padded to 1 KB",
    )
