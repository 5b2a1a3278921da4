"""Stable key → vnode hashing, identical in Spark SQL and in plain Python.

Spark's ``xxhash64`` is the standard XXH64 with seed 42 over the UTF-8 bytes of a string, as a
signed 64-bit integer; ``pmod`` by the vnode count gives the vnode. Python's salted ``hash()`` is
never used: it differs between processes.
"""

from __future__ import annotations

import xxhash

SPARK_XXHASH_SEED = 42


def stable_hash64(key: str) -> int:
    """Spark's ``xxhash64(key)`` for a string key, as a signed 64-bit integer."""
    value = xxhash.xxh64_intdigest(key.encode("utf-8"), seed=SPARK_XXHASH_SEED)
    return value - (1 << 64) if value >= 1 << 63 else value


def vnode_of(key: str, vnodes: int) -> int:
    """Spark's ``pmod(xxhash64(key), vnodes)``."""
    return stable_hash64(key) % vnodes


def vnode_sql(key_column: str, vnodes: int) -> str:
    """The Spark SQL expression computing a row's vnode (no Python UDF on the routing path)."""
    return f"pmod(xxhash64(`{key_column}`), {int(vnodes)})"
