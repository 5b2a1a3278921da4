"""A deterministic, replayable record generator: record ``i`` is a pure function of (seed, i).

Keys follow a Zipf distribution over a finite key space (rank r has weight 1 / r**s; s = 0 gives
uniform keys). Records are
produced in fixed-size chunks, each drawn from its own counter-seeded RNG, so any offset range can
be regenerated in any process, in any order, and always yields the same records: that is what lets
Spark re-read an epoch after a crash and an oracle recompute any prefix of the stream.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

CHUNK = 8192
EPOCH_START_TS = 1_767_225_600  # 2026-01-01T00:00:00Z: event time of record 0

LINES_SCHEMA = pa.schema([("seq", pa.int64()), ("line", pa.string())])
EVENTS_SCHEMA = pa.schema(
    [
        ("seq", pa.int64()),
        ("user", pa.string()),
        ("page", pa.string()),
        ("ts", pa.int64()),
        ("bytes", pa.int64()),
    ]
)


@dataclass(frozen=True)
class GeneratorConfig:
    """What the generated stream looks like. Every field is part of its identity."""

    kind: str = "events"  # "lines" (wordcount) or "events" (clickstream)
    key_space: int = 100_000  # words or users
    zipf_s: float = 1.1
    seed: int = 7
    words_per_line: int = 4
    pages: int = 500
    events_per_second: int = 1000  # event time advances one second per this many records

    def __post_init__(self) -> None:
        if self.kind not in ("lines", "events"):
            raise ValueError(f"generator kind must be 'lines' or 'events', not {self.kind!r}")
        if self.key_space < 1 or self.pages < 1 or self.words_per_line < 1:
            raise ValueError("key_space, pages and words_per_line must be at least 1")
        if self.zipf_s < 0:
            raise ValueError("zipf_s must be >= 0 (0: uniform keys)")

    @property
    def schema(self) -> pa.Schema:
        return LINES_SCHEMA if self.kind == "lines" else EVENTS_SCHEMA

    def to_options(self) -> dict[str, str]:
        return {name: str(getattr(self, name)) for name in self.__dataclass_fields__}

    @classmethod
    def from_options(cls, options: dict[str, str]) -> GeneratorConfig:
        fields = cls.__dataclass_fields__
        kwargs = {
            name: (float(value) if name == "zipf_s" else value if name == "kind" else int(value))
            for name, value in options.items()
            if name in fields
        }
        return cls(**kwargs)  # type: ignore[arg-type]


@lru_cache(maxsize=8)
def _zipf_cdf(n: int, s: float) -> np.ndarray:
    weights = 1.0 / np.power(np.arange(1, n + 1, dtype=np.float64), s)
    cdf: np.ndarray = np.cumsum(weights)
    normalized: np.ndarray = cdf / cdf[-1]
    return normalized


@lru_cache(maxsize=8)
def _names(prefix: str, n: int) -> pa.Array:
    width = len(str(n - 1))
    return pa.array([f"{prefix}{i:0{width}d}" for i in range(n)], pa.string())


def _zipf_ranks(rng: np.random.Generator, n: int, s: float, size: int) -> np.ndarray:
    ranks = np.searchsorted(_zipf_cdf(n, s), rng.random(size), side="right")
    return np.minimum(ranks, n - 1)


def _chunk(config: GeneratorConfig, chunk: int) -> pa.RecordBatch:
    rng = np.random.default_rng([config.seed, chunk])
    seq = np.arange(chunk * CHUNK, (chunk + 1) * CHUNK, dtype=np.int64)
    if config.kind == "lines":
        ranks = _zipf_ranks(rng, config.key_space, config.zipf_s, CHUNK * config.words_per_line)
        columns = ranks.reshape(CHUNK, config.words_per_line).T
        names = _names("w", config.key_space)
        words = [names.take(pa.array(col)) for col in columns]
        lines = words[0] if len(words) == 1 else pc.binary_join_element_wise(*words, " ")
        return pa.RecordBatch.from_arrays([pa.array(seq), lines], schema=LINES_SCHEMA)
    users = _names("u", config.key_space).take(
        pa.array(_zipf_ranks(rng, config.key_space, config.zipf_s, CHUNK))
    )
    pages = _names("p", config.pages).take(
        pa.array(_zipf_ranks(rng, config.pages, config.zipf_s, CHUNK))
    )
    ts = EPOCH_START_TS + seq // config.events_per_second
    sizes = rng.integers(200, 20_000, CHUNK, dtype=np.int64)
    return pa.RecordBatch.from_arrays(
        [pa.array(seq), users, pages, pa.array(ts), pa.array(sizes)], schema=EVENTS_SCHEMA
    )


def generate(config: GeneratorConfig, start: int, end: int) -> list[pa.RecordBatch]:
    """Records with start <= seq < end, as Arrow batches in sequence order."""
    if start < 0 or end < start:
        raise ValueError(f"bad offset range [{start}, {end})")
    batches = []
    for chunk in range(start // CHUNK, (end + CHUNK - 1) // CHUNK):
        lo = max(start - chunk * CHUNK, 0)
        hi = min(end - chunk * CHUNK, CHUNK)
        if hi > lo:
            batches.append(_chunk(config, chunk).slice(lo, hi - lo))
    return batches
