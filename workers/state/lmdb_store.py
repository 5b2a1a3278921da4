"""The LMDB state store: one environment per store directory, five named databases in it.

``entries`` holds the state; ``meta`` the applied-epoch marker; ``stats`` per-vnode counts;
``outputs`` the outputs of the last two epochs; ``sealed`` the sealed vnodes and the record of
sealed key ranges. Every mutating
method is one write transaction across them, so it is atomic by construction.

LMDB allows one writer and any number of readers across processes, but forbids opening one
environment twice in a process and using an environment inherited through ``fork``: a store
takes its environment from the per-process cache of :mod:`workers.state.lmdb_env`, and a store
carried across ``fork`` takes a new one in the child.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import lmdb
import pyarrow as pa

from workers.state.base import ColumnUpdates, StateStore, Update
from workers.state.columns import binary_array
from workers.state.commit import (
    APPLIED_EPOCH_KEY,
    EPOCH,
    OUTPUT_KEY,
    CommitPlan,
    check_epoch,
    outputs_kept_from,
    plan_columns,
    plan_commit,
    refuse_sealed,
)
from workers.state.errors import StateStoreError
from workers.state.exports import VnodeExport
from workers.state.key_ranges import StoreWrite, forget_range_seals
from workers.state.keys import (
    RANGE_SEALS_KEY,
    STATS,
    VNODE_PREFIX,
    VnodeStats,
    apply_stats_delta,
    check_vnodes,
    vnode_range,
)
from workers.state.lmdb_env import Env, acquire, release


class LmdbStore(StateStore):
    backend = "lmdb"

    def __init__(self, path: Path, *, readonly: bool = False) -> None:
        super().__init__(path, readonly=readonly)
        self._key, self._entry = acquire(self.path, readonly)
        self._closed = False
        self._lock = threading.Lock()

    # -- lifecycle ---------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._entry.pid == os.getpid():
                release(self._key, self._entry)

    def _env(self) -> Env:
        if self._closed:
            raise StateStoreError(f"state store {self.path} is closed")
        if self._entry.pid != os.getpid():
            # A store carried across fork: the inherited environment must not be touched here,
            # so this process gets its own.
            with self._lock:
                if self._entry.pid != os.getpid():
                    self._key, self._entry = acquire(self.path, self.readonly)
        return self._entry

    def _writable(self) -> Env:
        if self.readonly:
            raise StateStoreError(f"state store {self.path} is open readonly")
        return self._env()

    # -- reads -------------------------------------------------------------------------------
    def applied_epoch(self) -> int:
        e = self._env()
        with e.txn(db=e.dbs["meta"]) as txn:
            raw = txn.get(APPLIED_EPOCH_KEY)
        return -1 if raw is None else EPOCH.unpack(raw)[0]

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        e = self._env()
        with e.txn(db=e.dbs["entries"]) as txn:
            # buffers=False (the default): values are bytes, never memoryviews. map() drives the
            # C getter without a Python step per key.
            return cast("list[bytes | None]", list(map(txn.get, keys)))

    def scan(self, start: bytes = b"", end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        e = self._env()
        # One read transaction for the whole scan: a consistent snapshot, released when the
        # generator finishes or is discarded.
        with e.txn(db=e.dbs["entries"]) as txn:
            yield from _scan(txn, e.dbs["entries"], start, end)

    def vnode_columns(self, vnode: int, keys: int) -> tuple[pa.BinaryArray, pa.BinaryArray]:
        start, _ = vnode_range(vnode)
        e = self._env()
        with e.txn(db=e.dbs["entries"]) as txn:
            cursor = txn.cursor()
            if not cursor.set_range(start):
                return binary_array([]), binary_array([])
            # the cursor's own iterator, in C, for exactly the rows wanted: no Python step per
            # row (one key more, to show the vnode ends where its stats say)
            found = list(itertools.islice(cursor.iternext(values=False), keys + 1))
            if len(found) > keys and VNODE_PREFIX.unpack_from(found[keys])[0] == vnode:
                raise StateStoreError(f"{self.path}: vnode {vnode} holds more than {keys} keys")
            cursor = txn.cursor()
            cursor.set_range(start)
            values = list(itertools.islice(cursor.iternext(keys=False), len(found[:keys])))
            return binary_array(found[:keys]), binary_array(values)

    def vnode_stats(self) -> dict[int, VnodeStats]:
        e = self._env()
        with e.txn(db=e.dbs["stats"]) as txn:
            return {
                VNODE_PREFIX.unpack(k)[0]: VnodeStats(*STATS.unpack(v))
                for k, v in txn.cursor().iternext()
            }

    def epoch_outputs(self, epoch: int) -> bytes | None:
        if epoch < 0:
            return None
        e = self._env()
        with e.txn(db=e.dbs["outputs"]) as txn:
            return cast("bytes | None", txn.get(OUTPUT_KEY.pack(epoch)))

    def sealed_vnodes(self) -> set[int]:
        e = self._env()
        with e.txn(db=e.dbs["sealed"]) as txn:
            keys = cast("Iterator[bytes]", txn.cursor().iternext(values=False))
            # the record of sealed key ranges is no vnode's key (never 2 bytes long)
            return {VNODE_PREFIX.unpack(k)[0] for k in keys if len(k) == VNODE_PREFIX.size}

    def _read(self, table: str, key: bytes) -> bytes | None:
        e = self._env()
        with e.txn(db=e.dbs[table]) as txn:
            return cast("bytes | None", txn.get(key))

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
        self._writable()
        return self._commit(epoch, plan_commit(updates), outputs, outputs_from)

    def commit_columns(
        self,
        epoch: int,
        updates: ColumnUpdates,
        outputs: bytes | None = None,
        *,
        outputs_from: int | None = None,
    ) -> bool:
        check_epoch(epoch)
        self._writable()
        return self._commit(epoch, plan_columns(updates), outputs, outputs_from)

    def _commit(
        self, epoch: int, plan: CommitPlan, outputs: bytes | None, outputs_from: int | None
    ) -> bool:
        e = self._writable()
        dbs = e.dbs
        with e.txn(write=True) as txn:
            raw = txn.get(APPLIED_EPOCH_KEY, db=dbs["meta"])
            if raw is not None and epoch <= EPOCH.unpack(raw)[0]:
                return False
            sealed_db = dbs["sealed"]
            if plan.vnodes:
                touched = [
                    v
                    for v in plan.vnodes
                    if txn.get(VNODE_PREFIX.pack(v), db=sealed_db) is not None
                ]
                ranges = cast("bytes | None", txn.get(RANGE_SEALS_KEY, db=sealed_db))
                refuse_sealed(epoch, plan, touched, ranges, self.path)
            entries = dbs["entries"]
            if plan.puts:
                txn.cursor(db=entries).putmulti(plan.puts)
            for key in plan.deletes:
                txn.delete(key, db=entries)
            _apply_stats(txn, dbs["stats"], plan.stats_delta)
            _write_outputs(txn, dbs["outputs"], epoch, outputs, outputs_from)
            txn.put(APPLIED_EPOCH_KEY, EPOCH.pack(epoch), db=dbs["meta"])
        return True

    def seal(self, vnodes: Iterable[int]) -> None:
        wanted = check_vnodes(vnodes)
        e = self._writable()
        with e.txn(write=True, db=e.dbs["sealed"]) as txn:
            for vnode in wanted:
                txn.put(VNODE_PREFIX.pack(vnode), b"")

    def unseal(self, vnodes: Iterable[int]) -> None:
        wanted = check_vnodes(vnodes)
        e = self._writable()
        with e.txn(write=True, db=e.dbs["sealed"]) as txn:
            for vnode in wanted:
                txn.delete(VNODE_PREFIX.pack(vnode))

    def export_vnode(self, vnode: int) -> VnodeExport:
        check_vnodes([vnode])
        return super().export_vnode(vnode)

    def _replace_vnode(
        self, vnode: int, items: Iterable[tuple[bytes, bytes]], stats: VnodeStats
    ) -> None:
        e = self._writable()
        start, _ = vnode_range(vnode)
        with e.txn(write=True) as txn:
            _delete_range(txn, e.dbs["entries"], *vnode_range(vnode))
            if stats.keys:
                cursor = txn.cursor(db=e.dbs["entries"])
                # verified rows are in key order: past the store's last key (a new PU filled
                # vnode by vnode in order), LMDB appends them without a search per key
                last = cast(bytes, cursor.key()) if cursor.last() else b""
                _, added = cursor.putmulti(items, append=last < start)
                if added != stats.keys:  # the transaction is aborted: nothing is written
                    raise StateStoreError(
                        f"{self.path}: vnode {vnode}: {added} of {stats.keys} keys written"
                    )
            key = VNODE_PREFIX.pack(vnode)
            if stats.keys:
                txn.put(key, STATS.pack(stats.keys, stats.bytes), db=e.dbs["stats"])
            else:
                txn.delete(key, db=e.dbs["stats"])

    def drop_vnode(self, vnode: int) -> int:
        check_vnodes([vnode])
        e = self._writable()
        key = VNODE_PREFIX.pack(vnode)
        with e.txn(write=True) as txn:
            raw = txn.get(key, db=e.dbs["stats"])
            expected = VnodeStats(*STATS.unpack(raw)).keys if raw else 0
            deleted = _delete_range(txn, e.dbs["entries"], *vnode_range(vnode), expected)
            txn.delete(key, db=e.dbs["stats"])
            txn.delete(key, db=e.dbs["sealed"])
            forget_range_seals(_Write(txn, e.dbs), vnode)
        return deleted

    @contextmanager
    def _atomic(self) -> Iterator[StoreWrite]:
        e = self._writable()
        with e.txn(write=True) as txn:
            yield _Write(txn, e.dbs)

    def checkpoint(self, dest: Path) -> None:
        dest = Path(dest)
        if dest.exists():
            raise StateStoreError(f"checkpoint destination {dest} already exists")
        dest.mkdir(parents=True)
        try:
            # one read transaction: the copy is the store as of its last commit, compacted
            self._env().env.copy(str(dest), compact=True)
        except lmdb.Error as exc:
            raise StateStoreError(f"LMDB store {self.path}: checkpoint to {dest}: {exc}") from exc


class _Write(StoreWrite):
    """A write transaction as a :class:`StoreWrite` (its reads see its own earlier writes; the
    key-range operations read first)."""

    def __init__(self, txn: lmdb.Transaction, dbs: dict[str, Any]) -> None:
        self._txn = txn
        self._dbs = dbs

    def get(self, table: str, key: bytes) -> bytes | None:
        return cast("bytes | None", self._txn.get(key, db=self._dbs[table]))

    def scan(self, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        return _scan(self._txn, self._dbs["entries"], start, end)

    def put(self, table: str, key: bytes, value: bytes) -> None:
        self._txn.put(key, value, db=self._dbs[table])

    def delete(self, table: str, key: bytes) -> None:
        self._txn.delete(key, db=self._dbs[table])


def _scan(
    txn: lmdb.Transaction, db: Any, start: bytes, end: bytes | None
) -> Iterator[tuple[bytes, bytes]]:
    """Entries of ``db`` with start <= key < end (end None: to the last), in key order."""
    cursor = txn.cursor(db=db)
    positioned = cursor.set_range(start) if start else cursor.first()
    if not positioned:
        return
    for key, value in cast("Iterator[tuple[bytes, bytes]]", cursor.iternext()):
        if end is not None and key >= end:
            return
        yield key, value


def _delete_range(
    txn: lmdb.Transaction, db: Any, start: bytes, end: bytes | None, expected: int = 0
) -> int:
    """Delete every key in ``[start, end)``; returns how many. ``expected``: how many the
    range holds by its stats. When the keys confirm it (the last of them inside the range, the
    next one past it), they are stepped over and deleted by LMDB's own cursor calls in C, with no
    Python step per key (a vnode dropped in the epoch that acquires it elsewhere is on that
    epoch's path); otherwise one by one."""
    cursor = txn.cursor(db=db)
    if not cursor.set_range(start):
        return 0
    if expected > 0 and _holds_exactly(txn, db, start, end, expected):
        cursor.set_range(start)
        deque(itertools.islice(iter(cursor.delete, False), expected), maxlen=0)
        return expected
    deleted = 0
    while True:
        # After deleting the last record the cursor is unpositioned and key() is b"", which
        # cannot be a real key (LMDB refuses empty keys).
        key = cast(bytes, cursor.key())
        if not key or (end is not None and key >= end):
            return deleted
        cursor.delete()
        deleted += 1


def _holds_exactly(
    txn: lmdb.Transaction, db: Any, start: bytes, end: bytes | None, count: int
) -> bool:
    """Whether ``[start, end)`` holds exactly ``count`` keys: its ``count``-th key from ``start``
    lies inside, and the one after it (if any) outside. The cursor steps in C."""
    cursor = txn.cursor(db=db)
    if not cursor.set_range(start):
        return False
    found = cast(
        "list[bytes]",
        list(itertools.islice(cursor.iternext(values=False), count - 1, count + 1)),
    )
    if not found or (end is not None and found[0] >= end):
        return False  # fewer keys than counted
    return not (len(found) == 2 and (end is None or found[1] < end))  # not more


def _apply_stats(txn: lmdb.Transaction, stats_db: Any, deltas: dict[int, tuple[int, int]]) -> None:
    for vnode, delta in deltas.items():
        key = VNODE_PREFIX.pack(vnode)
        raw = txn.get(key, db=stats_db)
        new = apply_stats_delta(VnodeStats(*STATS.unpack(raw)) if raw else None, delta)
        if new is None:
            txn.delete(key, db=stats_db)
        else:
            txn.put(key, STATS.pack(new.keys, new.bytes), db=stats_db)


def _write_outputs(
    txn: lmdb.Transaction, db: Any, epoch: int, outputs: bytes | None, outputs_from: int | None
) -> None:
    if outputs is not None:
        txn.put(OUTPUT_KEY.pack(epoch), outputs, db=db)
    keep_from = OUTPUT_KEY.pack(outputs_kept_from(epoch, outputs_from))
    cursor = txn.cursor(db=db)
    if cursor.first():
        while (key := cast(bytes, cursor.key())) and key < keep_from:
            cursor.delete()
