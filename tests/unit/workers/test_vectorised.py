"""The vectorised epoch against the per-key path: the same states and outputs, bit for bit.

Two state roots see the same epochs through ``run_task``, one with the vectorised path and one
with the per-key path; after every epoch their stores (entries, stats, marker) and emitted
outputs must be identical. Prior state is absent, written by an earlier epoch, or written in the
encoding used before the vectorised path (msgpack's compact forms, UserActivity version 1).
"""

from __future__ import annotations

import os
import struct
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

import msgpack
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workers.epoch import TaskSpec, run_task
from workers.hashing import vnode_of
from workers.layout import pu_store
from workers.operators import (
    Count,
    KeyedOperator,
    Max,
    Mean,
    Min,
    PageStats,
    StateVersionError,
    Sum,
    TumblingWindowCount,
    UserActivity,
)
from workers.state import BACKENDS, open_store
from workers.state.base import Update, encode_key
from workers.vectorised import apply_batch

VNODES = 8
KEYS = ["a", "b", "c", "dé", "", "k5", "k6"]
PAGES = ["/", "/x", "/y", "/ü", "/z"]

OPERATORS: dict[str, KeyedOperator] = {
    "count": Count(),
    "sum": Sum("v"),
    "min": Min("v"),
    "max": Max("v"),
    "mean": Mean("v"),
    "page_stats": PageStats(),
    "user_activity": UserActivity(session_gap_s=50),
    "window_count": TumblingWindowCount(window_s=10, retain=3),
}

# Edge values often: NaN (a partial min is NaN only when all of a key's values are), infinities,
# signed zeros; timestamps on a 10 s grid so gaps of exactly the session gap (50) occur.
FLOATS = st.one_of(
    st.sampled_from([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1.5]),
    st.floats(allow_nan=True, allow_infinity=True, width=64),
)
INTS = st.integers(-(10**6), 10**6)
TS = st.integers(0, 20).map(lambda t: t * 10)


@st.composite
def batches(draw: st.DrawFn, start_seq: int) -> pa.RecordBatch:
    """One epoch's records: several keys with duplicates, arriving out of seq order."""
    n = draw(st.integers(0, 25))
    pool = draw(st.sampled_from([KEYS[:2], KEYS[:4], KEYS]))
    keys = draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n))
    seqs = draw(st.permutations(range(start_seq, start_seq + n)))
    floats = draw(st.booleans())
    v = draw(st.lists(FLOATS if floats else INTS, min_size=n, max_size=n))
    return pa.RecordBatch.from_pydict(
        {
            "kind": pa.array(["rec"] * n, pa.string()),
            "key": pa.array(keys, pa.string()),
            "seq": pa.array(seqs, pa.int64()),
            "v": pa.array(v, pa.float64() if floats else pa.int64()),
            "first_visit": pa.array(draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))),
            "page": pa.array(draw(st.lists(st.sampled_from(PAGES), min_size=n, max_size=n))),
            "ts": pa.array(draw(st.lists(TS, min_size=n, max_size=n))),
            "bytes": pa.array(draw(st.lists(INTS, min_size=n, max_size=n)), pa.int64()),
            "src": pa.array([1] * n, pa.int32()),
            "info": pa.nulls(n, pa.string()),
            "vnode": pa.array([vnode_of(k, VNODES) for k in keys], pa.int32()),
            "slot": pa.array([0] * n, pa.int32()),
        }
    )


def legacy_state(name: str, draw: st.DrawFn) -> Any:
    """A state as the operator could have stored it, for the pre-vectorised encodings."""
    if name == "count":
        return draw(st.integers(0, 2**40))
    if name in ("sum", "min", "max"):
        return draw(FLOATS)
    if name == "mean":
        return [draw(FLOATS), draw(st.integers(1, 2**40))]
    if name == "page_stats":
        return [draw(st.integers(0, 2**40)), draw(st.integers(0, 2**40))]
    if name == "user_activity":
        pages = sorted(draw(st.sets(st.sampled_from(PAGES))))
        return [draw(st.integers(0, 99)), draw(INTS), draw(st.integers(0, 9)), draw(INTS), pages]
    windows = sorted(draw(st.dictionaries(st.integers(0, 20).map(lambda w: w * 10), INTS)).items())
    return {"w": windows, "late": draw(st.integers(0, 9))}


def _spec(root: Path, op: KeyedOperator, epoch: int, backend: str, vectorised: bool) -> TaskSpec:
    return TaskSpec(
        fragment="frag",
        operator=op,
        epoch=epoch,
        parallel_units=(3,),
        owned=(tuple(range(VNODES)),),
        state_root=str(root),
        backend=backend,
        terminal=False,
        vectorised=vectorised,
    )


def _outputs(spec: TaskSpec, batch: pa.RecordBatch) -> pa.Table:
    table = pa.Table.from_batches(list(run_task(spec, 0, iter([batch]))))
    return table.filter(pc.equal(table["kind"], "out")).drop_columns(["kind", "info"])


def _bits(table: pa.Table) -> dict[str, list[Any]]:
    """Columns as lists, doubles as their bit patterns (NaN payloads and -0.0 included)."""
    out = {}
    for name in table.column_names:
        column = table[name]
        if pa.types.is_floating(column.type):
            out[name] = np.asarray(column.to_numpy(), np.float64).view(np.int64).tolist()
        else:
            out[name] = column.to_pylist()
    return out


def _store(root: Path, backend: str) -> tuple[Any, ...]:
    with open_store(backend, pu_store(root, "frag", 3), readonly=True) as s:
        return list(s.scan()), s.vnode_stats(), s.applied_epoch()


def _seed(root: Path, backend: str, op: KeyedOperator, states: dict[str, Any]) -> None:
    """Write states in the encoding of before: version 1 + msgpack's compact forms."""
    updates = [
        Update(encode_key(vnode_of(k, VNODES), k.encode()), None, b"\x01" + msgpack.packb(v))
        for k, v in states.items()
    ]
    with open_store(backend, pu_store(root, "frag", 3)) as s:
        s.commit_epoch(0, updates)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[str, dict[str, Any], list[pa.RecordBatch]]:
    name = draw(st.sampled_from(sorted(OPERATORS)))
    legacy_keys = draw(st.sets(st.sampled_from(KEYS), max_size=4))
    legacy = {k: legacy_state(name, draw) for k in sorted(legacy_keys)}
    epochs, seq = [], 0
    for _ in range(draw(st.integers(1, 3))):
        batch = draw(batches(seq))
        seq += batch.num_rows
        epochs.append(batch)
    return name, legacy, epochs


def compare_paths(
    backend: str, name: str, legacy: dict[str, Any], epochs: list[pa.RecordBatch]
) -> None:
    """Run the epochs through both paths; assert identical outputs, stores, and replays."""
    op = OPERATORS[name]
    with (
        tempfile.TemporaryDirectory() as tmp,
        # each example its own executor directory: the stores of one never meet another's
        mock.patch.dict(os.environ, {"RESCALER_LOCAL_DIR": f"{tmp}/executor"}),
    ):
        roots = {mode: Path(tmp) / mode for mode in ("vector", "per_key")}
        if legacy:
            for root in roots.values():
                _seed(root, backend, op, legacy)
        got: dict[str, pa.Table] = {}
        for epoch, batch in enumerate(epochs, start=1):
            got = {
                mode: _outputs(_spec(root, op, epoch, backend, mode == "vector"), batch)
                for mode, root in roots.items()
            }
            assert got["vector"].schema == got["per_key"].schema
            assert _bits(got["vector"]) == _bits(got["per_key"]), f"{name} outputs, epoch {epoch}"
            assert _store(roots["vector"], backend) == _store(roots["per_key"], backend)
        # exactly once: a replayed epoch changes nothing and re-emits what it recorded
        before = _store(roots["vector"], backend)
        again = _outputs(_spec(roots["vector"], op, len(epochs), backend, True), epochs[-1])
        assert _bits(again) == _bits(got["vector"])
        assert _store(roots["vector"], backend) == before


@pytest.mark.parametrize("backend", BACKENDS)
def test_vectorised_path_equals_per_key_path(backend: str) -> None:
    @settings(
        max_examples={"lmdb": 150, "rocksdb": 40}[backend],
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(scenario=scenarios())
    def run(scenario: tuple[str, dict[str, Any], list[pa.RecordBatch]]) -> None:
        compare_paths(backend, *scenario)

    run()


def _batch(start_seq: int, keys: list[str], **columns: list[Any]) -> pa.RecordBatch:
    n = len(keys)
    defaults: dict[str, list[Any]] = {
        "v": [1.0] * n,
        "first_visit": [1] * n,
        "page": ["/"] * n,
        "ts": [0] * n,
        "bytes": [1] * n,
    }
    data = {
        "kind": ["rec"] * n,
        "key": keys,
        "seq": pa.array(range(start_seq, start_seq + n), pa.int64()),
        **{**defaults, **columns},
        "src": pa.array([1] * n, pa.int32()),
        "info": pa.nulls(n, pa.string()),
        "vnode": pa.array([vnode_of(k, VNODES) for k in keys], pa.int32()),
        "slot": pa.array([0] * n, pa.int32()),
    }
    return pa.RecordBatch.from_pydict(data)


NAN = float("nan")
EDGE_CASES = {
    # min/max keep the state when the epoch's part is NaN (all of a key's values NaN), and
    # take a NaN part when there is no state: Python's min/max, not numpy's
    "min": [_batch(0, ["a", "b"], v=[1.0, NAN]), _batch(2, ["a", "a", "b"], v=[NAN, NAN, 2.0])],
    "max": [_batch(0, ["a", "b"], v=[1.0, NAN]), _batch(2, ["a", "a", "b"], v=[NAN, NAN, 2.0])],
    "sum": [_batch(0, ["a", "b"], v=[-0.0, NAN]), _batch(2, ["a"], v=[-0.0])],
    # a gap of exactly the session gap (50) is the same session; 51 opens a new one; the
    # stored last_ts is the latest event, not the last one in seq order
    "user_activity": [
        _batch(0, ["u", "u", "w"], ts=[100, 40, 0], page=["/", "/x", "/"]),
        _batch(3, ["u", "u", "w", "u"], ts=[150, 201, 51, 10], page=["/x", "/y", "/", "/y"]),
    ],
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(EDGE_CASES))
def test_edge_cases_match(backend: str, name: str) -> None:
    compare_paths(backend, name, {}, EDGE_CASES[name])


@pytest.mark.parametrize("backend", BACKENDS)
def test_legacy_states_are_read_and_rewritten(backend: str) -> None:
    epochs = [_batch(0, ["a", "b"])]
    legacy = {"a": [2, 1, 1, 0, ["/", "/z"]], "c": [1, 1, 1, 5, []]}
    compare_paths(backend, "user_activity", legacy, epochs)
    compare_paths(backend, "count", {"a": 3, "b": 2**40}, epochs)
    compare_paths(backend, "mean", {"a": [1.5, 2]}, epochs)


def _read_nothing(keys: pa.Array) -> pa.LargeBinaryArray:
    return pa.nulls(len(keys), pa.large_binary())


def test_only_the_builtin_classes_are_vectorised() -> None:
    class Doubling(Count):
        """A subclass may change update(): it must keep the per-key path."""

        def update(self, key: str, state: Any, records: Any) -> tuple[Any, list[Any]]:
            new = (state or 0) + 2 * records[0][0]
            return new, [(key, new)]

    records = pa.table(
        {"key": ["a"], "seq": pa.array([0], pa.int64()), "vnode": pa.array([1], pa.int32())}
    )
    assert apply_batch(Count(), records, _read_nothing) is not None
    assert apply_batch(Doubling(), records, _read_nothing) is None
    assert (
        apply_batch(TumblingWindowCount(), records.append_column("ts", [[5]]), _read_nothing)
        is None
    )


def test_batches_the_arrays_cannot_take_exactly_fall_back() -> None:
    records = pa.table(
        {
            "key": ["a", "a"],
            "seq": pa.array([0, 1], pa.int64()),
            "vnode": pa.array([1, 1], pa.int32()),
            "v": pa.array([None, None], pa.float64()),
            "first_visit": pa.array([0.5, 1.0]),
        }
    )
    assert apply_batch(Sum("v"), records, _read_nothing) is None, "a null partial sum"
    assert apply_batch(PageStats(), records, _read_nothing) is None, "a non-integer count"


def test_an_unknown_state_version_is_refused_on_both_paths() -> None:
    key = encode_key(vnode_of("a", VNODES), b"a")
    records = pa.table(
        {
            "key": ["a"],
            "seq": pa.array([0], pa.int64()),
            "vnode": pa.array([vnode_of("a", VNODES)], pa.int32()),
        }
    )
    for op, stored in ((Count(), b"\x07" + struct.pack(">Bq", 0xD3, 1)), (UserActivity(), b"\x09")):
        table = records
        if isinstance(op, UserActivity):
            table = (
                records.append_column("page", [["/"]])
                .append_column("ts", [[1]])
                .append_column("bytes", [[1]])
            )

        def read(keys: pa.Array, stored: bytes = stored) -> pa.LargeBinaryArray:
            assert keys.to_pylist() == [key]
            return pa.array([stored], pa.large_binary())

        with pytest.raises(StateVersionError, match="state version"):
            apply_batch(op, table, read)


def test_a_nan_made_by_arithmetic_is_stored_as_the_one_quiet_nan() -> None:
    """inf + -inf is a NaN whose sign IEEE 754 leaves open (x86 makes it negative, Arrow's SIMD
    sums either): both paths store the same canonical bits, so a replay or the other path never
    writes other bytes for the same value."""
    from workers.operators import Sum
    from workers.vectorised.numeric import _fold_sum

    canonical = np.array([np.nan]).view(np.int64)[0]
    state, _ = Sum("v").update("a", float("inf"), [(float("-inf"),)])
    assert np.array([state]).view(np.int64)[0] == canonical
    new, _ = _fold_sum(Sum("v"), np.array([True]), [np.array([np.inf])], [np.array([-np.inf])])
    assert new[0].view(np.int64) == canonical
