"""The abstract state store: one ordered key-value store per (fragment, parallel unit).

Every entry's key starts with its vnode as two big-endian bytes, so one vnode is one
contiguous key range: it can be counted, exported, ingested or deleted as a range. Beside the
entries, a store keeps, in the same atomic write as the entries it describes:

* the applied-epoch marker (the last epoch whose updates are in the store), so a replayed epoch
  changes nothing twice;
* per-vnode statistics (number of keys, bytes of key + value), so the runner can report
  per-vnode load without scanning;
* the outputs an epoch produced, so a replay re-emits exactly what the first run emitted;
* the set of sealed vnodes (state in transit: nothing may write them), and the sealed key ranges
  of vnodes moving range by range (one record beside them, so that a commit pays one point read
  for them, whatever their number).

Backends: ``lmdb`` (default) and ``rocksdb`` (``rocksdict``). The store is opened by a Spark
Python worker for one task and closed at its end (RocksDB allows one read-write process at a
time; LMDB allows one writer and many readers across processes).

This module is the interface (:class:`StateStore`, and the updates a commit takes). What it is
written with has modules of its own: ``keys`` (the key layout, the tables, a vnode's stats),
``errors``, ``columns`` (binary columns as buffers), ``exports`` (a vnode's export, its
checksums and their verification) and ``key_ranges`` (one atomic write, :class:`StoreWrite`, and
the key-range steps inside it). Their names are re-exported here, where the rest of the data
plane has always imported them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from workers.hashing import KeyRange
from workers.state.columns import binary_array, row_vnodes
from workers.state.errors import IngestMismatch, StateStoreError, VnodeSealed
from workers.state.exports import (
    COLUMNAR,
    VnodeExport,
    checksum_items,
    columnar_checksum,
    verify_columns,
    verify_export,
)
from workers.state.key_ranges import (
    StoreWrite,
    adjust_stats,
    decode_range_seals,
    delete_key_range,
    edit_range_seals,
    encode_range_seals,
    forget_range_seals,
    in_key_range,
)
from workers.state.keys import (
    ENTRIES,
    MAX_VNODES,
    RANGE_SEAL,
    RANGE_SEALS_KEY,
    SEALED,
    STATS,
    STATS_TABLE,
    VNODE_PREFIX,
    VnodeStats,
    apply_stats_delta,
    check_vnodes,
    decode_key,
    encode_key,
    vnode_range,
)

__all__ = [
    "COLUMNAR",
    "ENTRIES",
    "MAX_VNODES",
    "RANGE_SEAL",
    "RANGE_SEALS_KEY",
    "SEALED",
    "STATS",
    "STATS_TABLE",
    "VNODE_PREFIX",
    "ColumnUpdates",
    "IngestMismatch",
    "StateStore",
    "StateStoreError",
    "StoreWrite",
    "Update",
    "VnodeExport",
    "VnodeSealed",
    "VnodeStats",
    "apply_stats_delta",
    "binary_array",
    "check_vnodes",
    "checksum_items",
    "columnar_checksum",
    "decode_key",
    "decode_range_seals",
    "encode_key",
    "encode_range_seals",
    "forget_range_seals",
    "in_key_range",
    "row_vnodes",
    "verify_columns",
    "verify_export",
    "vnode_range",
]


@dataclass(frozen=True)
class Update:
    """One key's change in an epoch: its previous value (None: new key) and new value (None: delete)."""

    key: bytes  # the store key (vnode prefix included)
    old: bytes | None
    new: bytes | None


@dataclass(frozen=True)
class ColumnUpdates:
    """An epoch's updates as Arrow columns (the vectorised epoch's form of a list of Update).

    ``keys`` are distinct store keys; ``old[i]`` is the value the task read for ``keys[i]`` (null:
    absent), ``new[i]`` the value to write (null: delete). Binary or large_binary columns.
    """

    keys: pa.Array
    old: pa.Array
    new: pa.Array


class StateStore(ABC):
    """One (fragment, PU) store. Every mutating method is atomic and safe to repeat."""

    backend: str = ""

    def __init__(self, path: Path, *, readonly: bool = False) -> None:
        self.path = Path(path)
        self.readonly = readonly

    # -- lifecycle ---------------------------------------------------------------------------
    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> StateStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reads -------------------------------------------------------------------------------
    @abstractmethod
    def applied_epoch(self) -> int:
        """The last epoch committed into this store, or -1."""

    @abstractmethod
    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """Values of the given store keys, None where absent, in the same order."""

    def get(self, key: bytes) -> bytes | None:
        return self.get_many([key])[0]

    def get_column(self, keys: pa.Array) -> pa.LargeBinaryArray:
        """Values of a column of store keys as one large_binary column, null where absent.

        One consistent read, like :meth:`get_many`; the vectorised epoch decodes the column's
        buffers at once instead of value by value.
        """
        values: pa.LargeBinaryArray = pa.array(
            self.get_many(keys.to_pylist()), type=pa.large_binary()
        )
        return values

    @abstractmethod
    def scan(self, start: bytes = b"", end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Entries with start <= key < end (end None: to the last entry), in key order."""

    def scan_vnode(self, vnode: int) -> Iterator[tuple[bytes, bytes]]:
        start, end = vnode_range(vnode)
        return self.scan(start, end)

    @abstractmethod
    def vnode_stats(self) -> dict[int, VnodeStats]:
        """Keys and bytes per vnode that has at least one key."""

    @abstractmethod
    def epoch_outputs(self, epoch: int) -> bytes | None:
        """The outputs recorded with ``epoch``'s commit, if still kept."""

    @abstractmethod
    def sealed_vnodes(self) -> set[int]:
        """The whole vnodes sealed (not those with only sealed key ranges)."""

    def sealed_key_ranges(self) -> dict[int, set[KeyRange]]:
        """The sealed key ranges, by vnode."""
        return decode_range_seals(self._read(SEALED, RANGE_SEALS_KEY))

    @abstractmethod
    def _read(self, table: str, key: bytes) -> bytes | None:
        """One point read of ``table`` (:data:`ENTRIES`, :data:`STATS_TABLE`, :data:`SEALED`)."""

    # -- writes (each atomic) -----------------------------------------------------------------
    @abstractmethod
    def commit_epoch(
        self,
        epoch: int,
        updates: Iterable[Update],
        outputs: bytes | None = None,
        *,
        outputs_from: int | None = None,
    ) -> bool:
        """Apply an epoch's updates, its outputs and the applied-epoch marker in one atomic write.

        Returns False and changes nothing when ``epoch`` <= the applied epoch (a replay).
        Raises VnodeSealed, changing nothing, when an update touches a sealed vnode or a key in
        a sealed key range (:func:`workers.state.commit.refuse_sealed`).
        Outputs of epochs older than ``epoch - 1`` (or than ``outputs_from``, when that is
        older: the epochs a rebuild would re-run) are discarded in the same write.
        """

    @abstractmethod
    def commit_columns(
        self,
        epoch: int,
        updates: ColumnUpdates,
        outputs: bytes | None = None,
        *,
        outputs_from: int | None = None,
    ) -> bool:
        """:meth:`commit_epoch` for updates given as columns: the same single atomic write, the
        same replay and seal rules. Raises ValueError, writing nothing, when a key repeats, is
        null or lacks its vnode prefix, or when the columns differ in length.
        """

    @abstractmethod
    def seal(self, vnodes: Iterable[int]) -> None:
        """Mark vnodes sealed: their state is being exported and nothing may write it."""

    @abstractmethod
    def unseal(self, vnodes: Iterable[int]) -> None: ...

    # -- key ranges: a hot vnode moves range by range ------------------------------------------
    @abstractmethod
    def _atomic(self) -> AbstractContextManager[StoreWrite]:
        """One atomic write (a write transaction, a write batch), refused by a readonly store:
        the primitive every key-range operation below is written with, once for both
        backends."""

    def seal_key_range(self, vnode: int, key_range: KeyRange) -> None:
        """Seal one key range of a vnode: it is being exported, so no commit may write its keys
        (the vnode's other ranges stay writable). Idempotent."""
        check_vnodes([vnode])
        with self._atomic() as write:
            edit_range_seals(write, vnode, add=key_range)

    def unseal_key_range(self, vnode: int, key_range: KeyRange) -> None:
        """Give a sealed key range back to commits (a cancelled move). Idempotent."""
        check_vnodes([vnode])
        with self._atomic() as write:
            edit_range_seals(write, vnode, remove=key_range)

    def key_range_columns(
        self, vnode: int, key_range: KeyRange
    ) -> tuple[pa.BinaryArray, pa.BinaryArray]:
        """The key range's (store key, value) rows of the vnode, in key order, as two columns:
        what a range's export writes (the range should be sealed)."""
        check_vnodes([vnode])
        inside = in_key_range(key_range)
        rows = [(k, v) for k, v in self.scan_vnode(vnode) if inside(k)]
        return (binary_array([k for k, _ in rows]), binary_array([v for _, v in rows]))

    def ingest_key_range(
        self, vnode: int, key_range: KeyRange, keys: pa.Array, values: pa.Array, checksum: str
    ) -> None:
        """Verify a key range's export as :meth:`ingest_columns` does, and that each key is in
        the range; then, in one atomic write, replace what this store holds of the range in the
        vnode by its rows and adjust the vnode's stats. The vnode's other keys stay as they are,
        and a repeat replaces the rows by themselves. Raises IngestMismatch, changing nothing,
        when the export does not verify."""
        stats = verify_columns(vnode, keys, values, checksum)
        inside = in_key_range(key_range)
        key_list = keys.to_pylist()
        if not all(map(inside, key_list)):
            raise IngestMismatch(f"vnode {vnode}: a key is outside key range {key_range}")
        with self._atomic() as write:
            removed = delete_key_range(write, vnode, inside)
            for key, value in zip(key_list, values.to_pylist(), strict=True):
                write.put(ENTRIES, key, value)
            adjust_stats(write, vnode, (stats.keys - removed.keys, stats.bytes - removed.bytes))

    def drop_key_range(self, vnode: int, key_range: KeyRange) -> int:
        """Delete the key range's keys of the vnode and adjust its stats in one atomic write (the
        range now lives on another PU); returns keys deleted. The range stays sealed here, so a
        stray write to it is refused: the drop of the whole vnode, once its last range has
        moved, removes the seals."""
        check_vnodes([vnode])
        with self._atomic() as write:
            removed = delete_key_range(write, vnode, in_key_range(key_range))
            adjust_stats(write, vnode, (-removed.keys, -removed.bytes))
        return removed.keys

    def export_vnode(self, vnode: int) -> VnodeExport:
        """The vnode's entries with their count and checksum (the vnode should be sealed)."""
        items = list(self.scan_vnode(vnode))
        return VnodeExport(
            vnode=vnode, items=items, keys=len(items), checksum=checksum_items(items)
        )

    def vnode_columns(self, vnode: int, keys: int) -> tuple[pa.BinaryArray, pa.BinaryArray]:
        """The vnode's entries, in key order, as two columns (keys, values): what a snapshot
        writes. ``keys``: how many it holds (its stats), so a backend can read exactly that many
        without a step per key in Python; the caller checks the result against it."""
        items = list(self.scan_vnode(vnode))
        return (binary_array([k for k, _ in items]), binary_array([v for _, v in items]))

    def ingest(self, export: VnodeExport) -> None:
        """Verify an export (count and checksum) and write its entries and stats atomically.

        Replaces whatever the vnode held here. Raises IngestMismatch, changing nothing, when the
        export does not verify.
        """
        self._replace_vnode(export.vnode, export.items, verify_export(export))

    def ingest_columns(self, vnode: int, keys: pa.Array, values: pa.Array, checksum: str) -> None:
        """:meth:`ingest` for a vnode's rows given as columns with a :func:`columnar_checksum`
        (a snapshot's run), verified on buffers."""
        stats = verify_columns(vnode, keys, values, checksum)
        self._replace_vnode(vnode, zip(keys.to_pylist(), values.to_pylist(), strict=True), stats)

    @abstractmethod
    def _replace_vnode(
        self, vnode: int, items: Iterable[tuple[bytes, bytes]], stats: VnodeStats
    ) -> None:
        """Write verified entries of ``vnode`` (in key order) and its stats in one atomic write,
        replacing what the vnode held."""

    @abstractmethod
    def drop_vnode(self, vnode: int) -> int:
        """Delete the vnode's range, its stats, its seal and its key ranges' seals atomically
        (the backend's write calls :func:`forget_range_seals`); returns keys deleted."""

    @abstractmethod
    def checkpoint(self, dest: Path) -> None:
        """A consistent point-in-time copy of the whole store at ``dest`` (which must not exist),
        readable by a readonly open of the same backend. The store keeps serving meanwhile:
        LMDB copies from one read transaction, RocksDB hard-links its immutable files.
        """
