"""LMDB's environments (workers/state/lmdb_env.py): the stores of one directory share one
environment per process, closing one store closes nothing under the others, and a store carried
across ``fork`` gets the child's own environment, leaving the parent's readers alone."""

from __future__ import annotations

import multiprocessing as mp
import os
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

from workers.state import StateStore, Update, encode_key, open_store

CHILD_TIMEOUT = 60


def k(vnode: int, key: bytes) -> bytes:
    return encode_key(vnode, key)


def new(key: bytes, value: bytes) -> Update:
    return Update(key, None, value)


def test_lmdb_stores_share_one_environment_per_process(tmp_path: Path) -> None:
    path = tmp_path / "store"
    first = open_store("lmdb", path)
    second = open_store("lmdb", path)
    reader = open_store("lmdb", path, readonly=True)
    first.commit_epoch(0, [new(k(1, b"a"), b"1")])
    first.close()
    # Closing one store must not close the environment under the others.
    assert second.get(k(1, b"a")) == b"1"
    assert second.commit_epoch(1, [Update(k(1, b"a"), b"1", b"2")])
    assert reader.get(k(1, b"a")) == b"2"
    second.close()
    reader.close()


def _read_in_forked_child(store: StateStore, path: str, out: Connection) -> None:
    # Both a store inherited through fork and a fresh open must get this process's own env.
    try:
        fresh = open_store("lmdb", Path(path), readonly=True)
        result: object = (store.get(k(1, b"a")), fresh.get(k(1, b"a")))
        fresh.close()
        store.close()
    except Exception as exc:
        result = repr(exc)
    out.send(result)
    out.close()


def _fork_and_read(store: StateStore, path: Path) -> object:
    # A pipe, not a Queue: a Queue starts a feeder thread in the child. And a child that hangs
    # (forking a process with other threads can deadlock it) is killed, so the suite never waits
    # on it at exit.
    fork = mp.get_context("fork")
    receiver, sender = fork.Pipe(duplex=False)
    proc = fork.Process(target=_read_in_forked_child, args=(store, str(path), sender))
    proc.start()
    sender.close()
    try:
        assert receiver.poll(CHILD_TIMEOUT), (
            f"the forked child answered nothing in {CHILD_TIMEOUT}s"
        )
        result = receiver.recv()
        proc.join(CHILD_TIMEOUT)
        assert proc.exitcode == 0
        return result
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join(5)
        receiver.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_lmdb_store_reopens_after_fork(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with open_store("lmdb", path) as s:
        s.commit_epoch(0, [new(k(1, b"a"), b"1"), new(k(1, b"b"), b"2")])
        assert _fork_and_read(s, path) == (b"1", b"1")
        # The child's close must not have closed the parent's environment.
        assert s.commit_epoch(1, [Update(k(1, b"a"), b"1", b"2")])
        assert s.get(k(1, b"a")) == b"2"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_lmdb_fork_during_a_scan_leaves_the_parent_reader_alone(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with open_store("lmdb", path) as s:
        s.commit_epoch(0, [new(k(1, b"a"), b"1"), new(k(1, b"b"), b"2")])
        scan = s.scan()
        assert next(scan) == (k(1, b"a"), b"1")
        # The scan's read transaction is live: the child must neither close the inherited
        # environment (that would free the parent's reader slot) nor open the files again.
        result = _fork_and_read(s, path)
        assert isinstance(result, str) and "StateStoreError" in result
        s.commit_epoch(1, [Update(k(1, b"b"), b"2", b"changed")])
        assert list(scan) == [(k(1, b"b"), b"2")]  # still the snapshot it started from
        assert s.get(k(1, b"b")) == b"changed"
