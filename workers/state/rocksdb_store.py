"""The RocksDB state store (``rocksdict``): entries in the default column family, side data in
the ``meta``, ``stats``, ``outputs`` and ``sealed`` (sealed vnodes and the record of sealed key
ranges) column families.

Every mutating method is one WriteBatch across the column families, so it is atomic. Only one
process may open a RocksDB read-write (the LOCK file); readonly stores use RocksDB's read-only
mode, which takes no lock and sees what was committed when it was opened (it replays the WAL).

rocksdict objects that refer to the database (column-family handles, iterators) keep it open,
and with it the LOCK, after ``Rdict.close()``. So the store drops every handle on close and never
lets an iterator outlive one call: scans read in chunks, each from a fresh iterator.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
from rocksdict import (
    AccessType,
    BlockBasedOptions,
    Cache,
    Checkpoint,
    ColumnFamily,
    Options,
    Rdict,
    ReadOptions,
    WriteBatch,
    WriteOptions,
)

from workers.state.base import ColumnUpdates, StateStore, Update
from workers.state.columns import binary_array
from workers.state.commit import (
    APPLIED_EPOCH_KEY,
    EPOCH,
    OUTPUT_KEY,
    CommitPlan,
    check_epoch,
    fsync_enabled,
    outputs_kept_from,
    plan_columns,
    plan_commit,
    refuse_sealed,
)
from workers.state.errors import StateStoreError
from workers.state.exports import VnodeExport
from workers.state.key_ranges import StoreWrite, forget_range_seals
from workers.state.keys import (
    ENTRIES,
    RANGE_SEALS_KEY,
    STATS,
    VNODE_PREFIX,
    VnodeStats,
    apply_stats_delta,
    check_vnodes,
    vnode_range,
)

_SIDE_CFS = ("meta", "stats", "outputs", "sealed")
_SCAN_CHUNK = 4096
_BLOCK_CACHE_BYTES = 64 << 20

_cache_lock = threading.Lock()
_block_cache: Cache | None = None


def _shared_block_cache() -> Cache:
    """One block cache per process: a Spark Python worker reopens its store every task, and a
    per-open cache would start cold each time."""
    global _block_cache
    with _cache_lock:
        if _block_cache is None:
            _block_cache = Cache(_BLOCK_CACHE_BYTES)
        return _block_cache


def _options() -> Options:
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    table = BlockBasedOptions()
    table.set_bloom_filter(10, False)
    table.set_block_cache(_shared_block_cache())
    opts.set_block_based_table_factory(table)
    opts.set_max_background_jobs(2)
    # A new info LOG is started at every open, i.e. every task: keep only a few.
    opts.set_keep_log_file_num(2)
    return opts


# rocksdict's stubs type keys and values as any scalar; in raw mode they are bytes.
def _multi_get(rdict: Rdict, keys: list[bytes]) -> list[bytes | None]:
    return cast("list[bytes | None]", rdict.get(cast("list[Any]", keys)))


def _items(
    rdict: Rdict, start: bytes | None = None, read_opts: ReadOptions | None = None
) -> Iterator[tuple[bytes, bytes]]:
    return cast("Iterator[tuple[bytes, bytes]]", rdict.items(from_key=start, read_opt=read_opts))


class RocksStore(StateStore):
    backend = "rocksdb"

    def __init__(self, path: Path, *, readonly: bool = False) -> None:
        super().__init__(path, readonly=readonly)
        if readonly:
            if not (self.path / "CURRENT").is_file():
                raise StateStoreError(f"no RocksDB state store at {self.path}")
            access = AccessType.read_only(False)
        else:
            if (self.path / "data.mdb").exists():
                raise StateStoreError(f"{self.path} holds an LMDB store, not a RocksDB one")
            self.path.mkdir(parents=True, exist_ok=True)
            access = AccessType.read_write()
        try:
            db = Rdict(
                str(self.path),
                _options(),
                column_families={name: Options(raw_mode=True) for name in _SIDE_CFS},
                access_type=access,
            )
        except Exception as exc:  # rocksdict raises bare Exception
            if "lock" in str(exc).lower():
                raise StateStoreError(
                    f"RocksDB store {self.path} is already open read-write (by another process "
                    f"or another store in this one); RocksDB allows one read-write opener: {exc}"
                ) from exc
            raise StateStoreError(f"cannot open RocksDB store at {self.path}: {exc}") from exc
        self._db: Rdict | None = db
        self._cf: dict[str, Rdict] = {n: db.get_column_family(n) for n in _SIDE_CFS}
        self._cfh: dict[str, ColumnFamily] = {n: db.get_column_family_handle(n) for n in _SIDE_CFS}
        self._write_opts = WriteOptions()
        self._write_opts.sync = fsync_enabled()
        # Serialises read-check-write sequences (replay and seal checks, stats read-modify-write)
        # between threads; other processes cannot write (they cannot open read-write).
        self._lock = threading.RLock()

    # -- lifecycle ---------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            if self._db is None:
                return
            for cf in self._cf.values():
                cf.close()
            self._cf = {}
            self._cfh = {}
            db, self._db = self._db, None
            db.close()

    def _rdict(self) -> Rdict:
        if self._db is None:
            raise StateStoreError(f"state store {self.path} is closed")
        return self._db

    def _side(self, name: str) -> Rdict:
        self._rdict()
        return self._cf[name]

    def _check_writable(self) -> Rdict:
        if self.readonly:
            raise StateStoreError(f"state store {self.path} is open readonly")
        return self._rdict()

    def _write(self, db: Rdict, batch: WriteBatch) -> None:
        try:
            db.write(batch, self._write_opts)
        except Exception as exc:  # rocksdict raises bare Exception
            raise StateStoreError(f"RocksDB store {self.path}: write failed: {exc}") from exc

    # -- reads -------------------------------------------------------------------------------
    def applied_epoch(self) -> int:
        raw = self._side("meta").get(APPLIED_EPOCH_KEY)
        return -1 if raw is None else EPOCH.unpack(raw)[0]

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        if not keys:
            return []
        # One MultiGet: a single consistent view of the keys.
        return _multi_get(self._rdict(), keys)

    def scan(self, start: bytes = b"", end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        position = start
        skip_first = False
        while True:
            chunk = self._scan_chunk(position, end, _SCAN_CHUNK + skip_first)
            if skip_first and chunk and chunk[0][0] == position:
                chunk = chunk[1:]
            yield from chunk
            if len(chunk) < _SCAN_CHUNK:
                return
            position, skip_first = chunk[-1][0], True

    def _scan_chunk(self, start: bytes, end: bytes | None, limit: int) -> list[tuple[bytes, bytes]]:
        read_opts = ReadOptions()
        if end is not None:
            read_opts.set_iterate_upper_bound(end)
        items = _items(self._rdict(), start, read_opts)
        try:
            out: list[tuple[bytes, bytes]] = []
            for item in items:
                out.append(item)
                if len(out) >= limit:
                    break
            return out
        finally:
            # The iterator pins the database (and its LOCK) past close(): drop it here even when
            # an exception's traceback keeps this frame alive.
            del items

    def vnode_columns(self, vnode: int, keys: int) -> tuple[pa.BinaryArray, pa.BinaryArray]:
        start, end = vnode_range(vnode)
        columns = []
        for part in ("keys", "values"):
            read_opts = ReadOptions()
            if end is not None:
                read_opts.set_iterate_upper_bound(end)
            rows = getattr(self._rdict(), part)(from_key=start, read_opt=read_opts)
            try:
                # the iterator's own loop, in Rust, for one row more than the stats count (to
                # show the vnode ends where they say): no Python step per row
                columns.append(list(itertools.islice(rows, keys + 1)))
            finally:
                del rows  # it pins the database past close() (see _scan_chunk)
        found, values = columns
        if len(found) > keys:
            raise StateStoreError(f"{self.path}: vnode {vnode} holds more than {keys} keys")
        return binary_array(found), binary_array(values)

    def vnode_stats(self) -> dict[int, VnodeStats]:
        return {
            VNODE_PREFIX.unpack(k)[0]: VnodeStats(*STATS.unpack(v))
            for k, v in _items(self._side("stats"))
        }

    def epoch_outputs(self, epoch: int) -> bytes | None:
        if epoch < 0:
            return None
        return self._side("outputs").get(OUTPUT_KEY.pack(epoch))

    def sealed_vnodes(self) -> set[int]:
        # the record of sealed key ranges is no vnode's key (never 2 bytes long)
        return {
            VNODE_PREFIX.unpack(k)[0]
            for k, _ in _items(self._side("sealed"))
            if len(k) == VNODE_PREFIX.size
        }

    def _read(self, table: str, key: bytes) -> bytes | None:
        source = self._rdict() if table == ENTRIES else self._side(table)
        return cast("bytes | None", source.get(key))

    # -- writes ------------------------------------------------------------------------------
    def commit_epoch(
        self,
        epoch: int,
        updates: Iterable[Update],
        outputs: bytes | None = None,
        *,
        outputs_from: int | None = None,
    ) -> bool:
        check_epoch(epoch)
        self._check_writable()
        return self._commit(epoch, plan_commit(updates, ordered=False), outputs, outputs_from)

    def commit_columns(
        self,
        epoch: int,
        updates: ColumnUpdates,
        outputs: bytes | None = None,
        *,
        outputs_from: int | None = None,
    ) -> bool:
        check_epoch(epoch)
        self._check_writable()
        return self._commit(epoch, plan_columns(updates, ordered=False), outputs, outputs_from)

    def _commit(
        self, epoch: int, plan: CommitPlan, outputs: bytes | None, outputs_from: int | None
    ) -> bool:
        with self._lock:
            db = self._rdict()
            if epoch <= self.applied_epoch():
                return False
            vnodes = sorted(plan.vnodes)
            vnode_keys = [VNODE_PREFIX.pack(v) for v in vnodes]
            if vnode_keys:
                # the range seals' record in the same MultiGet as the vnodes' seals
                *sealed, ranges = _multi_get(self._cf["sealed"], [*vnode_keys, RANGE_SEALS_KEY])
                touched = [v for v, s in zip(vnodes, sealed, strict=True) if s is not None]
                refuse_sealed(epoch, plan, touched, ranges, self.path)
            batch = WriteBatch(raw_mode=True)
            # Drained by deque in C: no Python step per key.
            deque(itertools.starmap(batch.put, plan.puts), maxlen=0)
            deque(map(batch.delete, plan.deletes), maxlen=0)
            if vnode_keys:
                stats_cf = self._cfh["stats"]
                current = _multi_get(self._cf["stats"], vnode_keys)
                for vnode, key, raw in zip(vnodes, vnode_keys, current, strict=True):
                    old = VnodeStats(*STATS.unpack(raw)) if raw is not None else None
                    new = apply_stats_delta(old, plan.stats_delta[vnode])
                    if new is None:
                        batch.delete(key, stats_cf)
                    else:
                        batch.put(key, STATS.pack(new.keys, new.bytes), stats_cf)
            outputs_cf = self._cfh["outputs"]
            if outputs is not None:
                batch.put(OUTPUT_KEY.pack(epoch), outputs, outputs_cf)
            # Point deletes of the (few) stale outputs rather than a range tombstone per epoch,
            # which would pile up in a column family read at every replay.
            keep_from = OUTPUT_KEY.pack(outputs_kept_from(epoch, outputs_from))
            for key, _ in _items(self._cf["outputs"]):
                if key >= keep_from:
                    break
                batch.delete(key, outputs_cf)
            batch.put(APPLIED_EPOCH_KEY, EPOCH.pack(epoch), self._cfh["meta"])
            self._write(db, batch)
            return True

    def seal(self, vnodes: Iterable[int]) -> None:
        self._mark_sealed(check_vnodes(vnodes), sealed=True)

    def unseal(self, vnodes: Iterable[int]) -> None:
        self._mark_sealed(check_vnodes(vnodes), sealed=False)

    def _mark_sealed(self, vnodes: list[int], *, sealed: bool) -> None:
        self._check_writable()
        with self._lock:
            db = self._rdict()
            batch = WriteBatch(raw_mode=True)
            handle = self._cfh["sealed"]
            for vnode in vnodes:
                if sealed:
                    batch.put(VNODE_PREFIX.pack(vnode), b"", handle)
                else:
                    batch.delete(VNODE_PREFIX.pack(vnode), handle)
            self._write(db, batch)

    def export_vnode(self, vnode: int) -> VnodeExport:
        check_vnodes([vnode])
        return super().export_vnode(vnode)

    def _replace_vnode(
        self, vnode: int, items: Iterable[tuple[bytes, bytes]], stats: VnodeStats
    ) -> None:
        self._check_writable()
        with self._lock:
            db = self._rdict()
            batch = WriteBatch(raw_mode=True)
            # Later operations in a batch see past its earlier range tombstone.
            self._delete_vnode_into(batch, vnode)
            deque(itertools.starmap(batch.put, items), maxlen=0)
            key = VNODE_PREFIX.pack(vnode)
            if stats.keys:
                batch.put(key, STATS.pack(stats.keys, stats.bytes), self._cfh["stats"])
            else:
                batch.delete(key, self._cfh["stats"])
            self._write(db, batch)

    def drop_vnode(self, vnode: int) -> int:
        check_vnodes([vnode])
        self._check_writable()
        with self._lock:
            db = self._rdict()
            batch = WriteBatch(raw_mode=True)
            deleted = self._delete_vnode_into(batch, vnode)
            key = VNODE_PREFIX.pack(vnode)
            batch.delete(key, self._cfh["stats"])
            batch.delete(key, self._cfh["sealed"])
            forget_range_seals(_Write(self, batch), vnode)
            self._write(db, batch)
            return deleted

    @contextmanager
    def _atomic(self) -> Iterator[StoreWrite]:
        self._check_writable()
        with self._lock:  # no other write of this store in between (one read-write process)
            db = self._rdict()
            batch = WriteBatch(raw_mode=True)
            yield _Write(self, batch)
            self._write(db, batch)

    def checkpoint(self, dest: Path) -> None:
        dest = Path(dest)
        if dest.exists():
            raise StateStoreError(f"checkpoint destination {dest} already exists")
        dest.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            try:
                # hard links of the immutable SST files plus a copy of the live WAL tail
                Checkpoint(self._rdict()).create_checkpoint(str(dest))
            except Exception as exc:  # rocksdict raises bare Exception
                raise StateStoreError(
                    f"RocksDB store {self.path}: checkpoint to {dest}: {exc}"
                ) from exc

    def _delete_vnode_into(self, batch: WriteBatch, vnode: int) -> int:
        """Add the deletion of the vnode's entries to ``batch``; returns how many there are.

        Counted from the data rather than the stats, which trust the callers' Update.old.
        """
        start, end = vnode_range(vnode)
        read_opts = ReadOptions()
        if end is not None:
            read_opts.set_iterate_upper_bound(end)
        keys = cast("Iterator[bytes]", self._rdict().keys(from_key=start, read_opt=read_opts))
        try:
            if end is not None:
                count = sum(1 for _ in keys)
                if count:
                    batch.delete_range(start, end)
                return count
            # The last vnode has no finite end key for a range tombstone: delete point by point.
            count = 0
            for key in keys:
                batch.delete(key)
                count += 1
            return count
        finally:
            del keys  # as in _scan_chunk: the iterator must not outlive the call


class _Write(StoreWrite):
    """A WriteBatch as a :class:`StoreWrite`: reads go to the database (never to the batch),
    under the store's lock."""

    def __init__(self, store: RocksStore, batch: WriteBatch) -> None:
        self._store = store
        self._batch = batch

    def get(self, table: str, key: bytes) -> bytes | None:
        return self._store._read(table, key)

    def scan(self, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        return self._store.scan(start, end)

    def put(self, table: str, key: bytes, value: bytes) -> None:
        if table == ENTRIES:
            self._batch.put(key, value)
        else:
            self._batch.put(key, value, self._store._cfh[table])

    def delete(self, table: str, key: bytes) -> None:
        if table == ENTRIES:
            self._batch.delete(key)
        else:
            self._batch.delete(key, self._store._cfh[table])
