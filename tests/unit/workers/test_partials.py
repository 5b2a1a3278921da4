"""Pre-aggregation (workers.partials): partial rows give the PU what every record gives it.

The partial rows here are made as Spark makes them in ``workers.job.EpochJob.stage`` (one group
per key, vnode and kind of a PU's rows, ``spark_aggregations``), emulated with Arrow's group-by
over arbitrary slices of the records; the Spark side itself runs in the Spark suites.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workers import partials
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
    Sum,
    TumblingWindowCount,
)
from workers.pipeline.placement import SlotActions
from workers.state import open_store
from workers.state.base import decode_key

VNODES = 8


class Traffic(KeyedOperator):
    """An operator of the user's with aggregates (docs/data-plane.md): the per-key path."""

    name = "traffic"
    order_sensitive = False
    columns = ("v",)
    aggregates = (("seq", "count"), ("v", "sum"), ("v", "min"))
    output_fields = (("requests", "int64"), ("total", "int64"), ("low", "int64"))

    def update(self, key, state, records):
        ((requests, total, low),) = records
        if state is not None:
            requests, total, low = requests + state[0], total + state[1], min(low, state[2])
        return [requests, total, low], [(key, requests, total, low)]


OPERATORS = [Count(), Sum("v"), Min("v"), Max("v"), Mean("v"), PageStats(), Traffic()]


def _records(keys: list[str], values: list[int], start: int = 0, kind: str = "rec") -> pa.Table:
    n = len(keys)
    return pa.table(
        {
            "kind": pa.array([kind] * n),
            "key": pa.array(keys, pa.string()),
            "seq": pa.array(range(start, start + n), pa.int64()),
            "v": pa.array(values, pa.int64()),
            "first_visit": pa.array([v % 2 for v in values], pa.int64()),
            "src": pa.array([1] * n, pa.int32()),
            "info": pa.nulls(n, pa.string()),
            "vnode": pa.array([vnode_of(k, VNODES) for k in keys], pa.int32()),
            "slot": pa.array([0] * n, pa.int32()),
        }
    )


def _spark_partials(table: pa.Table, aggregates: partials.Aggregates) -> pa.Table:
    """What Spark's groupBy(kind, key, vnode, slot, ...) with spark_aggregations hands over."""
    specs = [("seq", "max"), ("src", "sum"), ("__one", "sum"), *aggregates]
    table = table.append_column("__one", pa.array([1] * table.num_rows, pa.int64()))
    grouped = table.group_by(["kind", "key", "vnode", "slot", "info"], use_threads=False)
    out = grouped.aggregate(specs)
    columns = {name: out[name] for name in ("kind", "key", "vnode", "slot", "info")} | {
        "seq": out["seq_max"],
        "src": out["src_sum"],
        partials.RECORDS: out["__one_sum"],
    }
    for column, function in aggregates:
        columns[partials.column_name(column, function)] = out[f"{column}_{function}"]
    return pa.table(columns)


def _slices(table: pa.Table, cuts: list[int]) -> list[pa.Table]:
    bounds = [0, *sorted(c % (table.num_rows + 1) for c in cuts), table.num_rows]
    return [table.slice(a, b - a) for a, b in itertools.pairwise(bounds) if b > a]


def _spec(root: Path, operator, epoch: int, actions: SlotActions | None = None, **kw) -> TaskSpec:
    return TaskSpec(
        fragment="frag",
        operator=operator,
        epoch=epoch,
        parallel_units=(3,),
        owned=(tuple(kw.pop("owned", range(VNODES))),),
        state_root=str(root),
        backend="lmdb",
        terminal=False,
        actions=(actions,) if actions is not None else (),
        **kw,
    )


def _run(spec: TaskSpec, table: pa.Table | None) -> tuple[pa.Table, dict]:
    import json

    batches = table.to_batches() if table is not None else []
    out = pa.Table.from_batches(list(run_task(spec, 0, iter(batches))))
    stat = json.loads(out.filter(pc.equal(out["kind"], "stat"))["info"][0].as_py())
    outputs = out.filter(pc.equal(out["kind"], "out")).drop_columns(["kind", "info"])
    return outputs, stat


def _state(root: Path, operator) -> dict:
    with open_store("lmdb", pu_store(root, "frag", 3), readonly=True) as store:
        return {
            decode_key(k)[1].decode(): operator.to_json(operator.decode(v)) for k, v in store.scan()
        }


def _by_key(outputs: pa.Table) -> dict:
    rows = outputs.to_pylist()
    return {r["key"]: r for r in sorted(rows, key=lambda r: r["key"])}


@settings(max_examples=40, deadline=None)
@given(
    data=st.lists(
        st.tuples(st.sampled_from("abcdefg"), st.integers(-1000, 1000)), min_size=1, max_size=60
    ),
    cuts=st.lists(st.integers(0, 60), max_size=4),
    op_index=st.integers(0, len(OPERATORS) - 1),
    vectorised=st.booleans(),
)
def test_partial_rows_fold_to_the_records_state_and_outputs(
    tmp_path_factory: pytest.TempPathFactory,
    data: list[tuple[str, int]],
    cuts: list[int],
    op_index: int,
    vectorised: bool,
) -> None:
    op = OPERATORS[op_index]
    records = _records([k for k, _ in data], [v for _, v in data])
    # Spark folds each PU's rows per key; one PU's slice may arrive in several pieces (the
    # partitions of its upstream), each folded on its own: merge must give the same
    pieces = [_spark_partials(s, op.aggregates) for s in _slices(records, cuts)]
    folded = pa.concat_tables(pieces)
    plain_root, folded_root = tmp_path_factory.mktemp("plain"), tmp_path_factory.mktemp("folded")
    plain_out, plain_stat = _run(_spec(plain_root, op, 0, vectorised=vectorised), records)
    folded_out, folded_stat = _run(_spec(folded_root, op, 0, vectorised=vectorised), folded)
    assert _state(folded_root, op) == _state(plain_root, op)
    assert _by_key(folded_out) == _by_key(plain_out), "the same outputs, with the key's last seq"
    assert folded_stat["records"] == plain_stat["records"] == records.num_rows
    assert folded_stat["source_rows"] == plain_stat["source_rows"]
    # the vnodes' measured load (the planner's hot vnodes): records, however they arrived
    per_vnode = Counter(str(v) for v in records["vnode"].to_pylist())
    assert folded_stat["vnode_records"] == plain_stat["vnode_records"] == dict(per_vnode)


def test_held_partial_rows_replay_with_the_records_of_a_later_epoch(tmp_path: Path) -> None:
    """A vnode in transit: its partial rows wait in the hold queue, counted as the records they
    fold, and are replayed before the next epoch's rows, partial or not, with the same result as
    if nothing had been held."""
    op = Count()
    rng = random.Random(5)
    keys = [rng.choice("abcdefghij") for _ in range(200)]
    first, second = _records(keys[:120], [0] * 120), _records(keys[120:], [0] * 80, start=120)
    moving = vnode_of("a", VNODES)
    held = first.set_column(
        0,
        "kind",
        pc.if_else(pc.equal(first["vnode"], moving), pa.scalar("held"), first["kind"]),
    )
    root = tmp_path / "state"
    hold = "hold/e0.arrow"  # in the durable location, here the state directory
    _, stat = _run(
        _spec(root, op, 0, SlotActions(hold_path=hold), owned=set(range(VNODES)) - {moving}),
        _spark_partials(held, op.aggregates),
    )
    in_transit = sum(1 for k in keys[:120] if vnode_of(k, VNODES) == moving)
    assert stat["held"] == {str(moving): in_transit}, "held counts are records, not partial rows"
    assert stat["records"] == 120 - in_transit
    # a vnode in transit still receives its records: its load counts the held ones
    assert stat["vnode_records"] == dict(Counter(str(vnode_of(k, VNODES)) for k in keys[:120]))
    replay = SlotActions(replay_files=(hold,), replay_vnodes=(moving,))
    _, stat = _run(_spec(root, op, 1, replay), second)  # record rows meet held partial rows
    assert stat["records"] == 80 + in_transit
    expected = {k: {"count": keys.count(k)} for k in set(keys)}
    assert {k: {"count": v} for k, v in _state(root, op).items()} == expected
    assert not partials.is_partial(second) and partials.is_partial(
        pa.ipc.open_file(str(root / hold)).read_all()
    ), "the hold queue held partial rows"


def test_only_grouping_independent_aggregates_are_folded_in_spark() -> None:
    types = {"v": "bigint", "f": "double", "seq": "bigint", "first_visit": "bigint"}
    assert partials.refusal(Count(), types) is None
    assert partials.refusal(Sum("v"), types) is None
    assert partials.refusal(PageStats(), types) is None
    assert "depends on the grouping" in (partials.refusal(Sum("f"), types) or "")
    assert "depends on the grouping" in (partials.refusal(Max("f"), types) or "")
    assert "no aggregates" in (partials.refusal(TumblingWindowCount(), types) or "")
    assert "no such column" in (partials.refusal(Sum("w"), types) or "")

    class Median(Count):
        aggregates = (("v", "approx_median"),)

    assert "not one of" in (partials.refusal(Median(), types) or "")


def test_partial_rows_reaching_an_operator_without_aggregates_fail_with_the_reason(
    tmp_path: Path,
) -> None:
    rows = _spark_partials(_records(["a", "b"], [1, 2]), Count.aggregates)
    with pytest.raises(partials.PartialRowsError, match="declares no aggregates"):
        _run(_spec(tmp_path, TumblingWindowCount("v"), 0), rows)


def test_folding_in_spark_keeps_the_event_time_the_watermark_reads() -> None:
    expressions = partials.spark_aggregations(Count.aggregates, "event_time")
    assert "max(`event_time`) AS `event_time`" in expressions
    assert not any("event_time" in e for e in partials.spark_aggregations(Count.aggregates))


def test_pre_aggregation_is_opt_in(monkeypatch: pytest.MonkeyPatch) -> None:
    from workers.config import RunnerConfig

    monkeypatch.delenv("RESCALER_PREAGGREGATE", raising=False)
    assert RunnerConfig.from_env().preaggregate is False
    monkeypatch.setenv("RESCALER_PREAGGREGATE", "1")
    assert RunnerConfig.from_env().preaggregate is True
    monkeypatch.setenv("RESCALER_PREAGGREGATE", "off")
    assert RunnerConfig.from_env().preaggregate is False
