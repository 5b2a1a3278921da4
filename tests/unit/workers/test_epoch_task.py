"""The per-PU epoch task without Spark: folding, exactly-once replay, routing checks, the sink."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from workers.epoch import RoutingError, TaskSpec, run_task
from workers.hashing import vnode_of
from workers.layout import pu_store, sink_path
from workers.operators import Count, UserActivity
from workers.state import BACKENDS, open_store
from workers.state.base import encode_key

VNODES = 16


def _records(keys: list[str], start_seq: int = 0, **columns: list) -> pa.RecordBatch:
    n = len(keys)
    data = {
        "kind": pa.array(["rec"] * n),
        "key": pa.array(keys, pa.string()),
        "seq": pa.array(range(start_seq, start_seq + n), pa.int64()),
        **{name: pa.array(values) for name, values in columns.items()},
        "src": pa.array([1] * n, pa.int32()),
        "info": pa.nulls(n, pa.string()),
        "vnode": pa.array([vnode_of(k, VNODES) for k in keys], pa.int32()),
        "slot": pa.array([0] * n, pa.int32()),
    }
    return pa.RecordBatch.from_pydict(data)


def _spec(tmp_path: Path, operator, epoch: int, backend: str, terminal: bool = False) -> TaskSpec:
    return TaskSpec(
        fragment="frag",
        operator=operator,
        epoch=epoch,
        parallel_units=(7,),
        owned=(tuple(range(VNODES)),),
        state_root=str(tmp_path),
        backend=backend,
        terminal=terminal,
    )


def _run(spec: TaskSpec, batch: pa.RecordBatch | None) -> tuple[pa.Table, list[str]]:
    out = list(run_task(spec, 0, iter([batch] if batch is not None else [])))
    table = pa.Table.from_batches(out)
    stats = [i for k, i in zip(table["kind"].to_pylist(), table["info"].to_pylist()) if k == "stat"]
    return table.filter(pc.equal(table["kind"], "out")), stats


def _value(tmp_path: Path, backend: str, operator, key: str):
    with open_store(backend, pu_store(tmp_path, "frag", 7), readonly=True) as store:
        raw = store.get(encode_key(vnode_of(key, VNODES), key.encode()))
    return None if raw is None else operator.decode(raw)


@pytest.mark.parametrize("backend", BACKENDS)
def test_count_folds_and_a_replayed_epoch_changes_nothing(tmp_path: Path, backend: str) -> None:
    op = Count()
    batch = _records(["a", "b", "a", "c", "a"])
    outputs, _ = _run(_spec(tmp_path, op, 0, backend), batch)
    assert dict(zip(outputs["key"].to_pylist(), outputs["count"].to_pylist())) == {
        "a": 3,
        "b": 1,
        "c": 1,
    }
    replayed, stats2 = _run(_spec(tmp_path, op, 0, backend), batch)
    assert replayed.to_pydict() == outputs.to_pydict(), "a replay re-emits the recorded outputs"
    assert '"replay": true' in stats2[0]
    assert _value(tmp_path, backend, op, "a") == 3, "the replay must not count twice"
    _run(_spec(tmp_path, op, 1, backend), _records(["a"], start_seq=5))
    assert _value(tmp_path, backend, op, "a") == 4


@pytest.mark.parametrize("backend", BACKENDS)
def test_order_sensitive_operator_sees_records_in_source_order(
    tmp_path: Path, backend: str
) -> None:
    op = UserActivity(session_gap_s=100)
    # arrival order differs from source order: the task must sort by seq
    batch = pa.RecordBatch.from_pydict(
        {
            **_records(["u", "u", "u"]).to_pydict(),
            "seq": pa.array([2, 0, 1], pa.int64()),
            "page": ["p3", "p1", "p2"],
            "ts": pa.array([1_300, 1_000, 1_050], pa.int64()),
            "bytes": pa.array([1, 1, 1], pa.int64()),
        }
    )
    outputs, _ = _run(_spec(tmp_path, op, 0, backend), batch)
    # in source order the gaps are 50 and 250: two sessions; in arrival order it would be three
    events, _, sessions, last_ts, pages = _value(tmp_path, backend, op, "u")
    assert (events, sessions, last_ts, pages) == (3, 2, 1_300, ["p1", "p2", "p3"])
    assert outputs["key"].to_pylist() == ["p1", "p2", "p3"]


def test_records_of_a_vnode_the_pu_does_not_own_are_refused(tmp_path: Path) -> None:
    batch = _records(["a", "b"])
    spec = _spec(tmp_path, Count(), 0, "lmdb")
    spec = TaskSpec(**{**spec.__dict__, "owned": ((vnode_of("a", VNODES),),)})
    if vnode_of("a", VNODES) == vnode_of("b", VNODES):
        pytest.skip("a and b share a vnode")  # deterministic: never true for these keys
    with pytest.raises(RoutingError, match="does not own"):
        _run(spec, batch)
    with open_store("lmdb", pu_store(tmp_path, "frag", 7), readonly=True) as store:
        assert store.applied_epoch() == -1, "a refused epoch writes nothing"


def test_terminal_fragment_writes_the_sink_idempotently(tmp_path: Path) -> None:
    spec = _spec(tmp_path, Count(), 3, "lmdb", terminal=True)
    outputs, _ = _run(spec, _records(["x", "y", "x"]))
    assert outputs.num_rows == 0, "the last fragment writes the sink instead of emitting"
    path = sink_path(tmp_path, "frag", 3, 7)
    first = pa.ipc.open_file(pa.OSFile(str(path))).read_all()
    _run(spec, _records(["x", "y", "x"]))
    again = pa.ipc.open_file(pa.OSFile(str(path))).read_all()
    assert first.to_pydict() == again.to_pydict()
    assert dict(zip(first["key"].to_pylist(), first["count"].to_pylist())) == {"x": 2, "y": 1}


def test_empty_partition_advances_the_marker(tmp_path: Path) -> None:
    _, stats = _run(_spec(tmp_path, Count(), 4, "lmdb"), None)
    assert '"records": 0' in stats[0]
    with open_store("lmdb", pu_store(tmp_path, "frag", 7), readonly=True) as store:
        assert store.applied_epoch() == 4
