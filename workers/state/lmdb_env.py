"""LMDB environments, one per store directory and process, shared by the stores that use it.

LMDB allows one writer and any number of readers across processes, but forbids opening one
environment twice in a process (closing either handle drops the other's POSIX locks) and using an
environment inherited through ``fork``. Environments are therefore shared through a per-process
cache keyed by (realpath, pid) and reference-counted by the stores using them
(:func:`acquire`, :func:`release`); a child of ``fork`` starts with an empty cache, and closes
what it inherited only when no transaction was in flight. An environment holds the store's five
named databases (:data:`DB_NAMES`); its map is ``RESCALER_LMDB_MAP_SIZE`` (:func:`map_size`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lmdb

from workers.state.commit import fsync_enabled
from workers.state.errors import StateStoreError

DEFAULT_MAP_SIZE = 32 << 30
DB_NAMES = ("entries", "meta", "stats", "outputs", "sealed")
_SUFFIXES = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def map_size() -> int:
    """RESCALER_LMDB_MAP_SIZE (bytes, or with a K/M/G/T suffix), default 32 GiB.

    The map is only address space: the data file grows with the data, so a large value is free
    and avoids MDB_MAP_FULL, which no running task could recover from.
    """
    raw = os.environ.get("RESCALER_LMDB_MAP_SIZE", "").strip().lower().removesuffix("ib")
    if not raw:
        return DEFAULT_MAP_SIZE
    scale = _SUFFIXES.get(raw[-1], 1)
    number = raw[:-1] if raw[-1] in _SUFFIXES else raw
    try:
        return int(float(number) * scale)
    except ValueError:
        raise StateStoreError(f"RESCALER_LMDB_MAP_SIZE={raw!r} is not a size") from None


@dataclass(eq=False)
class Env:
    """One open environment, its databases, the process that opened it and how many stores and
    transactions use it."""

    env: lmdb.Environment
    dbs: dict[str, Any]  # name -> lmdb database handle
    pid: int
    refs: int = 0
    active: int = 0  # transactions in flight: whether the env may be closed after a fork
    lock: threading.Lock = field(default_factory=threading.Lock)

    @contextmanager
    def txn(self, *, write: bool = False, db: Any = None) -> Iterator[lmdb.Transaction]:
        """A transaction committed on success and aborted on error."""
        with self.lock:
            self.active += 1
        try:
            txn = self.env.begin(write=write, db=db)
            try:
                yield txn
            except BaseException:
                txn.abort()
                raise
            # Committing a write transaction that changed nothing does no I/O.
            txn.commit()
        except lmdb.Error as exc:
            # Callers handle StateStoreError, not each backend's exceptions.
            raise StateStoreError(f"LMDB store {self.env.path()}: {exc}") from exc
        finally:
            with self.lock:
                self.active -= 1


_ENVS: dict[tuple[str, int], Env] = {}
_ENVS_LOCK = threading.Lock()
# Environments inherited through fork that had transactions in flight: never closed in the
# child, because closing aborts those transactions, which clears the parent's reader slots in
# the shared lock file. py-lmdb refuses to reopen their files in the child while they exist.
_INHERITED: list[Env] = []


def _after_fork_in_child() -> None:
    global _ENVS_LOCK
    # The parent's lock may have been held by a thread that does not exist here.
    _ENVS_LOCK = threading.Lock()
    for entry in _ENVS.values():
        entry.lock = threading.Lock()
        if entry.active:
            _INHERITED.append(entry)
            continue
        try:
            # With no transaction to abort, mdb_env_close only unmaps and closes this process's
            # descriptors (it clears reader slots by getpid(), and the child has none), which
            # frees the files for this process's own environment.
            entry.env.close()
        except lmdb.Error:
            _INHERITED.append(entry)
    _ENVS.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def acquire(path: Path, readonly: bool) -> tuple[tuple[str, int], Env]:
    if readonly:
        if not (path / "data.mdb").is_file():
            raise StateStoreError(f"no LMDB state store at {path}")
    else:
        if (path / "CURRENT").exists():
            raise StateStoreError(f"{path} holds a RocksDB store, not an LMDB one")
        path.mkdir(parents=True, exist_ok=True)
    key = (os.path.realpath(path), os.getpid())
    with _ENVS_LOCK:
        entry = _ENVS.get(key)
        if entry is None:
            entry = _open_env(path, readonly)
            _ENVS[key] = entry
        entry.refs += 1
        return key, entry


def _open_env(path: Path, readonly: bool) -> Env:
    sync = fsync_enabled()
    try:
        # The environment is always opened read-write, even for a readonly store: one process
        # may hold a readonly and a read-write store on the same directory, and the environment
        # cannot be opened twice nor change mode. Readonly is enforced by the store.
        env = lmdb.open(
            str(path),
            map_size=map_size(),
            subdir=True,
            create=not readonly,
            lock=True,
            max_dbs=len(DB_NAMES),
            sync=sync,
            metasync=sync,
            readahead=False,  # point lookups over a file that may exceed RAM
            meminit=False,
        )
    except lmdb.Error as exc:
        hint = ""
        if "already open" in str(exc):
            hint = " (inherited through fork with a transaction in flight: open stores after fork)"
        raise StateStoreError(f"cannot open LMDB store at {path}: {exc}{hint}") from exc
    try:
        # Handles opened in a read transaction are not usable by write transactions, so open
        # them in a (change-free, hence I/O-free) write transaction.
        with env.begin(write=True) as txn:
            dbs = {n: env.open_db(n.encode(), txn=txn, create=not readonly) for n in DB_NAMES}
    except lmdb.Error as exc:
        env.close()
        raise StateStoreError(f"{path} is not a complete LMDB state store: {exc}") from exc
    # A task killed mid-read leaves its reader slot behind, and a stale slot pins the pages of
    # its snapshot forever (the file then only grows): free the slots of dead processes.
    env.reader_check()
    return Env(env=env, dbs=dbs, pid=os.getpid())


def release(key: tuple[str, int], entry: Env) -> None:
    with _ENVS_LOCK:
        entry.refs -= 1
        if entry.refs == 0 and entry.pid == os.getpid() and _ENVS.get(key) is entry:
            del _ENVS[key]
            entry.env.close()
