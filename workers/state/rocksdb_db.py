"""The RocksDB database under a store (``rocksdict``): opening it, and reading it safely.

A store's database is opened read-write (creating it and its side column families,
:data:`SIDE_CFS`) or in RocksDB's read-only mode (:func:`open_db`), with one block cache per
process (:func:`shared_block_cache`); rocksdict's bare exceptions become
:class:`~workers.state.errors.StateStoreError` s that say what happened (another read-write
opener holds the LOCK, say).

rocksdict objects that refer to the database (column-family handles, iterators) keep it open,
and with it the LOCK, after ``Rdict.close()``. So no iterator here outlives one call: a scan
reads in chunks (:func:`read_chunk`, :data:`SCAN_CHUNK` rows), each from a fresh iterator, and
:func:`read_column` and :func:`delete_range_into` drop theirs before they return.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, cast

from rocksdict import (
    AccessType,
    BlockBasedOptions,
    Cache,
    Options,
    Rdict,
    ReadOptions,
    WriteBatch,
)

from workers.state.errors import StateStoreError

SIDE_CFS = ("meta", "stats", "outputs", "sealed")
SCAN_CHUNK = 4096
_BLOCK_CACHE_BYTES = 64 << 20

_cache_lock = threading.Lock()
_block_cache: Cache | None = None


def shared_block_cache() -> Cache:
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
    table.set_block_cache(shared_block_cache())
    opts.set_block_based_table_factory(table)
    opts.set_max_background_jobs(2)
    # A new info LOG is started at every open, i.e. every task: keep only a few.
    opts.set_keep_log_file_num(2)
    return opts


def open_db(path: Path, *, readonly: bool) -> Rdict:
    """The database in ``path`` with its side column families: read-only (it must exist; no
    lock taken, it sees what was committed when it was opened), or read-write (created if
    missing; RocksDB allows one read-write opener of a directory)."""
    if readonly:
        if not (path / "CURRENT").is_file():
            raise StateStoreError(f"no RocksDB state store at {path}")
        access = AccessType.read_only(False)
    else:
        if (path / "data.mdb").exists():
            raise StateStoreError(f"{path} holds an LMDB store, not a RocksDB one")
        path.mkdir(parents=True, exist_ok=True)
        access = AccessType.read_write()
    try:
        return Rdict(
            str(path),
            _options(),
            column_families={name: Options(raw_mode=True) for name in SIDE_CFS},
            access_type=access,
        )
    except Exception as exc:  # rocksdict raises bare Exception
        if "lock" in str(exc).lower():
            raise StateStoreError(
                f"RocksDB store {path} is already open read-write (by another process "
                f"or another store in this one); RocksDB allows one read-write opener: {exc}"
            ) from exc
        raise StateStoreError(f"cannot open RocksDB store at {path}: {exc}") from exc


# rocksdict's stubs type keys and values as any scalar; in raw mode they are bytes.
def multi_get(rdict: Rdict, keys: list[bytes]) -> list[bytes | None]:
    return cast("list[bytes | None]", rdict.get(cast("list[Any]", keys)))


def iter_items(
    rdict: Rdict, start: bytes | None = None, read_opts: ReadOptions | None = None
) -> Iterator[tuple[bytes, bytes]]:
    return cast("Iterator[tuple[bytes, bytes]]", rdict.items(from_key=start, read_opt=read_opts))


def _bounded(end: bytes | None) -> ReadOptions:
    read_opts = ReadOptions()
    if end is not None:
        read_opts.set_iterate_upper_bound(end)
    return read_opts


def read_chunk(db: Rdict, start: bytes, end: bytes | None, limit: int) -> list[tuple[bytes, bytes]]:
    """At most ``limit`` entries from ``start`` (inclusive) to ``end`` (exclusive; None: the
    last key), in key order, from one iterator dropped before the return."""
    rows = iter_items(db, start, _bounded(end))
    try:
        out: list[tuple[bytes, bytes]] = []
        for item in rows:
            out.append(item)
            if len(out) >= limit:
                break
        return out
    finally:
        # The iterator pins the database (and its LOCK) past close(): drop it here even when
        # an exception's traceback keeps this frame alive.
        del rows


def read_column(
    db: Rdict, part: Literal["keys", "values"], start: bytes, end: bytes | None, limit: int
) -> list[bytes]:
    """At most ``limit`` keys (or values) of the entries from ``start`` to ``end``, in key
    order: the iterator's own loop, in Rust, with no Python step per row."""
    rows = getattr(db, part)(from_key=start, read_opt=_bounded(end))
    try:
        return list(itertools.islice(rows, limit))
    finally:
        del rows  # it pins the database past close() (see read_chunk)


def delete_range_into(db: Rdict, batch: WriteBatch, start: bytes, end: bytes | None) -> int:
    """Add the deletion of the entries from ``start`` to ``end`` (None: the last key) to
    ``batch``; returns how many there are, counted from the data."""
    keys = cast("Iterator[bytes]", db.keys(from_key=start, read_opt=_bounded(end)))
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
        del keys  # as in read_chunk: the iterator must not outlive the call
