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
"""

from __future__ import annotations

import hashlib
import struct
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from workers.hashing import KeyRange, key_range_of

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


# a binary array's offsets are 32-bit: past this many bytes, pa.array makes the array
_BINARY_MAX_BYTES = (1 << 31) - 1


def binary_array(items: Sequence[bytes | memoryview]) -> pa.BinaryArray:
    """``pa.array(items, pa.binary())``, built from two buffers (the offsets and the joined
    bytes). The same array, without what ``pa.array`` of a Python list does first: check whether
    the list is a pandas object, which imports pandas on the first call in a process (0.19 s of
    a Spark Python worker's first export, docs/benchmarks.md, "Hot vnodes first, or last")."""
    offsets = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, items), dtype=np.int64, count=len(items)), out=offsets[1:])
    if offsets[-1] > _BINARY_MAX_BYTES:
        return cast(pa.BinaryArray, pa.array(items, pa.binary()))
    data = b"".join(items)
    return cast(
        pa.BinaryArray,
        pa.Array.from_buffers(
            pa.binary(),
            len(items),
            [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)],
        ),
    )


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


def binary_parts(array: pa.Array) -> tuple[np.ndarray, memoryview]:
    """A (large_)binary array's offsets (``len + 1``, absolute) and the bytes they index, for
    a sliced array too, without copying."""
    buffers = array.buffers()
    wide = pa.types.is_large_binary(array.type) or pa.types.is_large_string(array.type)
    offsets = np.frombuffer(buffers[1], dtype=np.int64 if wide else np.int32)
    offsets = offsets[array.offset : array.offset + len(array) + 1]
    data = memoryview(buffers[2]) if buffers[2] is not None else memoryview(b"")
    return offsets, data


def columnar_checksum(keys: pa.Array, values: pa.Array) -> str:
    """The digest of a run of (key, value) rows given as columns: each column's lengths then its
    bytes. What a snapshot's vnode run is verified against, computed over buffers (no step per
    row in Python); ``COLUMNAR``-prefixed, so an item checksum is never taken for one."""
    digest = hashlib.blake2b(digest_size=16)
    for array in (keys, values):
        offsets, data = binary_parts(array)
        digest.update(np.diff(offsets).astype(">u4").tobytes())
        if len(offsets) > 1:
            digest.update(data[int(offsets[0]) : int(offsets[-1])])
    return COLUMNAR + digest.hexdigest()


def row_vnodes(keys: pa.Array) -> np.ndarray:
    """Each store key's vnode (its first two bytes, big-endian)."""
    offsets, data = binary_parts(keys)
    raw = np.frombuffer(data, dtype=np.uint8)
    starts = offsets[:-1]
    vnodes: np.ndarray = raw[starts].astype(np.int32) * 256 + raw[starts + 1]
    return vnodes


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
            _edit_range_seals(write, vnode, add=key_range)

    def unseal_key_range(self, vnode: int, key_range: KeyRange) -> None:
        """Give a sealed key range back to commits (a cancelled move). Idempotent."""
        check_vnodes([vnode])
        with self._atomic() as write:
            _edit_range_seals(write, vnode, remove=key_range)

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
            removed = _delete_key_range(write, vnode, inside)
            for key, value in zip(key_list, values.to_pylist(), strict=True):
                write.put(ENTRIES, key, value)
            _adjust_stats(write, vnode, (stats.keys - removed.keys, stats.bytes - removed.bytes))

    def drop_key_range(self, vnode: int, key_range: KeyRange) -> int:
        """Delete the key range's keys of the vnode and adjust its stats in one atomic write (the
        range now lives on another PU); returns keys deleted. The range stays sealed here, so a
        stray write to it is refused: the drop of the whole vnode, once its last range has
        moved, removes the seals."""
        check_vnodes([vnode])
        with self._atomic() as write:
            removed = _delete_key_range(write, vnode, in_key_range(key_range))
            _adjust_stats(write, vnode, (-removed.keys, -removed.bytes))
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


# -- the key-range operations' steps inside one atomic write -----------------------------------
def _edit_range_seals(
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
    _edit_range_seals(write, vnode, clear=True)


def _delete_key_range(write: StoreWrite, vnode: int, inside: Callable[[bytes], bool]) -> VnodeStats:
    """Delete the vnode's keys that are ``inside`` a key range; returns what they were."""
    found = [(k, len(k) + len(v)) for k, v in write.scan(*vnode_range(vnode)) if inside(k)]
    for key, _ in found:
        write.delete(ENTRIES, key)
    return VnodeStats(keys=len(found), bytes=sum(size for _, size in found))


def _adjust_stats(write: StoreWrite, vnode: int, delta: tuple[int, int]) -> None:
    """Add ``delta`` (keys, bytes) to the vnode's stats row; delete it at no key left."""
    key = VNODE_PREFIX.pack(vnode)
    raw = write.get(STATS_TABLE, key)
    new = apply_stats_delta(VnodeStats(*STATS.unpack(raw)) if raw is not None else None, delta)
    if new is None:
        if raw is not None:
            write.delete(STATS_TABLE, key)
    else:
        write.put(STATS_TABLE, key, STATS.pack(new.keys, new.bytes))
