"""A store's key layout: every entry's key starts with its vnode, and what sits beside them.

Every entry's key starts with its vnode as two big-endian bytes (:func:`encode_key`), so one
vnode is one contiguous key range (:func:`vnode_range`): it can be counted, exported, ingested or
deleted as a range. Beside the entries a store keeps tables of its own (:data:`STATS_TABLE`, a
vnode's stats row of keys and bytes, :class:`VnodeStats`; :data:`SEALED`, the sealed vnodes and
the one record of sealed key ranges), each kept by a backend as a database (LMDB) or a column
family (RocksDB).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

VNODE_PREFIX = struct.Struct(">H")
MAX_VNODES = 1 << 16
STATS = struct.Struct(">QQ")  # a vnode's stats row: keys, bytes

# The tables an atomic write (:class:`StoreWrite`) names: what each backend keeps as a database
# (LMDB) or column family (RocksDB, whose entries are its default column family).
ENTRIES, STATS_TABLE, SEALED = "entries", "stats", "sealed"
#: the record of every sealed key range, in the sealed table: never 2 bytes long, so never taken
#: for a sealed vnode's key
RANGE_SEALS_KEY = b"key_ranges"
RANGE_SEAL = struct.Struct(">HII")  # vnode, range index, range count


def encode_key(vnode: int, key: bytes) -> bytes:
    """The store key of ``key`` in ``vnode``: two big-endian vnode bytes, then the key."""
    return VNODE_PREFIX.pack(vnode) + key


def decode_key(store_key: bytes) -> tuple[int, bytes]:
    """Split a store key into (vnode, user key)."""
    return VNODE_PREFIX.unpack_from(store_key)[0], store_key[2:]


def vnode_range(vnode: int) -> tuple[bytes, bytes | None]:
    """[start, end) of ``vnode``'s keys; end is None (unbounded) for the last vnode.

    No finite end bounds the last vnode: b"\\xff\\xff\\xff" would leave out its keys whose user key
    starts with 0xff (b"\\xff\\xff\\xff\\x00" > b"\\xff\\xff\\xff").
    """
    start = VNODE_PREFIX.pack(vnode)
    end = VNODE_PREFIX.pack(vnode + 1) if vnode + 1 < MAX_VNODES else None
    return start, end


@dataclass(frozen=True)
class VnodeStats:
    keys: int = 0
    bytes: int = 0


def apply_stats_delta(current: VnodeStats | None, delta: tuple[int, int]) -> VnodeStats | None:
    """New stats of a vnode, or None when it has no key left (its stats entry is deleted)."""
    keys = (current.keys if current else 0) + delta[0]
    size = (current.bytes if current else 0) + delta[1]
    if keys <= 0:
        return None
    return VnodeStats(keys=keys, bytes=max(size, 0))


def check_vnodes(vnodes: Iterable[int]) -> list[int]:
    """The vnodes as a list, refusing any outside [0, MAX_VNODES)."""
    out = list(vnodes)
    for vnode in out:
        if not 0 <= vnode < MAX_VNODES:
            raise ValueError(f"vnode {vnode} out of range [0, {MAX_VNODES})")
    return out
