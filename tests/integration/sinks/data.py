"""The epochs the sink tests write, and the expected results, computed without any sink code."""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa

from workers.sinks import EpochOutputs

FRAGMENT = "page_stats"
PUS = 2
SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("seq", pa.int64()),
        ("count", pa.int64()),
        ("share", pa.float64()),
        ("page", pa.string()),
    ]
)
# the order the tasks finish in: both PUs of an epoch, in either order, epoch after epoch
WRITES = [(0, 0), (0, 1), (1, 1), (1, 0), (2, 0), (2, 1)]


def outputs(epoch: int, pu: int) -> EpochOutputs:
    """A deterministic table of (epoch, pu): keys of this PU only (as routing guarantees), some
    keys on several rows (the last in table order is the newest), keys recurring across epochs."""
    rng = random.Random(f"{epoch}:{pu}")
    keys = [f"k{i:02d}" for i in range(24) if i % PUS == pu]
    rows: list[dict[str, Any]] = []
    seq = epoch * 1000 + pu * 100
    for key in rng.sample(keys, 8):
        for _ in range(rng.randint(1, 3)):
            seq += 1
            rows.append(
                {
                    "key": key,
                    "seq": seq,
                    "count": rng.randint(1, 99),
                    "share": round(rng.random(), 6),
                    "page": f"p{rng.randint(0, 9)}",
                }
            )
    rng.shuffle(rows)  # rows of one key interleave with others'
    return EpochOutputs(FRAGMENT, epoch, pu, pa.Table.from_pylist(rows, schema=SCHEMA))


def expected_upsert(writes: list[EpochOutputs]) -> dict[str, dict[str, Any]]:
    """Key -> its row as an upserting sink must leave it: the last row of the key in the newest
    epoch that has it (an older epoch written later does not win), with that epoch."""
    state: dict[str, dict[str, Any]] = {}
    for out in writes:
        for row in out.table.to_pylist():
            old = state.get(row["key"])
            if old is None or old["epoch"] <= out.epoch:
                state[row["key"]] = {**row, "epoch": out.epoch}
    return state


def expected_changelog(writes: list[EpochOutputs]) -> list[dict[str, Any]]:
    """Every row of every write once, with its epoch and pu, in write order."""
    return [
        {**row, "epoch": out.epoch, "pu": out.pu} for out in writes for row in out.table.to_pylist()
    ]
