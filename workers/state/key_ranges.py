"""Key ranges of a vnode: a hot vnode moves range by range, written once for both backends.

A key range is a hash of the record key (:func:`workers.hashing.key_range_of`), so a range's keys
are spread over its vnode and every range operation filters a scan of the vnode
(:func:`in_key_range`). The sealed ranges of every vnode are one record in the sealed table
(:data:`~workers.state.keys.RANGE_SEALS_KEY`), so that a commit pays one point read for them,
whatever their number. The operations are written against :class:`StoreWrite`, one atomic
write of either backend; :class:`~workers.state.base.StateStore`'s key-range methods are these
steps inside one such write.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator

from workers.hashing import KeyRange, key_range_of
from workers.state.keys import (
    ENTRIES,
    RANGE_SEAL,
    RANGE_SEALS_KEY,
    SEALED,
    STATS,
    STATS_TABLE,
    VNODE_PREFIX,
    VnodeStats,
    apply_stats_delta,
    vnode_range,
)


class StoreWrite(ABC):
    """One atomic write of a store, as the backend-neutral operations (key ranges) see it: its
    writes apply in order, all at once when the write ends without an error and not at all
    otherwise. Reads see the store as it was before the write's own writes (the operations read
    everything they need first), and no other write of the store comes in between."""

    @abstractmethod
    def get(self, table: str, key: bytes) -> bytes | None: ...

    @abstractmethod
    def scan(self, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """Entries with start <= key < end (end None: to the last entry), in key order."""

    @abstractmethod
    def put(self, table: str, key: bytes, value: bytes) -> None: ...

    @abstractmethod
    def delete(self, table: str, key: bytes) -> None:
        """Delete ``key`` if present (an absent key is no error)."""


def decode_range_seals(raw: bytes | None) -> dict[int, set[KeyRange]]:
    """The sealed key ranges by vnode, from their record (None: no range is sealed)."""
    out: dict[int, set[KeyRange]] = {}
    for vnode, index, count in RANGE_SEAL.iter_unpack(raw or b""):
        out.setdefault(vnode, set()).add(KeyRange(index, count))
    return out


def encode_range_seals(seals: dict[int, set[KeyRange]]) -> bytes | None:
    """The record of sealed key ranges, sorted so that equal sets give equal bytes; None when
    empty (the record is deleted, and a commit's read of it finds nothing to decode)."""
    rows = sorted((vnode, r.index, r.count) for vnode, ranges in seals.items() for r in ranges)
    return b"".join(RANGE_SEAL.pack(*row) for row in rows) or None


def in_key_range(key_range: KeyRange) -> Callable[[bytes], bool]:
    """Whether a store key is in ``key_range`` (of its vnode): a hash of its record key, so the
    range's keys are spread over the vnode and every range operation filters a vnode scan."""
    index, count = key_range.index, key_range.count

    def inside(store_key: bytes) -> bool:
        return key_range_of(store_key[VNODE_PREFIX.size :], count) == index

    return inside


def edit_range_seals(
    write: StoreWrite,
    vnode: int,
    *,
    add: KeyRange | None = None,
    remove: KeyRange | None = None,
    clear: bool = False,
) -> None:
    """Add or remove one seal of the vnode's key ranges, or all of them (``clear``), in the one
    record of range seals; writes nothing when that changes nothing."""
    raw = write.get(SEALED, RANGE_SEALS_KEY)
    seals = decode_range_seals(raw)
    ranges = seals.setdefault(vnode, set())
    if clear:
        ranges.clear()
    if add is not None:
        ranges.add(add)
    if remove is not None:
        ranges.discard(remove)
    if not ranges:
        del seals[vnode]
    new = encode_range_seals(seals)
    if new == raw:
        return
    if new is None:
        write.delete(SEALED, RANGE_SEALS_KEY)
    else:
        write.put(SEALED, RANGE_SEALS_KEY, new)


def forget_range_seals(write: StoreWrite, vnode: int) -> None:
    """Remove every key-range seal of a vnode (it is dropped whole)."""
    edit_range_seals(write, vnode, clear=True)


def delete_key_range(write: StoreWrite, vnode: int, inside: Callable[[bytes], bool]) -> VnodeStats:
    """Delete the vnode's keys that are ``inside`` a key range; returns what they were."""
    found = [(k, len(k) + len(v)) for k, v in write.scan(*vnode_range(vnode)) if inside(k)]
    for key, _ in found:
        write.delete(ENTRIES, key)
    return VnodeStats(keys=len(found), bytes=sum(size for _, size in found))


def adjust_stats(write: StoreWrite, vnode: int, delta: tuple[int, int]) -> None:
    """Add ``delta`` (keys, bytes) to the vnode's stats row; delete it at no key left."""
    key = VNODE_PREFIX.pack(vnode)
    raw = write.get(STATS_TABLE, key)
    new = apply_stats_delta(VnodeStats(*STATS.unpack(raw)) if raw is not None else None, delta)
    if new is None:
        if raw is not None:
            write.delete(STATS_TABLE, key)
    else:
        write.put(STATS_TABLE, key, STATS.pack(new.keys, new.bytes))
