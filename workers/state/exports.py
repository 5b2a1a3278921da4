"""A vnode's state in transit: an export, its checksum, and its verification before ingest.

A sealed vnode's entries leave their store as a :class:`VnodeExport` (its items with their count
and an order-sensitive digest, :func:`checksum_items`) or as two columns with a
:func:`columnar_checksum` (a snapshot's vnode run, a live step's export); the target verifies
either before it writes anything (:func:`verify_export`, :func:`verify_columns`): the count, the
digest, and that the keys are the vnode's, strictly increasing.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from workers.columnar import binary_parts
from workers.state.columns import row_vnodes
from workers.state.errors import IngestMismatch
from workers.state.keys import MAX_VNODES, VNODE_PREFIX, VnodeStats


@dataclass(frozen=True)
class VnodeExport:
    """A sealed vnode's state, as the source exported it, with what the target must verify."""

    vnode: int
    items: list[tuple[bytes, bytes]]  # (store key, value), in key order
    keys: int
    checksum: str

    @property
    def bytes(self) -> int:
        return sum(len(k) + len(v) for k, v in self.items)


def checksum_items(items: Iterable[tuple[bytes, bytes]]) -> str:
    """An order-sensitive digest of (key, value) pairs: what an export is verified against."""
    digest = hashlib.blake2b(digest_size=16)
    for key, value in items:
        digest.update(struct.pack(">II", len(key), len(value)))
        digest.update(key)
        digest.update(value)
    return digest.hexdigest()


#: the prefix of a columnar checksum (:func:`columnar_checksum`), told apart from an item one
COLUMNAR = "c1:"


def columnar_checksum(keys: pa.Array, values: pa.Array) -> str:
    """The digest of a run of (key, value) rows given as columns: each column's lengths then its
    bytes. What a snapshot's vnode run is verified against, computed over buffers (no step per
    row in Python); ``COLUMNAR``-prefixed, so an item checksum is never taken for one."""
    digest = hashlib.blake2b(digest_size=16)
    for array in (keys, values):
        offsets, data = binary_parts(array)
        digest.update(np.diff(offsets).astype(">u4").tobytes())
        if len(offsets) > 1:
            digest.update(data[int(offsets[0]) : int(offsets[-1])].data)  # a memoryview, no copy
    return COLUMNAR + digest.hexdigest()


def verify_export(export: VnodeExport) -> VnodeStats:
    """Check an export before anything is written; returns the stats the vnode will have."""
    vnode = export.vnode
    if not 0 <= vnode < MAX_VNODES:
        raise IngestMismatch(f"vnode {vnode} out of range")
    items = export.items
    if export.keys != len(items):
        raise IngestMismatch(
            f"vnode {vnode}: export declares {export.keys} keys but carries {len(items)}"
        )
    prefix = VNODE_PREFIX.pack(vnode)
    previous = b""
    size = 0
    for key, value in items:
        # Order and range matter beyond the checksum: a source that exported duplicates or
        # another vnode's keys would otherwise be ingested with wrong stats or clobber neighbours.
        if key[:2] != prefix:
            raise IngestMismatch(f"vnode {vnode}: key {key!r} is outside the vnode's range")
        if key <= previous:
            raise IngestMismatch(f"vnode {vnode}: keys are not strictly increasing at {key!r}")
        previous = key
        size += len(key) + len(value)
    checksum = checksum_items(items)
    if checksum != export.checksum:
        raise IngestMismatch(
            f"vnode {vnode}: checksum {checksum} differs from the declared {export.checksum}"
        )
    return VnodeStats(keys=len(items), bytes=size)


def verify_columns(vnode: int, keys: pa.Array, values: pa.Array, checksum: str) -> VnodeStats:
    """:func:`verify_export` for a vnode's rows as columns, on buffers: the same checks (range,
    strictly increasing keys, the digest), no step per row in Python."""
    if not 0 <= vnode < MAX_VNODES:
        raise IngestMismatch(f"vnode {vnode} out of range")
    if len(keys) != len(values) or keys.null_count or values.null_count:
        raise IngestMismatch(f"vnode {vnode}: key and value columns differ in length or hold nulls")
    if len(keys):
        offsets = binary_parts(keys)[0]
        if int(np.diff(offsets).min()) < VNODE_PREFIX.size:
            raise IngestMismatch(f"vnode {vnode}: a key is shorter than its vnode prefix")
        if not bool(np.all(row_vnodes(keys) == vnode)):
            raise IngestMismatch(f"vnode {vnode}: a key is outside the vnode's range")
        if len(keys) > 1 and not pc.all(pc.less(keys[:-1], keys[1:])).as_py():
            raise IngestMismatch(f"vnode {vnode}: keys are not strictly increasing")
    found = columnar_checksum(keys, values)
    if found != checksum:
        raise IngestMismatch(
            f"vnode {vnode}: checksum {found} differs from the declared {checksum}"
        )
    size = pc.sum(pc.binary_length(keys)).as_py() or 0
    size += pc.sum(pc.binary_length(values)).as_py() or 0
    return VnodeStats(keys=len(keys), bytes=int(size))
