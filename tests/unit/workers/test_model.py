"""Operators, hashing, the generator, the JSON-lines parser, placements and the oracle."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from workers.hashing import stable_hash64, vnode_of
from workers.operators import (
    Count,
    Max,
    Mean,
    Min,
    PageStats,
    StateVersionError,
    Sum,
    TumblingWindowCount,
)
from workers.oracle import clickstream, compare, wordcount
from workers.pipeline.builtins import get_pipeline
from workers.pipeline.model import UnknownFragment, UnknownPipeline
from workers.pipeline.placement import EpochPlan, PlacementStore, VnodeMapping
from workers.sources import jsonl
from workers.sources.generator import GeneratorConfig, generate


def test_hash_matches_spark_xxhash64_reference_values() -> None:
    # values printed by Spark 4.3: SELECT xxhash64(k), pmod(xxhash64(k), 256)
    assert stable_hash64("a") == -8582455328737087284
    assert stable_hash64("hello") == -4367754540140381902
    assert stable_hash64("ünïcode") == 7851432979556462327
    assert vnode_of("k0000001", 256) == 241
    assert vnode_of("", 256) == 4


def _fold(op, chunks):
    state = None
    for chunk in chunks:
        table = pa.table(chunk)
        combined = op.combine(table)
        rows = combined.to_pylist() if combined is not None else None
        assert rows is not None and len(rows) == 1
        state, _ = op.update("k", state, [tuple(list(rows[0].values())[1:])])
    return state


def test_numeric_operators_fold_partials_across_epochs() -> None:
    chunks = [
        {"key": ["k", "k"], "seq": [0, 1], "v": [3.0, 5.0]},
        {"key": ["k"], "seq": [2], "v": [-1.0]},
    ]
    assert _fold(Count(), [{k: v for k, v in c.items() if k != "v"} for c in chunks]) == 3
    assert _fold(Sum("v"), chunks) == 7.0
    assert _fold(Min("v"), chunks) == -1.0
    assert _fold(Max("v"), chunks) == 5.0
    mean = Mean("v")
    assert mean.to_json(_fold(mean, chunks)) == {"sum": 7.0, "count": 3, "mean": 7.0 / 3}


def test_window_count_keeps_retained_windows_and_counts_late_records() -> None:
    op = TumblingWindowCount(window_s=10, retain=2)
    state, outputs = op.update("k", None, [(0,), (5,), (12,), (25,)])
    # windows 0, 10, 20 seen; retain 2 keeps 10 and 20
    assert op.to_json(state) == {"windows": {"10": 1, "20": 1}, "late": 0}
    state, outputs = op.update("k", state, [(1,), (19,)])
    assert op.to_json(state) == {"windows": {"10": 2, "20": 1}, "late": 1}
    assert outputs == [("k", 10, 2)]


def test_state_encoding_is_versioned() -> None:
    op = PageStats()
    data = op.encode([3, 2])
    assert data[0] == 1 and op.decode(data) == [3, 2]
    with pytest.raises(StateVersionError, match="state version 9"):
        op.decode(bytes([9]) + data[1:])


@given(st.integers(0, 200_000), st.integers(0, 5_000))
def test_generator_is_replayable_from_any_offset(start: int, length: int) -> None:
    config = GeneratorConfig(kind="events", key_space=1_000)
    whole = pa.Table.from_batches(generate(config, 0, start + length), config.schema)
    part = generate(config, start, start + length)
    sliced = whole.slice(start, length)
    if length:
        assert pa.Table.from_batches(part).equals(sliced)
    assert sliced["seq"].to_pylist() == list(range(start, start + length))


def test_generator_keys_are_zipf_skewed() -> None:
    config = GeneratorConfig(kind="events", key_space=10_000, zipf_s=1.1)
    users = pa.Table.from_batches(generate(config, 0, 50_000))["user"].to_pylist()
    top = max(set(users), key=users.count)
    assert users.count(top) > 50_000 / 100, "the hottest key takes far more than a uniform share"
    assert len(set(users)) > 2_000


def test_jsonl_parse_reports_each_kind_of_malformed_line(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_text(
        "\n".join(
            [
                json.dumps({"user": "u", "page": "p", "ts": 1, "bytes": 2}),
                "{oops",
                json.dumps({"user": "u", "page": "p", "ts": 1}),
                json.dumps({"user": "u", "page": "p", "ts": True, "bytes": 2}),
                "",
                json.dumps([1]),
            ]
        )
    )
    rows = jsonl.read_file("events", path, 3).to_pylist()
    assert [r["seq"] & 0xFFFFFFFF for r in rows] == [0, 1, 2, 3, 5]
    assert all(r["seq"] >> 32 == 3 for r in rows)
    problems = [r["_malformed"] for r in rows]
    assert problems[0] is None
    assert "invalid JSON" in problems[1]
    assert "missing field 'bytes'" in problems[2]
    assert "'ts' must be an integer" in problems[3]
    assert "not a JSON object" in problems[4]


def test_a_json_kind_source_hands_each_record_to_prepare_as_its_text(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    record = {"order": 7, "items": [{"sku": "x", "n": 2}], "at": "2024-03-01T12:00:00Z"}
    path.write_text("\n".join([json.dumps(record), "{oops", json.dumps([1]), ""]))
    rows = jsonl.read_file("json", path, 0).to_pylist()
    assert [json.loads(r["value"]) if r["value"] else None for r in rows] == [record, None, None]
    assert [r["_malformed"] is None for r in rows] == [True, False, False]
    assert jsonl.schema_for("json").names == ["seq", "value", "_malformed"]


def test_manifest_appends_late_files_in_discovery_order(tmp_path: Path) -> None:
    inbox = tmp_path / "in"
    inbox.mkdir()
    (inbox / "b.jsonl").write_text("")
    (inbox / ".partial.jsonl").write_text("")
    manifest = jsonl.Manifest(inbox, tmp_path / "manifest.txt")
    assert manifest.refresh() == ["b.jsonl"]
    (inbox / "a.jsonl").write_text("")
    assert manifest.refresh() == ["b.jsonl", "a.jsonl"], (
        "a late file goes last even if it sorts first"
    )
    with pytest.raises(FileNotFoundError, match="does not exist"):
        jsonl.Manifest(tmp_path / "missing", tmp_path / "m2").refresh()


def test_initial_placement_is_balanced_and_contiguous() -> None:
    p = VnodeMapping.initial("f", 256, [4, 9, 2])
    sizes = [len(p.vnodes_of(pu)) for pu in p.parallel_units]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 256
    assert p.mapping[0] == 4 and p.mapping[-1] == 2
    assert p.slot_of_vnode()[0] == 0 and p.slot_of_vnode()[-1] == 2
    with pytest.raises(ValueError, match="not in"):
        VnodeMapping("f", (1,), (1, 2))
    with pytest.raises(ValueError, match="at least one"):
        VnodeMapping("f", (), ())


def test_placement_store_round_trips_placements_and_plans(tmp_path: Path) -> None:
    store = PlacementStore(tmp_path)
    assert store.load() is None and store.last_plan() is None
    placements = {"f": VnodeMapping.initial("f", 8, [0, 1])}
    store.save(placements)
    store.save_plan(EpochPlan(5, placements))
    assert store.load() == placements
    assert store.last_plan() == EpochPlan(5, placements)


def test_pipelines_and_fragments_are_looked_up_with_clear_errors() -> None:
    assert [f.name for f in get_pipeline("clickstream").fragments] == [
        "user_activity",
        "page_stats",
    ]
    with pytest.raises(UnknownPipeline, match="built-in pipelines: clickstream, wordcount"):
        get_pipeline("nope")
    with pytest.raises(UnknownFragment, match="it has: word_count"):
        get_pipeline("wordcount").fragment("nope")


def test_oracles_compute_by_hand_examples() -> None:
    words = wordcount(
        iter([{"seq": 0, "line": "a b a"}, {"seq": 1, "line": "b", "_malformed": None}])
    )
    assert words.state["word_count"] == {"a": 2, "b": 2}
    events = [
        {"seq": 1, "user": "u", "page": "p", "ts": 5_000, "bytes": 2},
        {"seq": 0, "user": "u", "page": "p", "ts": 1_000, "bytes": 1},
        {"seq": 2, "user": "v", "page": "p", "ts": 5_001, "bytes": 4},
        {"seq": 3, "_malformed": "x:1: invalid JSON"},
    ]
    result = clickstream(iter(events))
    assert result.state["page_stats"] == {"p": {"views": 3, "unique_users": 2}}
    assert result.state["user_activity"]["u"] == {
        "events": 2,
        "bytes": 3,
        "sessions": 2,
        "last_ts": 5_000,
        "pages": 1,
    }
    assert result.malformed == 1


def test_compare_names_missing_extra_and_wrong_keys() -> None:
    problems = compare({"a": 1, "b": 2}, {"b": 3, "c": 4})
    assert problems == [
        "missing key 'a': expected 1",
        "unexpected key 'c' = 4",
        "key 'b': expected 2, got 3",
    ]
