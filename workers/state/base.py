"""The abstract state store: one ordered key-value store per (fragment, parallel unit).

Every entry's key starts with its vnode as two big-endian bytes, so one vnode is one
contiguous key range: it can be counted, exported, ingested or deleted as a range. Beside the
entries, a store keeps, in the same atomic write as the entries it describes:

* the applied-epoch marker (the last epoch whose updates are in the store), so a replayed epoch
  changes nothing twice;
* per-vnode statistics (number of keys, bytes of key + value), so the runner can report
  per-vnode load without scanning;
* the outputs an epoch produced, so a replay re-emits exactly what the first run emitted;
* the set of sealed vnodes (state in transit: nothing may write them).

Backends: ``lmdb`` (default) and ``rocksdb`` (``rocksdict``). The store is opened by a Spark
Python worker for one task and closed at its end (RocksDB allows one read-write process at a
time; LMDB allows one writer and many readers across processes).
"""

from __future__ import annotations

import hashlib
import struct
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

VNODE_PREFIX = struct.Struct(">H")
MAX_VNODES = 1 << 16


class StateStoreError(Exception):
    """Base class of every state store failure."""


class VnodeSealed(StateStoreError):
    """A write touched a vnode whose state is sealed for transfer."""


class IngestMismatch(StateStoreError):
    """An ingested export's key count or checksum differs from what its source declared."""


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


@dataclass(frozen=True)
class VnodeStats:
    keys: int = 0
    bytes: int = 0


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
    def sealed_vnodes(self) -> set[int]: ...

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
        Raises VnodeSealed, changing nothing, when an update touches a sealed vnode.
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

    def export_vnode(self, vnode: int) -> VnodeExport:
        """The vnode's entries with their count and checksum (the vnode should be sealed)."""
        items = list(self.scan_vnode(vnode))
        return VnodeExport(
            vnode=vnode, items=items, keys=len(items), checksum=checksum_items(items)
        )

    @abstractmethod
    def ingest(self, export: VnodeExport) -> None:
        """Verify an export (count and checksum) and write its entries and stats atomically.

        Replaces whatever the vnode held here. Raises IngestMismatch, changing nothing, when the
        export does not verify.
        """

    @abstractmethod
    def drop_vnode(self, vnode: int) -> int:
        """Delete the vnode's range, its stats and its seal atomically; returns keys deleted."""

    @abstractmethod
    def checkpoint(self, dest: Path) -> None:
        """A consistent point-in-time copy of the whole store at ``dest`` (which must not exist),
        readable by a readonly open of the same backend. The store keeps serving meanwhile:
        LMDB copies from one read transaction, RocksDB hard-links its immutable files.
        """
