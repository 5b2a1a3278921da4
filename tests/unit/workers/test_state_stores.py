"""The state store contract (workers/state/base.py), checked against every backend."""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import tempfile
from collections.abc import Callable, Iterator
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Event
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workers.state import (
    BACKENDS,
    DEFAULT_BACKEND,
    STATS,
    VNODE_PREFIX,
    ColumnUpdates,
    IngestMismatch,
    StateStore,
    StateStoreError,
    Update,
    VnodeExport,
    VnodeSealed,
    VnodeStats,
    checksum_items,
    encode_key,
    max_user_key_bytes,
    open_store,
    vnode_range,
)
from workers.state.base import columnar_checksum

SPAWN = mp.get_context("spawn")
CHILD_TIMEOUT = 60


def k(vnode: int, key: bytes) -> bytes:
    return encode_key(vnode, key)


def new(key: bytes, value: bytes) -> Update:
    return Update(key, None, value)


def snapshot(s: StateStore) -> tuple[object, ...]:
    """Everything a store holds, for before/after comparisons."""
    applied = s.applied_epoch()
    outputs = {e: s.epoch_outputs(e) for e in range(max(applied - 3, 0), applied + 2)}
    return (list(s.scan()), s.vnode_stats(), applied, outputs, s.sealed_vnodes())


def in_vnode(key: bytes, vnode: int) -> bool:
    return key[:2] == vnode.to_bytes(2, "big")


def stats_of(items: dict[bytes, bytes]) -> dict[int, VnodeStats]:
    out: dict[int, list[int]] = {}
    for key, value in items.items():
        vnode = int.from_bytes(key[:2], "big")
        acc = out.setdefault(vnode, [0, 0])
        acc[0] += 1
        acc[1] += len(key) + len(value)
    return {v: VnodeStats(keys=a[0], bytes=a[1]) for v, a in out.items()}


# -- factory -------------------------------------------------------------------------------------
def test_open_store_knows_its_backends(tmp_path: Path) -> None:
    assert DEFAULT_BACKEND in BACKENDS
    with pytest.raises(ValueError, match="unknown state store backend"):
        open_store("sqlite", tmp_path / "x")
    for backend in BACKENDS:
        with open_store(backend, tmp_path / backend) as s:
            assert s.backend == backend
            assert s.applied_epoch() == -1
            assert s.vnode_stats() == {}
            assert s.sealed_vnodes() == set()
            assert list(s.scan()) == []


def test_backends_refuse_each_others_directories(tmp_path: Path) -> None:
    open_store("lmdb", tmp_path / "l").close()
    open_store("rocksdb", tmp_path / "r").close()
    with pytest.raises(StateStoreError):
        open_store("rocksdb", tmp_path / "l")
    with pytest.raises(StateStoreError):
        open_store("lmdb", tmp_path / "r")


def test_readonly_open_of_missing_store_fails_and_creates_nothing(
    backend: str, tmp_path: Path
) -> None:
    with pytest.raises(StateStoreError):
        open_store(backend, tmp_path / "missing", readonly=True)
    assert not (tmp_path / "missing").exists()


# -- commit --------------------------------------------------------------------------------------
def test_commit_applies_updates_marker_and_outputs(store: StateStore) -> None:
    assert store.commit_epoch(0, [new(k(3, b"a"), b"1"), new(k(3, b"b"), b"22")], b"out0")
    assert store.applied_epoch() == 0
    assert store.get_many([k(3, b"b"), k(3, b"zz"), k(3, b"a")]) == [b"22", None, b"1"]
    assert store.get(k(3, b"a")) == b"1"
    assert store.get_many([]) == []
    assert store.epoch_outputs(0) == b"out0"
    assert store.commit_epoch(1, [Update(k(3, b"a"), b"1", None)])
    assert store.get(k(3, b"a")) is None
    assert store.applied_epoch() == 1
    assert store.epoch_outputs(1) is None  # no outputs recorded with epoch 1


def test_replay_of_same_or_older_epoch_returns_false_and_changes_nothing(store: StateStore) -> None:
    assert store.commit_epoch(4, [new(k(1, b"a"), b"v4")], b"o4")
    assert store.commit_epoch(5, [Update(k(1, b"a"), b"v4", b"v5")], b"o5")
    before = snapshot(store)
    replay = [Update(k(1, b"a"), b"v5", b"other"), new(k(2, b"new"), b"x")]
    assert store.commit_epoch(5, replay, b"changed") is False
    assert store.commit_epoch(4, replay, b"changed") is False
    assert store.commit_epoch(0, replay) is False
    assert snapshot(store) == before
    assert store.epoch_outputs(5) == b"o5"


def test_replay_check_precedes_seal_check(store: StateStore) -> None:
    assert store.commit_epoch(2, [new(k(9, b"a"), b"x")])
    store.seal([9])
    # A replayed epoch already happened before the seal: it must be a no-op, not an error.
    assert store.commit_epoch(2, [new(k(9, b"a"), b"x")]) is False


def test_failed_commit_writes_nothing(backend: str, store: StateStore) -> None:
    assert store.commit_epoch(0, [new(k(1, b"a"), b"x")], b"o")
    before = snapshot(store)

    def updates_then_failure() -> Iterator[Update]:
        yield new(k(1, b"b"), b"y")
        raise RuntimeError("operator failed mid-epoch")

    with pytest.raises(RuntimeError):
        store.commit_epoch(1, updates_then_failure(), b"o1")
    with pytest.raises(ValueError):
        store.commit_epoch(1, [new(k(1, b"c"), b"y"), Update(b"\x01", None, b"short key")])
    with pytest.raises(ValueError):
        store.commit_epoch(-1, [])
    if backend == "lmdb":
        # LMDB rejects keys over 511 bytes inside the write transaction, after earlier puts.
        with pytest.raises(StateStoreError, match=r"(?i)size"):
            store.commit_epoch(1, [new(k(1, b"c"), b"y"), new(k(1, b"x" * 600), b"z")])
    assert snapshot(store) == before


def test_the_declared_key_limit_is_the_backends_own(backend: str, store: StateStore) -> None:
    """The API refuses a too long key from the declared limit, without opening a store: the
    limit must be exactly where the backend's own refusal starts."""
    longest = max_user_key_bytes(backend)
    assert store.commit_epoch(0, [new(k(1, b"x" * (longest or 4096)), b"v")])
    if longest is not None:
        with pytest.raises(StateStoreError, match=r"(?i)size"):
            store.commit_epoch(1, [new(k(1, b"y" * (longest + 1)), b"v")])


def test_stats_follow_updates(store: StateStore) -> None:
    a, b, c = k(7, b"a"), k(7, b"bb"), k(8, b"c")
    store.commit_epoch(0, [new(a, b"1234"), new(b, b"1"), new(c, b"xyz")])
    assert store.vnode_stats() == {7: VnodeStats(2, 3 + 4 + 4 + 1), 8: VnodeStats(1, 3 + 3)}
    # Overwrite with a different size.
    store.commit_epoch(1, [Update(a, b"1234", b"123456789")])
    assert store.vnode_stats()[7] == VnodeStats(2, 3 + 9 + 4 + 1)
    # Delete, and a key updated twice in one epoch.
    store.commit_epoch(2, [Update(b, b"1", None), Update(c, b"xyz", b"x"), Update(c, b"x", b"xy")])
    assert store.vnode_stats() == {7: VnodeStats(1, 3 + 9), 8: VnodeStats(1, 3 + 2)}
    assert store.get(c) == b"xy"
    # A vnode with no key left has no stats entry.
    store.commit_epoch(3, [Update(c, b"xy", None)])
    assert store.vnode_stats() == {7: VnodeStats(1, 12)}
    # Put then delete of a new key in one epoch leaves nothing behind.
    store.commit_epoch(4, [new(c, b"q"), Update(c, b"q", None)])
    assert store.get(c) is None
    assert store.vnode_stats() == {7: VnodeStats(1, 12)}


def test_outputs_kept_for_epoch_and_previous_only(store: StateStore) -> None:
    for epoch in range(5):
        store.commit_epoch(epoch, [], b"out%d" % epoch)
    assert [store.epoch_outputs(e) for e in range(6)] == [None, None, None, b"out3", b"out4", None]
    # Skipping epochs discards everything older than the new epoch - 1.
    store.commit_epoch(9, [], b"out9")
    assert [store.epoch_outputs(e) for e in (3, 4, 8, 9)] == [None, None, None, b"out9"]
    store.commit_epoch(10, [], b"")
    assert store.epoch_outputs(9) == b"out9"
    assert store.epoch_outputs(10) == b""
    assert store.epoch_outputs(-1) is None


# -- sealing -------------------------------------------------------------------------------------
def test_sealed_vnodes_refuse_writes(store: StateStore) -> None:
    store.commit_epoch(0, [new(k(5, b"a"), b"1"), new(k(6, b"a"), b"1")], b"o0")
    store.seal([5])
    store.seal([5])  # idempotent
    assert store.sealed_vnodes() == {5}
    before = snapshot(store)
    with pytest.raises(VnodeSealed):
        store.commit_epoch(1, [new(k(6, b"b"), b"2"), Update(k(5, b"a"), b"1", b"2")], b"o1")
    with pytest.raises(VnodeSealed):
        store.commit_epoch(1, [new(k(5, b"new"), b"2")])
    assert snapshot(store) == before
    assert store.applied_epoch() == 0
    # Other vnodes remain writable.
    assert store.commit_epoch(1, [new(k(6, b"b"), b"2")])
    store.unseal([5])
    store.unseal([5, 77])  # idempotent, and unsealing an unsealed vnode is fine
    assert store.sealed_vnodes() == set()
    assert store.commit_epoch(2, [Update(k(5, b"a"), b"1", b"2")])
    assert store.get(k(5, b"a")) == b"2"
    with pytest.raises(ValueError):
        store.seal([65536])


# -- export, ingest, drop ------------------------------------------------------------------------
def test_export_ingest_round_trip(backend: str, tmp_path: Path) -> None:
    with (
        open_store(backend, tmp_path / "src") as src,
        open_store(backend, tmp_path / "dst") as dst,
    ):
        src.commit_epoch(0, [new(k(4, b"k%03d" % i), b"v" * (i % 7)) for i in range(50)])
        src.commit_epoch(1, [new(k(3, b"x"), b"1"), new(k(5, b"x"), b"1")])
        src.seal([4])
        export = src.export_vnode(4)
        assert export.vnode == 4 and export.keys == 50 and len(export.items) == 50
        assert export.items == sorted(export.items)
        assert export.checksum == checksum_items(export.items)
        dst.ingest(export)
        dst.ingest(export)  # idempotent
        assert list(dst.scan()) == export.items
        assert dst.vnode_stats() == {4: src.vnode_stats()[4]}
        assert dst.applied_epoch() == -1  # ingest does not move the marker


def test_ingest_refuses_bad_exports_and_writes_nothing(store: StateStore) -> None:
    store.commit_epoch(0, [new(k(2, b"old"), b"o"), new(k(3, b"n"), b"n")])
    items = [(k(2, b"a"), b"1"), (k(2, b"b"), b"2")]
    good = VnodeExport(vnode=2, items=items, keys=2, checksum=checksum_items(items))
    outside = [(k(2, b"a"), b"1"), (k(3, b"b"), b"2")]
    unsorted = [(k(2, b"b"), b"2"), (k(2, b"a"), b"1")]
    duplicate = [(k(2, b"a"), b"1"), (k(2, b"a"), b"1")]
    bad = [
        dataclasses.replace(good, keys=3),
        dataclasses.replace(good, checksum="0" * 32),
        dataclasses.replace(good, items=[*items, (k(2, b"c"), b"3")]),  # count differs
        dataclasses.replace(good, items=[items[0], (k(2, b"b"), b"X")]),  # checksum differs
        VnodeExport(vnode=2, items=outside, keys=2, checksum=checksum_items(outside)),
        VnodeExport(vnode=2, items=unsorted, keys=2, checksum=checksum_items(unsorted)),
        VnodeExport(vnode=2, items=duplicate, keys=2, checksum=checksum_items(duplicate)),
    ]
    before = snapshot(store)
    for export in bad:
        with pytest.raises(IngestMismatch):
            store.ingest(export)
        assert snapshot(store) == before
    store.ingest(good)
    assert list(store.scan_vnode(2)) == items


def _columns(items: list[tuple[bytes, bytes]]) -> tuple[pa.Array, pa.Array]:
    return pa.array([a for a, _ in items], pa.binary()), pa.array(
        [b for _, b in items], pa.binary()
    )


def test_a_vnode_read_as_columns_is_its_scan(store: StateStore) -> None:
    store.commit_epoch(
        0, [new(k(v, b"k%04d" % i), b"v" * (i % 9)) for v in (1, 2, 4) for i in range(300)]
    )
    stats = store.vnode_stats()
    for vnode in (1, 2, 4):
        keys, values = store.vnode_columns(vnode, stats[vnode].keys)
        assert list(zip(keys.to_pylist(), values.to_pylist(), strict=True)) == list(
            store.scan_vnode(vnode)
        )
    empty = store.vnode_columns(3, 0)
    assert len(empty[0]) == len(empty[1]) == 0
    # the columnar digest is the same however the rows are sliced out of a larger column
    keys, values = store.vnode_columns(2, 300)
    whole_k, whole_v = _columns(list(store.scan()))
    assert columnar_checksum(keys, values) == columnar_checksum(
        whole_k.slice(300, 300), whole_v.slice(300, 300)
    )


def test_ingest_columns_refuses_what_ingest_refuses(store: StateStore) -> None:
    """A snapshot's run, verified on its buffers: the same refusals as an item export."""
    store.commit_epoch(0, [new(k(2, b"old"), b"o"), new(k(3, b"n"), b"n")])
    items = [(k(2, b"a"), b"1"), (k(2, b"b"), b"2")]
    outside = [(k(2, b"a"), b"1"), (k(3, b"b"), b"2")]
    unsorted = [(k(2, b"b"), b"2"), (k(2, b"a"), b"1")]
    duplicate = [(k(2, b"a"), b"1"), (k(2, b"a"), b"1")]
    short = [(b"\x00", b"1")]
    before = snapshot(store)
    for rows in (outside, unsorted, duplicate, short):
        with pytest.raises(IngestMismatch):
            store.ingest_columns(2, *_columns(rows), columnar_checksum(*_columns(rows)))
        assert snapshot(store) == before
    flipped = [items[0], (k(2, b"b"), b"X")]
    with pytest.raises(IngestMismatch, match="checksum"):
        store.ingest_columns(2, *_columns(flipped), columnar_checksum(*_columns(items)))
    assert snapshot(store) == before
    store.ingest_columns(2, *_columns(items), columnar_checksum(*_columns(items)))
    assert list(store.scan_vnode(2)) == items
    assert store.vnode_stats()[2].keys == 2


def test_ingest_replaces_existing_range(store: StateStore) -> None:
    store.commit_epoch(
        0,
        [
            new(k(1, b"n"), b"1"),
            new(k(2, b"gone"), b"x"),
            new(k(2, b"b"), b"old"),
            new(k(3, b"n"), b"3"),
        ],
    )
    items = [(k(2, b"a"), b"A"), (k(2, b"b"), b"new")]
    store.ingest(VnodeExport(2, items, 2, checksum_items(items)))
    assert list(store.scan()) == [(k(1, b"n"), b"1"), *items, (k(3, b"n"), b"3")]
    assert store.vnode_stats()[2] == VnodeStats(2, 3 + 1 + 3 + 3)
    # An empty export empties the vnode.
    store.ingest(VnodeExport(2, [], 0, checksum_items([])))
    assert list(store.scan_vnode(2)) == []
    assert 2 not in store.vnode_stats()
    assert set(store.vnode_stats()) == {1, 3}


@pytest.mark.parametrize("victim", [0, 1, 65534, 65535])
def test_drop_vnode_removes_exactly_its_range(store: StateStore, victim: int) -> None:
    vnodes = [0, 1, 2, 65534, 65535]
    updates = [new(k(v, key), b"v") for v in vnodes for key in (b"", b"\x00", b"m", b"\xff\xff")]
    # The empty user key is the vnode prefix alone: the first key of the vnode's range.
    store.commit_epoch(0, updates)
    store.seal([victim, 2])
    assert store.drop_vnode(victim) == 4
    assert store.drop_vnode(victim) == 0  # idempotent
    remaining = [(u.key, b"v") for u in updates if u.key[:2] != victim.to_bytes(2, "big")]
    assert list(store.scan()) == sorted(remaining)
    assert set(store.vnode_stats()) == set(vnodes) - {victim}
    assert store.sealed_vnodes() == {2} - {victim}


@pytest.mark.parametrize("stats_keys", [0, 1, 3, 4, 5, 40])
@pytest.mark.parametrize("victim", [1, 65535])
def test_lmdb_drop_removes_exactly_its_range_whatever_its_stats_say(
    tmp_path: Path, victim: int, stats_keys: int
) -> None:
    """LMDB deletes a vnode's keys in C when its stats' count is confirmed by the keys, one by
    one otherwise: a wrong count (a damaged stats entry) never deletes a neighbour's key."""
    vnodes = [0, 1, 2, 65534, 65535]
    updates = [new(k(v, key), b"v") for v in vnodes for key in (b"", b"\x00", b"m", b"\xff\xff")]
    with open_store("lmdb", tmp_path / "s") as store:
        store.commit_epoch(0, updates)
        env = store._writable()
        with env.txn(write=True, db=env.dbs["stats"]) as txn:
            txn.put(VNODE_PREFIX.pack(victim), STATS.pack(stats_keys, 4))
        assert store.drop_vnode(victim) == 4
        remaining = [(u.key, b"v") for u in updates if u.key[:2] != victim.to_bytes(2, "big")]
        assert list(store.scan()) == sorted(remaining)
        assert set(store.vnode_stats()) == set(vnodes) - {victim}


def test_vnode_range_edges() -> None:
    assert vnode_range(0) == (b"\x00\x00", b"\x00\x01")
    assert vnode_range(65535) == (b"\xff\xff", None)
    assert vnode_range(255) == (b"\x00\xff", b"\x01\x00")


# -- reads ---------------------------------------------------------------------------------------
def test_scan_order_and_bounds(store: StateStore) -> None:
    # More keys than one scan chunk, inserted in a scrambled order.
    keys = [k(v, b"%05d" % i) for v in (0, 1, 300, 65535) for i in range(2500)]
    scrambled = sorted(keys, key=lambda key: key[::-1])
    store.commit_epoch(0, [new(key, key[-3:]) for key in scrambled])
    assert [key for key, _ in store.scan()] == sorted(keys)
    assert [key for key, _ in store.scan_vnode(1)] == sorted(
        key for key in keys if key[:2] == b"\0\1"
    )
    middle = list(store.scan(k(1, b"00100"), k(300, b"00005")))
    assert middle[0][0] == k(1, b"00100") and middle[-1][0] == k(300, b"00004")
    assert len(middle) == 2400 + 5
    assert list(store.scan(k(2, b""), k(3, b""))) == []
    assert list(store.scan(k(65535, b"02499"))) == [(k(65535, b"02499"), b"499")]


def test_reopen_keeps_everything(backend: str, tmp_path: Path) -> None:
    path = tmp_path / "store"
    with open_store(backend, path) as s:
        s.commit_epoch(3, [new(k(1, b"a"), b"1")], b"o3")
        s.commit_epoch(4, [new(k(2, b"b"), b"2")], b"o4")
        s.seal([2])
        before = snapshot(s)
    s.close()  # closing twice is harmless
    with pytest.raises(StateStoreError):
        s.applied_epoch()
    with open_store(backend, path) as s:
        assert snapshot(s) == before
    with open_store(backend, path, readonly=True) as r:
        assert snapshot(r) == before


def test_readonly_store_refuses_writes(backend: str, tmp_path: Path) -> None:
    path = tmp_path / "store"
    open_store(backend, path).close()
    with open_store(backend, path, readonly=True) as r:
        with pytest.raises(StateStoreError, match="readonly"):
            r.commit_epoch(0, [new(k(1, b"a"), b"1")])
        with pytest.raises(StateStoreError, match="readonly"):
            r.seal([1])
        with pytest.raises(StateStoreError, match="readonly"):
            r.drop_vnode(1)
        with pytest.raises(StateStoreError, match="readonly"):
            r.ingest(VnodeExport(1, [], 0, checksum_items([])))
        assert r.applied_epoch() == -1


# -- across processes ----------------------------------------------------------------------------
def _commit_and_hold(backend: str, path: str, ready: Event, release: Event) -> None:
    with open_store(backend, Path(path)) as s:
        s.commit_epoch(1, [new(k(7, b"child"), b"from-child")], b"child-out")
        ready.set()
        release.wait(CHILD_TIMEOUT)


def _hold_open(backend: str, path: str, ready: Event, release: Event) -> None:
    with open_store(backend, Path(path)):
        ready.set()
        release.wait(CHILD_TIMEOUT)


def _start_child(
    target: Callable[[str, str, Event, Event], None], backend: str, path: Path
) -> tuple[BaseProcess, Event]:
    """Start ``target`` in a spawned process once it has opened the store; returns the process
    and the event that lets it close the store and exit."""
    ready, release = SPAWN.Event(), SPAWN.Event()
    proc = SPAWN.Process(target=target, args=(backend, str(path), ready, release), daemon=True)
    proc.start()
    if not ready.wait(CHILD_TIMEOUT):
        proc.kill()
        pytest.fail("child process did not open the store")
    return proc, release


def _finish_child(proc: BaseProcess, release: Event) -> None:
    release.set()
    proc.join(CHILD_TIMEOUT)
    assert proc.exitcode == 0


def test_readonly_open_sees_commit_of_writer_in_another_process(
    backend: str, tmp_path: Path
) -> None:
    path = tmp_path / "store"
    with open_store(backend, path) as s:
        s.commit_epoch(0, [new(k(7, b"parent"), b"p")])
    early = open_store(backend, path, readonly=True) if backend == "lmdb" else None
    proc, release = _start_child(_commit_and_hold, backend, path)
    try:
        # The writer is still open: the readonly store must not need it closed.
        with open_store(backend, path, readonly=True) as r:
            assert r.applied_epoch() == 1
            assert r.get_many([k(7, b"child"), k(7, b"parent")]) == [b"from-child", b"p"]
            assert r.epoch_outputs(1) == b"child-out"
            assert r.vnode_stats() == {7: VnodeStats(2, 7 + 10 + 8 + 1)}
        if early is not None:
            # LMDB readers see every commit at their next read transaction.
            assert early.get(k(7, b"child")) == b"from-child"
    finally:
        if early is not None:
            early.close()
        _finish_child(proc, release)


def test_rocksdb_second_read_write_open_fails_until_first_closes(tmp_path: Path) -> None:
    path = tmp_path / "store"
    open_store("rocksdb", path).close()
    proc, release = _start_child(_hold_open, "rocksdb", path)
    try:
        with pytest.raises(StateStoreError, match="already open read-write"):
            open_store("rocksdb", path)
    finally:
        _finish_child(proc, release)
    with open_store("rocksdb", path) as s:
        assert s.commit_epoch(0, [new(k(1, b"a"), b"1")])


def test_rocksdb_close_releases_lock_within_process(tmp_path: Path) -> None:
    path = tmp_path / "store"
    s = open_store("rocksdb", path)
    with pytest.raises(StateStoreError, match="already open read-write"):
        open_store("rocksdb", path)
    s.commit_epoch(0, [new(k(1, b"a"), b"1")])
    partial = s.scan()
    next(partial)  # a half-consumed scan must not keep the database open
    s.close()
    with open_store("rocksdb", path) as again:
        assert again.get(k(1, b"a")) == b"1"


def test_lmdb_allows_writers_in_two_processes(tmp_path: Path) -> None:
    path = tmp_path / "store"
    open_store("lmdb", path).close()
    proc, release = _start_child(_commit_and_hold, "lmdb", path)
    try:
        with open_store("lmdb", path) as s:
            assert s.commit_epoch(2, [new(k(8, b"parent"), b"p")])
    finally:
        _finish_child(proc, release)
    with open_store("lmdb", path, readonly=True) as r:
        assert r.applied_epoch() == 2
        assert r.get_many([k(7, b"child"), k(8, b"parent")]) == [b"from-child", b"p"]


# -- batch methods (the vectorised epoch) --------------------------------------------------------
def test_get_column_reads_values_and_nulls(store: StateStore) -> None:
    store.commit_epoch(0, [new(k(3, b"a"), b"1"), new(k(65535, b"b"), b""), new(k(4, b"c"), b"x")])
    keys = [k(3, b"a"), k(3, b"zz"), k(65535, b"b"), k(4, b"c")]
    for typ in (pa.binary(), pa.large_binary()):
        got = store.get_column(pa.array(keys, typ))
        assert got.type == pa.large_binary()
        assert got.to_pylist() == [b"1", None, b"", b"x"] == store.get_many(keys)
    assert store.get_column(pa.array([], pa.binary())).to_pylist() == []


def columns(keys: list[bytes], old: list[bytes | None], new: list[bytes | None]) -> ColumnUpdates:
    return ColumnUpdates(*(pa.array(c, pa.binary()) for c in (keys, old, new)))


def test_commit_columns_applies_updates_stats_outputs_and_marker(store: StateStore) -> None:
    a, b, c = k(3, b"a"), k(3, b"b"), k(9, b"c")
    assert store.commit_columns(
        0, columns([b, a, c], [None, None, None], [b"22", b"1", b"333"]), b"o"
    )
    assert list(store.scan()) == [(a, b"1"), (b, b"22"), (c, b"333")]
    assert store.vnode_stats() == stats_of({a: b"1", b: b"22", c: b"333"})
    assert store.epoch_outputs(0) == b"o" and store.applied_epoch() == 0
    assert store.commit_columns(1, columns([a, c], [b"1", b"333"], [b"1111", None]))
    assert list(store.scan()) == [(a, b"1111"), (b, b"22")]
    assert store.vnode_stats() == stats_of({a: b"1111", b: b"22"})
    before = snapshot(store)
    assert store.commit_columns(1, columns([a], [b"1111"], [b"x"]), b"again") is False
    assert snapshot(store) == before, "a replayed epoch writes nothing"


def test_commit_columns_refuses_bad_columns_and_sealed_vnodes_writing_nothing(
    store: StateStore,
) -> None:
    a = k(3, b"a")
    store.commit_epoch(0, [new(a, b"1")], b"o0")
    before = snapshot(store)
    bad = [
        columns([a, a], [b"1", b"1"], [b"2", b"3"]),  # a key repeats
        columns([b"\x03"], [None], [b"2"]),  # no vnode prefix
        columns([a], [b"1"], [b"2", b"3"]),  # lengths differ
        ColumnUpdates(pa.array([None], pa.binary()), *(pa.array([b"2"], pa.binary()),) * 2),
    ]
    for updates in bad:
        with pytest.raises(ValueError):
            store.commit_columns(1, updates, b"o1")
        assert snapshot(store) == before
    store.seal([3])
    with pytest.raises(VnodeSealed):
        store.commit_columns(1, columns([k(5, b"x"), a], [None, b"1"], [b"y", b"2"]), b"o1")
    assert snapshot(store) == (*before[:4], {3}), "only the seal changed"


# -- a random walk against a model ---------------------------------------------------------------
VNODES = st.sampled_from([0, 1, 2, 65534, 65535])
USER_KEYS = st.sampled_from([b"", b"a", b"b", b"\x00", b"\xff"])
VALUES = st.one_of(st.none(), st.binary(max_size=6))
STORE_IDX = st.integers(0, 1)
OPS = st.one_of(
    st.tuples(
        st.just("commit"),
        STORE_IDX,
        st.integers(-2, 2),
        st.lists(st.tuples(VNODES, USER_KEYS, VALUES), max_size=6),
        st.one_of(st.none(), st.binary(max_size=3)),
        st.booleans(),  # as columns (commit_columns) rather than a list of Update
    ),
    st.tuples(st.just("seal"), STORE_IDX, st.lists(VNODES, max_size=2)),
    st.tuples(st.just("unseal"), STORE_IDX, st.lists(VNODES, max_size=2)),
    st.tuples(st.just("move"), STORE_IDX, VNODES, st.sampled_from([None, "keys", "checksum"])),
    st.tuples(st.just("drop"), STORE_IDX, VNODES),
    st.tuples(st.just("reopen"), STORE_IDX),
)


@dataclasses.dataclass
class Model:
    entries: dict[bytes, bytes] = dataclasses.field(default_factory=dict)
    applied: int = -1
    outputs: dict[int, bytes] = dataclasses.field(default_factory=dict)
    sealed: set[int] = dataclasses.field(default_factory=set)

    def vnode_items(self, vnode: int) -> list[tuple[bytes, bytes]]:
        return sorted((key, v) for key, v in self.entries.items() if in_vnode(key, vnode))


def check_matches(s: StateStore, m: Model) -> None:
    assert list(s.scan()) == sorted(m.entries.items())
    assert s.vnode_stats() == stats_of(m.entries)
    assert s.sealed_vnodes() == m.sealed
    assert s.applied_epoch() == m.applied
    for epoch in range(max(m.applied - 3, 0), m.applied + 2):
        assert s.epoch_outputs(epoch) == m.outputs.get(epoch)


# Opening a RocksDB costs tens of milliseconds (several fsyncs), LMDB a fraction of one: give
# each backend as many examples as fit in a few seconds.
EXAMPLES = {"rocksdb": 20, "lmdb": 60}


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_random_operations_match_a_dict_model(backend_name: str) -> None:
    @settings(
        max_examples=EXAMPLES.get(backend_name, 60),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(ops=st.lists(OPS, min_size=5, max_size=30))
    def run(ops: list[tuple]) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            paths = [Path(tmp) / "a", Path(tmp) / "b"]
            stores = [open_store(backend_name, p) for p in paths]
            models = [Model(), Model()]
            try:
                for op in ops:
                    _apply(op, stores, models, paths, backend_name)
                    for s, m in zip(stores, models, strict=True):
                        check_matches(s, m)
            finally:
                for s in stores:
                    s.close()

    run()


def _apply(
    op: tuple, stores: list[StateStore], models: list[Model], paths: list[Path], backend: str
) -> None:
    kind, i = op[0], op[1]
    s, m = stores[i], models[i]
    if kind == "commit":
        _, _, delta, changes, outputs, as_columns = op
        epoch = max(m.applied + delta, 0)
        work = dict(m.entries)
        updates = []
        final: dict[bytes, bytes | None] = {}
        for vnode, user_key, value in changes:
            key = k(vnode, user_key)
            updates.append(Update(key, work.get(key), value))
            final[key] = value
            if value is None:
                work.pop(key, None)
            else:
                work[key] = value

        def commit() -> bool:
            if not as_columns:
                return s.commit_epoch(epoch, updates, outputs)
            keys = list(final)
            columns = ColumnUpdates(
                pa.array(keys, pa.binary()),
                pa.array([m.entries.get(key) for key in keys], pa.binary()),
                pa.array([final[key] for key in keys], pa.large_binary()),
            )
            return s.commit_columns(epoch, columns, outputs)

        if epoch <= m.applied:
            assert commit() is False
        elif {vnode for vnode, _, _ in changes} & m.sealed:
            with pytest.raises(VnodeSealed):
                commit()
        else:
            assert commit() is True
            m.entries, m.applied = work, epoch
            if outputs is not None:
                m.outputs[epoch] = outputs
            m.outputs = {e: o for e, o in m.outputs.items() if e >= epoch - 1}
    elif kind == "seal":
        s.seal(op[2])
        m.sealed |= set(op[2])
    elif kind == "unseal":
        s.unseal(op[2])
        m.sealed -= set(op[2])
    elif kind == "move":
        _, _, vnode, tamper = op
        export = s.export_vnode(vnode)
        assert export.items == m.vnode_items(vnode)
        target, target_model = stores[1 - i], models[1 - i]
        if tamper == "keys":
            export = dataclasses.replace(export, keys=export.keys + 1)
        elif tamper == "checksum":
            export = dataclasses.replace(export, checksum="f" * 32)
        if tamper:
            with pytest.raises(IngestMismatch):
                target.ingest(export)
        else:
            target.ingest(export)
            kept = {key: v for key, v in target_model.entries.items() if not in_vnode(key, vnode)}
            target_model.entries = kept | dict(export.items)
    elif kind == "drop":
        vnode = op[2]
        assert s.drop_vnode(vnode) == len(m.vnode_items(vnode))
        m.entries = {key: v for key, v in m.entries.items() if not in_vnode(key, vnode)}
        m.sealed.discard(vnode)
    elif kind == "reopen":
        s.close()
        stores[i] = open_store(backend, paths[i])
