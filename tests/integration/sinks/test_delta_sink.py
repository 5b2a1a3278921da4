"""DeltaSink against a real Delta table (delta-rs) in a temporary directory."""

from __future__ import annotations

import pickle
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from tests.integration.sinks.data import FRAGMENT, SCHEMA, WRITES, expected_changelog, outputs
from workers.sinks import EpochOutputs, SinkError, sink_from_uri
from workers.sinks.delta import DeltaSink, app_id

pytestmark = [pytest.mark.integration]

ORDER = ["epoch", "pu", "seq"]


def read_back(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    return sorted(rows, key=lambda r: [r[c] for c in ORDER])


def sorted_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: [r[c] for c in ORDER])


def test_two_epochs_two_pus_then_replays_change_nothing(tmp_path: Path) -> None:
    path = tmp_path / "page_stats"
    sink = DeltaSink(str(path))
    writes = [outputs(epoch, pu) for epoch, pu in WRITES]
    assert [sink.write(out) for out in writes] == [True] * len(writes)
    version = DeltaTable(str(path)).version()

    # a crash between the sink's commit of epoch 2 and Spark's: both PUs write epoch 2 again,
    # from sinks unpickled in fresh executors
    for pu in (1, 0):
        replayed = pickle.loads(pickle.dumps(sink))
        assert replayed._table is None
        assert replayed.write(outputs(2, pu)) is False
    assert sink.write(outputs(0, 1)) is False

    table = DeltaTable(str(path))
    assert table.version() == version  # no commit at all
    assert read_back(path) == sorted_rows(expected_changelog(writes))
    for pu in (0, 1):
        assert table.transaction_version(app_id(FRAGMENT, pu)) == 2


def test_an_empty_epoch_is_recorded_and_its_replay_skipped(tmp_path: Path) -> None:
    path = tmp_path / "t"
    sink = sink_from_uri(f"delta:{path}")
    assert isinstance(sink, DeltaSink)
    assert sink.write(outputs(0, 0))
    empty = EpochOutputs(FRAGMENT, 1, 0, outputs(0, 0).table.slice(0, 0))
    assert sink.write(empty) is True
    assert sink.write(empty) is False
    assert DeltaTable(str(path)).transaction_version(app_id(FRAGMENT, 0)) == 1
    assert read_back(path) == sorted_rows(expected_changelog([outputs(0, 0)]))


def test_concurrent_attempts_of_one_epoch_commit_once(tmp_path: Path) -> None:
    path = tmp_path / "t"
    assert DeltaSink(str(path)).write(outputs(0, 0))
    out = outputs(1, 1)
    results: list[bool] = []
    barrier = threading.Barrier(4)

    def attempt(o: EpochOutputs) -> None:
        sink = DeltaSink(str(path))
        barrier.wait()
        results.append(sink.write(o))

    # three attempts of (1, 1) race with each other and with PU 0's epoch 1
    threads = [threading.Thread(target=attempt, args=(o,)) for o in (out, out, out, outputs(1, 0))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False, False, True, True]
    assert read_back(path) == sorted_rows(expected_changelog([outputs(0, 0), out, outputs(1, 0)]))


def test_a_missing_table_is_a_clear_error_without_create(tmp_path: Path) -> None:
    sink = DeltaSink(str(tmp_path / "absent"), create=False)
    with pytest.raises(SinkError, match=r"Delta table at .*absent does not exist"):
        sink.write(outputs(0, 0))
    assert not (tmp_path / "absent").exists()


def test_outputs_that_do_not_fit_the_table_are_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "t"
    assert DeltaSink(str(path)).write(outputs(0, 0))
    other = pa.table({"key": ["a"], "total": pa.array([1.5])})
    with pytest.raises(SinkError, match="do not match the table's schema"):
        DeltaSink(str(path)).write(EpochOutputs(FRAGMENT, 1, 0, other))
    clash = pa.table({"key": ["a"], "epoch": pa.array([1], pa.int64())})
    with pytest.raises(SinkError, match="adds itself"):
        DeltaSink(str(path)).write(EpochOutputs(FRAGMENT, 1, 0, clash))
    assert len(read_back(path)) == outputs(0, 0).table.num_rows
    assert SCHEMA.names == DeltaTable(str(path)).to_pyarrow_table().column_names[:-2]
