"""Key ranges of a vnode in the state stores (workers/state/key_ranges.py), against every
backend: a hot vnode moves range by range, so a range is sealed, exported, ingested and dropped
on its own."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workers.hashing import MAX_KEY_RANGES, TIMER_MARK, KeyRange, key_range_of
from workers.state import (
    BACKENDS,
    ColumnUpdates,
    IngestMismatch,
    StateStore,
    StateStoreError,
    Update,
    VnodeSealed,
    VnodeStats,
    encode_key,
    open_store,
)
from workers.state.base import columnar_checksum

HOT = 5  # the vnode cut into ranges; its neighbours show that nothing else moves
COUNT = 4


def user_keys(n: int) -> list[bytes]:
    """Record keys, with a timer-index entry beside some (it belongs to its record's range)."""
    keys = [b"key-%d" % i for i in range(n)]
    return keys + [TIMER_MARK + (1000 + i).to_bytes(8, "big") + keys[i] for i in range(0, n, 7)]


def fill(s: StateStore, epoch: int = 0, n: int = 120) -> dict[bytes, bytes]:
    """Commit ``n`` records (and some timers) into HOT and a few into its neighbours."""
    rows = {encode_key(HOT, u): b"v" * (len(u) % 5) + u for u in user_keys(n)}
    rows |= {encode_key(v, b"other-%d" % i): b"x" for v in (HOT - 1, HOT + 1) for i in range(5)}
    assert s.commit_epoch(epoch, [Update(k, None, v) for k, v in rows.items()])
    return rows


def in_range(store_key: bytes, kr: KeyRange) -> bool:
    return key_range_of(store_key[2:], kr.count) == kr.index


def rows_of(columns: tuple[pa.Array, pa.Array]) -> list[tuple[bytes, bytes]]:
    keys, values = columns
    return list(zip(keys.to_pylist(), values.to_pylist(), strict=True))


def recount(s: StateStore) -> dict[int, VnodeStats]:
    """The stats a scan finds: what ``vnode_stats`` must equal."""
    out: dict[int, VnodeStats] = {}
    for key, value in s.scan():
        vnode = int.from_bytes(key[:2], "big")
        old = out.get(vnode, VnodeStats())
        out[vnode] = VnodeStats(old.keys + 1, old.bytes + len(key) + len(value))
    return out


def snapshot(s: StateStore) -> tuple[object, ...]:
    return (
        list(s.scan()),
        s.vnode_stats(),
        s.applied_epoch(),
        s.sealed_vnodes(),
        s.sealed_key_ranges(),
    )


def move(src: StateStore, dst: StateStore, vnode: int, kr: KeyRange) -> int:
    """One range's move as the rescale does it: seal, export, ingest, drop at the source."""
    src.seal_key_range(vnode, kr)
    keys, values = src.key_range_columns(vnode, kr)
    dst.ingest_key_range(vnode, kr, keys, values, columnar_checksum(keys, values))
    return src.drop_key_range(vnode, kr)


# -- partition --------------------------------------------------------------------------------
@pytest.mark.parametrize("count", [1, 3, COUNT, 64])
def test_ranges_of_one_count_partition_a_vnode(store: StateStore, count: int) -> None:
    fill(store)
    whole = list(store.scan_vnode(HOT))
    parts = [rows_of(store.key_range_columns(HOT, KeyRange(i, count))) for i in range(count)]
    for i, part in enumerate(parts):
        assert part == sorted(part)  # key order
        assert all(in_range(k, KeyRange(i, count)) for k, _ in part)
    assert sum(len(p) for p in parts) == len(whole)  # disjoint ...
    assert sorted(row for p in parts for row in p) == whole  # ... and covering
    if count == COUNT:
        assert all(parts), "every range of the test vnode holds keys"
    keys, values = store.key_range_columns(HOT, KeyRange(0, count))
    assert keys.type == pa.binary() and values.type == pa.binary()


def test_a_timer_entry_is_in_its_records_range(store: StateStore) -> None:
    fill(store)
    record = encode_key(HOT, b"key-0")
    timer = encode_key(HOT, TIMER_MARK + (1000).to_bytes(8, "big") + b"key-0")
    kr = KeyRange(key_range_of(b"key-0", COUNT), COUNT)
    keys = store.key_range_columns(HOT, kr)[0].to_pylist()
    assert record in keys and timer in keys


# -- move: export, ingest, drop ------------------------------------------------------------------
def test_moving_ranges_one_by_one_keeps_the_union_and_the_stats(
    backend: str, tmp_path: Path
) -> None:
    with (
        open_store(backend, tmp_path / "a") as a,
        open_store(backend, tmp_path / "b") as b,
    ):
        rows = fill(a)
        original = list(a.scan_vnode(HOT))
        neighbours = [r for r in a.scan() if r[0][:2] != encode_key(HOT, b"")]
        moved = 0
        for i in range(COUNT):
            kr = KeyRange(i, COUNT)
            expected = sum(
                1 for key in rows if key[:2] == encode_key(HOT, b"") and in_range(key, kr)
            )
            assert move(a, b, HOT, kr) == expected
            moved += expected
            union = sorted(list(a.scan_vnode(HOT)) + list(b.scan_vnode(HOT)))
            assert union == original
            assert len(list(b.scan_vnode(HOT))) == moved
            for s in (a, b):
                assert s.vnode_stats() == recount(s)
            # each moved range stays sealed at its source
            assert a.sealed_key_ranges() == {HOT: {KeyRange(j, COUNT) for j in range(i + 1)}}
        assert HOT not in a.vnode_stats()
        a.drop_vnode(HOT)  # the last range moved: the vnode's drop takes the seals
        assert a.sealed_key_ranges() == {}
        assert list(b.scan()) == original
        assert [r for r in a.scan()] == neighbours


def test_ingest_twice_is_harmless_and_replaces_only_its_range(store: StateStore) -> None:
    fill(store)
    kr = KeyRange(1, COUNT)
    keys, values = store.key_range_columns(HOT, kr)
    checksum = columnar_checksum(keys, values)
    other_ranges = [r for r in store.scan_vnode(HOT) if not in_range(r[0], kr)]
    # the store holds a stale copy of the range: one value differs, one key is gone, one extra
    stale_key, stale_value = rows_of((keys, values))[0]
    extra = next(
        encode_key(HOT, b"extra-%d" % i)
        for i in range(1000)
        if in_range(encode_key(HOT, b"extra-%d" % i), kr)
    )
    gone = keys[1].as_py()
    store.commit_epoch(
        1,
        [
            Update(stale_key, stale_value, b"stale"),
            Update(extra, None, b"e"),
            Update(gone, values[1].as_py(), None),
        ],
    )
    for _ in range(2):
        store.ingest_key_range(HOT, kr, keys, values, checksum)
        assert rows_of(store.key_range_columns(HOT, kr)) == rows_of((keys, values))
        assert [r for r in store.scan_vnode(HOT) if not in_range(r[0], kr)] == other_ranges
        assert store.vnode_stats() == recount(store)


def test_ingest_into_an_empty_store_and_of_an_empty_range(backend: str, tmp_path: Path) -> None:
    with open_store(backend, tmp_path / "a") as a, open_store(backend, tmp_path / "b") as b:
        fill(a)
        empty = pa.array([], pa.binary())
        b.ingest_key_range(HOT, KeyRange(0, 2), empty, empty, columnar_checksum(empty, empty))
        assert b.vnode_stats() == {} and list(b.scan()) == []
        held = a.vnode_stats()[HOT].keys
        assert move(a, b, HOT, KeyRange(0, 1)) == held
        assert HOT not in a.vnode_stats()
        # the whole range moved: ingesting an empty copy of it deletes it here
        b.ingest_key_range(HOT, KeyRange(0, 1), empty, empty, columnar_checksum(empty, empty))
        assert list(b.scan()) == [] and b.vnode_stats() == {}


def test_bad_range_exports_are_refused_and_change_nothing(store: StateStore) -> None:
    fill(store)
    kr = KeyRange(2, COUNT)
    keys, values = store.key_range_columns(HOT, kr)
    assert len(keys) >= 2
    store.drop_key_range(HOT, kr)  # the target's side: the range is not here yet
    before = snapshot(store)

    def refused(k: pa.Array, v: pa.Array, checksum: str | None = None) -> None:
        with pytest.raises(IngestMismatch):
            store.ingest_key_range(HOT, kr, k, v, checksum or columnar_checksum(k, v))
        assert snapshot(store) == before

    # a key of the vnode outside the range, with a checksum that matches
    outside = next(k for k, _ in store.scan_vnode(HOT) if not in_range(k, kr))
    with_outside = sorted([*keys.to_pylist(), outside])
    refused(pa.array(with_outside, pa.binary()), pa.array([b"v"] * len(with_outside), pa.binary()))
    refused(keys, values, checksum="c1:" + "0" * 32)  # bad checksum
    refused(keys[::-1], values[::-1])  # unsorted
    refused(pa.array([encode_key(HOT + 1, b"x")], pa.binary()), pa.array([b"v"], pa.binary()))
    refused(keys, values[:-1])  # lengths differ
    refused(keys, pa.array([None] * len(keys), pa.binary()))  # nulls


# -- seals ---------------------------------------------------------------------------------------
def test_commit_into_a_sealed_range_is_refused_other_ranges_are_not(store: StateStore) -> None:
    rows = fill(store)
    sealed, open_ = KeyRange(0, COUNT), KeyRange(3, COUNT)
    store.seal_key_range(HOT, sealed)
    store.seal_key_range(HOT, sealed)  # idempotent
    before = snapshot(store)
    in_sealed = next(k for k in rows if k[:2] == encode_key(HOT, b"") and in_range(k, sealed))
    in_open = next(k for k in rows if k[:2] == encode_key(HOT, b"") and in_range(k, open_))
    new_sealed = next(
        encode_key(HOT, b"new-%d" % i)
        for i in range(1000)
        if in_range(encode_key(HOT, b"new-%d" % i), sealed)
    )
    neighbour = encode_key(HOT + 1, b"n")
    refused_batches = [
        [Update(in_sealed, rows[in_sealed], b"changed")],  # overwrite
        [Update(in_sealed, rows[in_sealed], None)],  # delete
        [Update(new_sealed, None, b"v")],  # a new key of the range
        [
            Update(neighbour, None, b"v"),
            Update(in_open, rows[in_open], b"w"),
            Update(in_sealed, rows[in_sealed], None),
        ],
    ]
    for batch in refused_batches:
        with pytest.raises(VnodeSealed, match="key range"):
            store.commit_epoch(1, batch, b"out")
        keys = pa.array([u.key for u in batch], pa.binary())
        old = pa.array([u.old for u in batch], pa.binary())
        new = pa.array([u.new for u in batch], pa.binary())
        with pytest.raises(VnodeSealed, match="key range"):
            store.commit_columns(1, ColumnUpdates(keys, old, new), b"out")
        assert snapshot(store) == before
        assert store.epoch_outputs(1) is None
    # the vnode's other ranges, and other vnodes, stay writable, by rows and by columns
    assert store.commit_epoch(
        1, [Update(in_open, rows[in_open], b"w"), Update(neighbour, None, b"v")]
    )
    assert store.commit_columns(
        2,
        ColumnUpdates(
            pa.array([in_open], pa.binary()),
            pa.array([b"w"], pa.binary()),
            pa.array([None], pa.binary()),
        ),
    )
    assert store.get(in_open) is None and store.get(neighbour) == b"v"
    assert store.vnode_stats() == recount(store)
    store.unseal_key_range(HOT, sealed)
    store.unseal_key_range(HOT, sealed)  # idempotent
    assert store.commit_epoch(3, [Update(in_sealed, rows[in_sealed], None)])
    assert store.sealed_key_ranges() == {}


def test_range_seals_persist_and_stay_apart_from_vnode_seals(backend: str, tmp_path: Path) -> None:
    path = tmp_path / "store"
    with open_store(backend, path) as s:
        fill(s)
        assert s.sealed_key_ranges() == {}
        s.seal_key_range(HOT, KeyRange(1, COUNT))
        s.seal_key_range(HOT, KeyRange(2, COUNT))
        s.seal_key_range(65535, KeyRange(0, MAX_KEY_RANGES))
        assert s.sealed_vnodes() == set()
        s.seal([HOT + 1])
        s.unseal_key_range(HOT, KeyRange(3, COUNT))  # never sealed: nothing to do
        with pytest.raises(ValueError):
            s.seal_key_range(65536, KeyRange(0, 2))
    expected = {HOT: {KeyRange(1, COUNT), KeyRange(2, COUNT)}, 65535: {KeyRange(0, MAX_KEY_RANGES)}}
    with open_store(backend, path) as s:
        assert s.sealed_key_ranges() == expected
        assert s.sealed_vnodes() == {HOT + 1}
        s.unseal([HOT + 1, HOT])  # a vnode's unseal leaves its ranges' seals alone
        assert s.sealed_vnodes() == set()
        assert s.sealed_key_ranges() == expected
    with open_store(backend, path, readonly=True) as s:
        assert s.sealed_key_ranges() == expected
        for write in (
            lambda: s.seal_key_range(HOT, KeyRange(0, COUNT)),
            lambda: s.unseal_key_range(HOT, KeyRange(1, COUNT)),
            lambda: s.drop_key_range(HOT, KeyRange(1, COUNT)),
        ):
            with pytest.raises(StateStoreError):
                write()


def test_drop_key_range_keeps_it_sealed(store: StateStore) -> None:
    rows = fill(store)
    a, b = KeyRange(0, COUNT), KeyRange(1, COUNT)
    store.seal_key_range(HOT, a)
    store.seal_key_range(HOT, b)
    in_a = [k for k in rows if k[:2] == encode_key(HOT, b"") and in_range(k, a)]
    assert store.drop_key_range(HOT, a) == len(in_a)
    assert store.sealed_key_ranges() == {HOT: {a, b}}
    assert store.get_many(in_a) == [None] * len(in_a)
    assert store.vnode_stats() == recount(store)
    assert store.drop_key_range(HOT, a) == 0  # a repeat changes nothing
    assert store.vnode_stats() == recount(store)
    # the dropped range now lives elsewhere: a stray write to it here is refused
    with pytest.raises(VnodeSealed):
        store.commit_epoch(1, [Update(in_a[0], None, b"back")])


def test_drop_vnode_removes_its_range_seals(store: StateStore) -> None:
    fill(store)
    store.seal_key_range(HOT, KeyRange(0, COUNT))
    store.seal_key_range(HOT, KeyRange(2, COUNT))
    store.seal_key_range(HOT - 1, KeyRange(1, 2))
    store.seal([HOT])
    store.drop_vnode(HOT)
    assert store.sealed_key_ranges() == {HOT - 1: {KeyRange(1, 2)}}
    assert store.sealed_vnodes() == set()
    assert list(store.scan_vnode(HOT)) == [] and HOT not in store.vnode_stats()
    store.drop_vnode(HOT - 1)
    assert store.sealed_key_ranges() == {}


def test_the_last_vnode_moves_by_ranges(backend: str, tmp_path: Path) -> None:
    last = 65535
    with open_store(backend, tmp_path / "a") as a, open_store(backend, tmp_path / "b") as b:
        rows = {encode_key(last, b"\xff" * 3 + u): b"v" for u in user_keys(40)}
        rows |= {encode_key(last, u): b"w" for u in user_keys(40)}
        a.commit_epoch(0, [Update(k, None, v) for k, v in rows.items()])
        for i in range(3):
            move(a, b, last, KeyRange(i, 3))
        assert list(a.scan()) == [] and a.vnode_stats() == {}
        assert dict(b.scan()) == rows and b.vnode_stats() == recount(b)


# -- property ------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend_name", BACKENDS)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    keys=st.sets(st.binary(min_size=1, max_size=12), min_size=0, max_size=60),
    count=st.integers(1, 9),
    order=st.randoms(use_true_random=False),
)
def test_any_order_of_range_moves_moves_the_vnode(
    backend_name: str, keys: set[bytes], count: int, order: object
) -> None:
    rows = {encode_key(HOT, k): k[::-1] for k in keys}
    indexes = list(range(count))
    order.shuffle(indexes)  # type: ignore[attr-defined]
    with (
        tempfile.TemporaryDirectory() as tmp,
        open_store(backend_name, Path(tmp) / "a") as a,
        open_store(backend_name, Path(tmp) / "b") as b,
    ):
        a.commit_epoch(0, [Update(k, None, v) for k, v in rows.items()])
        for n, i in enumerate(indexes):
            kr = KeyRange(i, count)
            a.seal_key_range(HOT, kr)
            columns = a.key_range_columns(HOT, kr)
            for _ in range(2 if n == 0 else 1):  # a repeated step changes nothing
                b.ingest_key_range(HOT, kr, *columns, columnar_checksum(*columns))
                a.drop_key_range(HOT, kr)
            assert dict(a.scan()) | dict(b.scan()) == rows
            assert a.vnode_stats() == recount(a) and b.vnode_stats() == recount(b)
        assert list(a.scan()) == [] and dict(b.scan()) == rows
