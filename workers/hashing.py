"""Stable key → vnode hashing, identical in Spark SQL and in plain Python.

Spark's ``xxhash64`` is the standard XXH64 with seed 42 over the UTF-8 bytes of a string, as a
signed 64-bit integer; ``pmod`` by the vnode count gives the vnode. Python's salted ``hash()`` is
never used: it differs between processes.
"""

from __future__ import annotations

from dataclasses import dataclass

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


# -- key ranges: a second hash level inside a vnode ------------------------------------------
_MASK64 = (1 << 64) - 1


@dataclass(frozen=True, order=True)
class KeyRange:
    """Key range ``index`` of ``count`` of a vnode: the keys whose second-level hash (the upper
    32 bits of the same ``xxhash64``, which the vnode's ``pmod`` does not decide) falls in the
    ``index``-th of ``count`` equal slices of ``[0, 2**32)``. A hot vnode moves range by range
    (seed 000's key-by-key draining inside a vnode); only the range in flight is held."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if not 1 <= self.count <= MAX_KEY_RANGES or not 0 <= self.index < self.count:
            raise ValueError(f"key range {self.index} of {self.count} does not exist")

    def __str__(self) -> str:
        return f"{self.index + 1}/{self.count}"

    def to_json(self) -> list[int]:
        return [self.index, self.count]

    @classmethod
    def from_json(cls, data: list[int] | tuple[int, int]) -> KeyRange:
        index, count = data
        return cls(int(index), int(count))


#: a vnode is cut into at most this many key ranges: the ranges of a vnode move one after the
#: other, each at least an epoch, so more would make one vnode's move the operation's length
MAX_KEY_RANGES = 64


def key_range_index(hash64: int, count: int) -> int:
    """The key range (of ``count``) of a key whose ``xxhash64`` is ``hash64`` (signed or not)."""
    return (((hash64 & _MASK64) >> 32) * count) >> 32


#: a store's user key that starts with one of these is not a record's key itself: a timer-index
#: entry (``0xff [section] expiry key``) or an operator's section of a keyed region (``0xfe
#: index key``); neither byte starts a UTF-8 key (``workers.processor``)
TIMER_MARK = b"\xff"
SECTION_MARK = b"\xfe"
_EXPIRY_BYTES = 8


def record_key(user_key: bytes) -> bytes:
    """The record key (its UTF-8 bytes) a store's user key belongs to: every entry of a key, its
    timers' index entries included, is in the key's key range and moves with it."""
    at = 0
    if user_key[:1] == TIMER_MARK:
        at = 1 + (2 if user_key[1:2] == SECTION_MARK else 0) + _EXPIRY_BYTES
    elif user_key[:1] == SECTION_MARK:
        at = 2
    return user_key[at:]


def key_range_of(user_key: bytes, count: int) -> int:
    """The key range (of ``count``) of a store's user key (:func:`record_key`)."""
    digest = xxhash.xxh64_intdigest(record_key(user_key), seed=SPARK_XXHASH_SEED)
    return key_range_index(digest, count)


def key_range_sql(key_column: str, count: int) -> str:
    """:func:`key_range_index` in Spark SQL: the product stays below 2**48, no overflow."""
    return f"shiftright(shiftrightunsigned(xxhash64(`{key_column}`), 32) * {int(count)}, 32)"
