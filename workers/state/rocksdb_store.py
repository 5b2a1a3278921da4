"""The RocksDB state store (``rocksdict``): entries in the default column family, side data in
the ``meta``, ``stats``, ``outputs`` and ``sealed`` (sealed vnodes and the record of sealed key
ranges) column families.

Every mutating method is one WriteBatch across the column families, so it is atomic. Only one
process may open a RocksDB read-write (the LOCK file); readonly stores use RocksDB's read-only
mode, which takes no lock and sees what was committed when it was opened (it replays the WAL).

rocksdict objects that refer to the database (column-family handles, iterators) keep it open,
and with it the LOCK, after ``Rdict.close()``. So the store drops every handle on close, and
reads through :mod:`workers.state.rocksdb_db` (which opens the database), whose iterators never
outlive one call: scans read in chunks, each from a fresh iterator.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import cast

import pyarrow as pa
from rocksdict import Checkpoint, ColumnFamily, Rdict, WriteBatch, WriteOptions

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
from workers.state.rocksdb_db import (
    SCAN_CHUNK,
    SIDE_CFS,
    delete_range_into,
    iter_items,
    multi_get,
    open_db,
    read_chunk,
    read_column,
)


class RocksStore(StateStore):
    backend = "rocksdb"

    def __init__(self, path: Path, *, readonly: bool = False) -> None:
        super().__init__(path, readonly=readonly)
        db = open_db(self.path, readonly=readonly)
        self._db: Rdict | None = db
        self._cf: dict[str, Rdict] = {n: db.get_column_family(n) for n in SIDE_CFS}
        self._cfh: dict[str, ColumnFamily] = {n: db.get_column_family_handle(n) for n in SIDE_CFS}
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
        return multi_get(self._rdict(), keys)

    def scan(self, start: bytes = b"", end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        position = start
        skip_first = False
        while True:
            chunk = read_chunk(self._rdict(), position, end, SCAN_CHUNK + skip_first)
            if skip_first and chunk and chunk[0][0] == position:
                chunk = chunk[1:]
            yield from chunk
            if len(chunk) < SCAN_CHUNK:
                return
            position, skip_first = chunk[-1][0], True

    def vnode_columns(self, vnode: int, keys: int) -> tuple[pa.BinaryArray, pa.BinaryArray]:
        start, end = vnode_range(vnode)
        # one row more than the stats count, to show the vnode ends where they say
        found = read_column(self._rdict(), "keys", start, end, keys + 1)
        values = read_column(self._rdict(), "values", start, end, keys + 1)
        if len(found) > keys:
            raise StateStoreError(f"{self.path}: vnode {vnode} holds more than {keys} keys")
        return binary_array(found), binary_array(values)

    def vnode_stats(self) -> dict[int, VnodeStats]:
        return {
            VNODE_PREFIX.unpack(k)[0]: VnodeStats(*STATS.unpack(v))
            for k, v in iter_items(self._side("stats"))
        }

    def epoch_outputs(self, epoch: int) -> bytes | None:
        if epoch < 0:
            return None
        return self._side("outputs").get(OUTPUT_KEY.pack(epoch))

    def sealed_vnodes(self) -> set[int]:
        # the record of sealed key ranges is no vnode's key (never 2 bytes long)
        return {
            VNODE_PREFIX.unpack(k)[0]
            for k, _ in iter_items(self._side("sealed"))
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
                *sealed, ranges = multi_get(self._cf["sealed"], [*vnode_keys, RANGE_SEALS_KEY])
                touched = [v for v, s in zip(vnodes, sealed, strict=True) if s is not None]
                refuse_sealed(epoch, plan, touched, ranges, self.path)
            batch = WriteBatch(raw_mode=True)
            # Drained by deque in C: no Python step per key.
            deque(itertools.starmap(batch.put, plan.puts), maxlen=0)
            deque(map(batch.delete, plan.deletes), maxlen=0)
            if vnode_keys:
                stats_cf = self._cfh["stats"]
                current = multi_get(self._cf["stats"], vnode_keys)
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
            for key, _ in iter_items(self._cf["outputs"]):
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
        return delete_range_into(self._rdict(), batch, *vnode_range(vnode))


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
