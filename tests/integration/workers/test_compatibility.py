"""The compatibility suite: every processor of ``tws_compat.processors`` under Spark's own
``transformWithState`` and under Rescaler, on the same input, batch for batch: each batch's
outputs and, after the last, every key's state must be equal.

Spark runs all cases in one child JVM (``compat_spark``). Rescaler runs each epoch through
:func:`workers.epoch.run_task`, the function Spark's ``mapInArrow`` calls on an executor, on a
real store, with the runner's own clock (``workers.clock.Watermark``) and its rule for no-data
epochs (``workers.idle.NoDataEpochs``); the input arrives as the epoch's Spark SQL routing hands
it over (kind, key, seq, vnode, the columns). What the runner adds around that function (the
routing in Spark, a live rescale, a kill -9) is compared with Spark by
``test_user_pipeline.py`` on the stateful cases there.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.integration.workers.compat_spark import normal
from tests.integration.workers.fixtures import REPO
from workers.processor import wire_name

pytestmark = [pytest.mark.integration, pytest.mark.spark]

FIXTURES = REPO / "tests" / "fixtures"
VNODES = 8
if str(FIXTURES) not in sys.path:
    sys.path.insert(0, str(FIXTURES))

from tws_compat.processors import CASES, Case  # noqa: E402


@pytest.fixture(scope="module")
def spark_answers() -> dict[str, Any]:
    """Every case under Spark, once per test run (one JVM): the first xdist worker to get here
    computes them, under a lock, and the other reads its file."""
    import fcntl

    run = os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid-{os.getpid()}"
    folder = REPO / "var" / "compat" / run
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "spark.json"
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not out.exists():
            env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{FIXTURES}"}
            cmd = [sys.executable, "-m", "tests.integration.workers.compat_spark"]
            cmd += ["--out", str(out)]
            done = subprocess.run(
                cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900
            )
            assert done.returncode == 0, f"Spark's side failed:\n{done.stderr[-4000:]}"
    answers: dict[str, Any] = json.loads(out.read_text())
    return answers


def _arrow_schema(ddl: str) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    from workers.processor.schema import struct_of

    return to_arrow_schema(struct_of(ddl), timezone="UTC")


def _task_input(case: Case, op: Any, epoch: int, rows: list[tuple[Any, ...]]) -> pa.Table:
    """The epoch's rows as the routing hands them to a PU's task: kind, key, seq, vnode, slot,
    src, info and the columns (and, in the first epoch, the initial state's rows)."""
    from workers.hashing import vnode_of
    from workers.processor import wire_name
    from workers.processor.layout import INITIAL_KIND, initial_column

    schema = _arrow_schema(case.input_schema)
    table = pa.Table.from_pylist([dict(zip(schema.names, r, strict=True)) for r in rows], schema)
    keys = table.column("key").to_pylist()
    n = table.num_rows
    columns = {
        "kind": pa.array(["rec"] * n, pa.string()),
        "key": table.column("key"),
        "seq": table.column("seq"),
        # the user's columns under their names in Rescaler's tables (the user's seq as ~seq)
        **{wire_name(c): table.column(c) for c in schema.names if c != "key"},
        "src": pa.array([1] * n, pa.int64()),
        "info": pa.nulls(n, pa.string()),
        "vnode": pa.array([vnode_of(k, VNODES) for k in keys], pa.int64()),
        "slot": pa.array([0] * n, pa.int32()),
    }
    batch = pa.table(columns)
    if epoch == 0 and case.initial_state is not None:
        init_schema = _arrow_schema(case.initial_schema)
        init = pa.Table.from_pylist(
            [dict(zip(init_schema.names, r, strict=True)) for r in case.initial_state], init_schema
        )
        m = init.num_rows
        init_keys = init.column("key").to_pylist()
        struct = pa.StructArray.from_arrays(
            [init.column(c).combine_chunks() for c in init.column_names], init.column_names
        )
        extra = pa.table(
            {
                "kind": pa.array([INITIAL_KIND] * m, pa.string()),
                "key": init.column("key"),
                "vnode": pa.array([vnode_of(k, VNODES) for k in init_keys], pa.int64()),
                "slot": pa.array([0] * m, pa.int32()),
                initial_column(0): struct,
            }
        )
        batch = pa.concat_tables([batch, extra], promote_options="default")
    return batch


def _state(op: Any, store: Any) -> dict[str, Any]:
    """Every key's state in the form ``compat_spark`` reads Spark's in: each variable's values
    as Spark's ``get`` gives them, the pending timers."""
    from workers.hashing import TIMER_MARK
    from workers.state.base import decode_key

    found: dict[str, Any] = {}
    for store_key, raw in store.scan():
        _, key = decode_key(store_key)
        if key.startswith(TIMER_MARK):
            continue
        state = op.decode(raw)
        out: dict[str, Any] = {}
        for name, (value, _expiry) in state.values.items():
            out[name] = normal(list(op.variables[name].read(value)))
        for name, entries in state.lists.items():
            var = op.variables[name]
            out[name] = normal([list(var.read(e[0])) for e in entries])
        for name, entries in state.maps.items():
            var = op.variables[name]
            pairs = [[list(var.read_key(k)), list(var.read(v))] for k, v, _ in entries.values()]
            pairs = [normal(p) for p in pairs]
            out[name] = sorted(pairs, key=lambda p: json.dumps(p, sort_keys=True))
        if state.timers:
            out["$timers"] = sorted(state.timers)
        found[key.decode("utf-8")] = out
    return found


def run_under_rescaler(case: Case, tmp: Path) -> dict[str, Any]:
    from pyspark.sql.pandas.types import to_arrow_schema  # noqa: F401  (Spark's own conversions)

    from workers.clock import Watermark
    from workers.epoch import TaskSpec, run_task
    from workers.idle import NoDataEpochs
    from workers.pipeline.placement import EpochPlan
    from workers.processor import ProcessorOperator
    from workers.sinks.base import FunctionSink
    from workers.state import open_store

    names = _arrow_schema(case.input_schema).names
    op = ProcessorOperator(
        case.make(),
        columns=names,
        output_schema=case.output_schema,
        time_mode=case.time_mode,
        interface=case.interface,
        key_column="key",
        initial_state=(lambda spark: None) if case.initial_state is not None else None,
        event_time_column=case.event_time_column,
    )
    op.inspect()
    then = None
    if case.then is not None:  # grouped by an output column of the first, as Spark's groupBy
        then = ProcessorOperator(
            case.then.make(),
            columns=[f.name for f in op.output_struct.fields],
            output_schema=case.then.output_schema,
            time_mode=case.then.time_mode,
            key_column=case.then.key,
        )
        then.inspect()
    written: dict[int, list[Any]] = {}

    def collect(table: pa.Table, epoch: int, pu: int) -> None:
        # the output schema's columns, as foreachBatch gets them, read as Spark's collect()
        # reads them (maps as dicts, structs as Rows)
        from pyspark.sql.conversion import ArrowTableToRowsConversion
        from pyspark.sql.pandas.types import from_arrow_schema

        rows = ArrowTableToRowsConversion.convert(table, from_arrow_schema(table.schema))
        written[epoch] = sorted(
            (normal(list(r)) for r in rows), key=lambda r: json.dumps(r, sort_keys=True)
        )

    watermark = Watermark(
        tmp / "watermark.json", case.watermark_delay_ms, event_time=bool(case.event_time)
    )
    modes = [op.time_mode, *([then.time_mode] if then is not None else [])]
    no_data = NoDataEpochs(modes, lambda: watermark.advanced, 0.0)
    sink = FunctionSink(collect, name=f"compat {case.name} {tmp}")
    batches = list(case.batches)
    epoch, counts = 0, []
    while batches or (epoch > 0 and no_data.due(1.0) and case.time_mode == "EventTime"):
        rows = batches.pop(0) if batches else []
        clock = watermark.clock(epoch)
        spec = TaskSpec(
            fragment="f",
            operator=op,
            epoch=epoch,
            parallel_units=(0,),
            owned=(tuple(range(VNODES)),),
            state_root=str(tmp),
            backend="lmdb",
            terminal=then is None,
            sink=sink if then is None else None,
            clock=clock,
            event_time=case.event_time,
        )
        table = _task_input(case, op, epoch, rows)
        out = pa.Table.from_batches(list(run_task(spec, 0, iter(table.to_batches()))))
        stats = _stats(out)
        if then is not None:
            assert case.then is not None and case.event_time_column is not None
            then_spec = dataclasses.replace(
                spec,
                fragment="g",
                operator=then,
                terminal=True,
                sink=sink,
                event_time=wire_name(case.event_time_column),
                chained_event_time=True,
            )
            table = _chained_input(out, op, case.then.key)
            done = pa.Table.from_batches(list(run_task(then_spec, 0, iter(table.to_batches()))))
            stats += _stats(done)
        watermark.committed(EpochPlan(epoch, {}, clock=clock), stats)
        no_data.epoch_committed(stats)
        counts.append(len(rows))
        epoch += 1
    from workers.layout import pu_store

    with open_store("lmdb", pu_store(tmp, "f", 0)) as store:
        state = _state(op, store)
    then_state = None
    if then is not None:
        with open_store("lmdb", pu_store(tmp, "g", 0)) as store:
            then_state = _state(then, store)
    return {
        "batches": [{"rows": n, "outputs": written.get(i, [])} for i, n in enumerate(counts)],
        "state": state,
        "then_state": then_state,
    }


def _stats(out: pa.Table) -> list[Any]:
    return [
        json.loads(i)
        for k, i in zip(out["kind"].to_pylist(), out["info"].to_pylist(), strict=True)
        if k == "stat"
    ]


def _chained_input(out: pa.Table, op: Any, key: str) -> pa.Table:
    """A fragment's outputs as the next fragment's records, as the epoch's routing hands them
    over: keyed by the column it is grouped by, every output column by its name in Rescaler's
    tables."""
    import pyarrow.compute as pc

    from workers.hashing import vnode_of

    rows = out.filter(pc.equal(out.column("kind"), "out"))
    keys = [None if v is None else str(v) for v in rows.column(wire_name(key)).to_pylist()]
    n = rows.num_rows
    columns = {
        "kind": pa.array(["rec"] * n, pa.string()),
        "key": pa.array(keys, pa.string()),
        "seq": rows.column("seq"),
        **{wire: rows.column(wire) for wire, _ in op.output_fields},
        "src": pa.array([0] * n, pa.int64()),
        "info": pa.nulls(n, pa.string()),
        "vnode": pa.array([vnode_of(k, VNODES) for k in keys], pa.int64()),
        "slot": pa.array([0] * n, pa.int32()),
    }
    return pa.table(columns)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_processor_gives_spark_s_outputs_and_state(
    case: Case, spark_answers: dict[str, Any], tmp_path: Path
) -> None:
    spark = spark_answers[case.name]
    ours = run_under_rescaler(case, tmp_path)
    assert [b["rows"] for b in ours["batches"]] == [b["rows"] for b in spark["batches"]]
    for i, (theirs, mine) in enumerate(zip(spark["batches"], ours["batches"], strict=True)):
        assert mine["outputs"] == theirs["outputs"], f"batch {i}"
    assert ours["then_state"] == spark["then_state"]
    spark_state = spark["state"]
    # timers of processing time are wall-clock times: only whether a key has them is compared
    if case.time_mode == "ProcessingTime":
        for state in (spark_state, ours["state"]):
            for value in state.values():
                if "$timers" in value:
                    value["$timers"] = len(value["$timers"])
    assert ours["state"] == spark_state
