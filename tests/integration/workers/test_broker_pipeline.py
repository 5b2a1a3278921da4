"""A pipeline on a real broker and real sinks: NATS JetStream in; Postgres, Delta Lake and a NATS
subject out, all three written by one run (``--sink "URI URI URI"``), on real Spark.

One run goes through everything that could lose or double an output:

1. an idle JetStream stream (the source knows nothing of the runner's ticks) on which a live
   scale-out completes;
2. records arrive, and the runner is killed -9 right after a PU's sink write of an epoch, before
   Spark commits that epoch (fault injection, ``RESCALER_FAULT_CRASH_AFTER_SINK_WRITE``); the
   restarted runner re-runs the epoch and every sink must recognise the replay;
3. a live migration with the runner killed -9 mid-operation, then restarted;
4. more records, and a stop-start scale-in.

At the end the keyed state and each sink's contents are compared key by key with an
independent oracle computed from the published records.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import psycopg
import pytest
from deltalake import DeltaTable

from tests.integration.natsservice import read_subject, stream_state, unique_name
from tests.integration.workers.fixtures import (
    RunnerProcess,
    assert_matches_oracle,
    start_runner,
)
from workers.control import LocalControl
from workers.faults import CRASH_AFTER_SINK_WRITE
from workers.oracle import expected_from_generator
from workers.pipeline.placement import PlacementStore
from workers.rescale.local import LocalChannel, plan_local, rescale
from workers.rescale.orchestrator import Orchestrator
from workers.rescale.protocol import OperationRequest
from workers.sinks.nats import MSG_ID, parse_msg_id
from workers.sources.generator import GeneratorConfig
from workers.sources.jetstream_feed import feed, generated, generated_ids

PIPELINE, FRAGMENT = "wordcount", "word_count"
ROWS = 1_500  # lines per epoch
FIRST, SECOND = 9_000, 6_000  # lines published before and after the migration
GENERATOR = GeneratorConfig(kind="lines", key_space=2_000, zipf_s=1.1, seed=23)
BATCHED = {"vnodes_per_step": 16, "steps_in_flight": 2}


def publish(url: str, stream: str, subject: str, start: int, end: int) -> None:
    stored = feed(
        url,
        stream,
        subject,
        generated(GENERATOR, start, end),
        msg_ids=generated_ids(GENERATOR, start, end),
    )
    assert stored == end - start


def request(change: dict[str, list[int]], strategy: str) -> OperationRequest:
    return OperationRequest.parse(
        {"changes": {FRAGMENT: change}, "strategy": strategy, "granularity": BATCHED}
    )


def pus(state: Path) -> tuple[int, ...]:
    placements = PlacementStore(state / PIPELINE).load()
    assert placements is not None
    return placements[FRAGMENT].parallel_units


def read_seq(runner: RunnerProcess) -> int:
    """The last stream sequence the runner's committed epochs took."""
    epochs = runner.epochs()
    return max((int(e["source_offset"].get("seq", 0)) for e in epochs), default=0)


def check_changelog(rows: list[dict[str, Any]], final: dict[str, int], sink: str) -> None:
    """An append-only sink of Count's outputs: per key, one row per epoch it changed in, counts
    rising with the epoch, the last one the oracle's count; no key the oracle lacks."""
    by_key: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for row in rows:
        by_key[row["key"]].append((int(row["epoch"]), int(row["count"])))
    assert set(by_key) == set(final), f"{sink}: keys differ from the oracle's"
    for key, changes in by_key.items():
        changes.sort()
        epochs = [e for e, _ in changes]
        assert len(epochs) == len(set(epochs)), f"{sink}: {key!r} written twice in one epoch"
        counts = [c for _, c in changes]
        assert counts == sorted(set(counts)), f"{sink}: {key!r} counts not rising: {changes}"
        assert counts[-1] == final[key], f"{sink}: {key!r} ends at {counts[-1]}, not {final[key]}"


@pytest.mark.timeout(1500)
def test_jetstream_to_postgres_delta_and_nats_through_crashes_and_rescales(
    tmp_path: Path,
    nats_service: str,
    stream_names: list[str],
    sink_database: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RESCALER_PARALLEL_UNITS", "4")  # the runners' and the local planner's
    source, out = unique_name("RESCALER_IN"), unique_name("RESCALER_OUT")
    stream_names.extend([source, out])
    subject, out_subject = f"{source.lower()}.lines", f"{out.lower()}.counts"
    publish(nats_service, source, subject, 0, 0)  # the stream exists, empty
    delta = tmp_path / "delta" / "counts"
    sinks = " ".join(
        [
            f"{sink_database}?table=word_counts",
            f"delta:{delta}",
            f"nats://127.0.0.1:4222/{out_subject}?stream={out}",
        ]
    )
    args = ("--source", f"nats:{source}", "--sink", sinks, "--rows-per-epoch", str(ROWS))
    runner = start_runner(
        tmp_path,
        PIPELINE,
        *args,
        env={CRASH_AFTER_SINK_WRITE: "0"},
    )

    # 1. idle: nothing in the stream, and a live scale-out completes
    runner.wait_for(lambda: len(runner.epochs()) >= 1, 240, "the first (empty) epoch")
    result = rescale(
        tmp_path / PIPELINE, request({"added_parallel_units": [2]}, "live"), timeout_s=600
    ).to_json()
    assert result["status"] == "completed", result
    assert pus(tmp_path) == (0, 1, 2)
    assert sum(e["rows"] for e in runner.epochs()) == 0, "the stream stayed idle"

    # 2. records: the runner dies right after a sink write, before Spark commits the epoch
    publish(nats_service, source, subject, 0, FIRST)
    runner.exit_code(300)
    marker = tmp_path / PIPELINE / "fault-crashed-after-sink-write"
    assert marker.exists(), f"the fault did not fire:\n{runner.log_tail()}"
    crashed = int(marker.read_text())
    commits = tmp_path / PIPELINE / "checkpoint" / "commits"
    assert not (commits / str(crashed)).exists(), "the epoch must not have been committed"
    with psycopg.connect(sink_database) as conn:
        written = conn.execute(
            "SELECT count(*) FROM rescaler_sink_epochs WHERE epoch = %s", (crashed,)
        ).fetchone()
    assert written is not None and written[0] >= 1, "a PU's write of the epoch reached Postgres"

    # 3. restarted: a live migration, the runner killed -9 with a step in flight
    runner = start_runner(tmp_path, PIPELINE, *args, log_name="restart")
    runner.wait_for(lambda: read_seq(runner) >= 3 * ROWS, 300, "three epochs of records")
    orch = Orchestrator(
        LocalChannel(LocalControl(runner.control_dir)),
        "migrate",
        plan_local(
            tmp_path / PIPELINE,
            request({"added_parallel_units": [3], "removed_parallel_units": [1]}, "live"),
        ),
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        steps = (orch.tick().to_json()["progress"] or {}).get("steps", [])
        if any(s["phase"] == "done" for s in steps) and any(
            s["phase"] not in ("done", "pending") for s in steps
        ):
            break
        time.sleep(0.05)
    runner.kill()
    runner = start_runner(tmp_path, PIPELINE, *args, log_name="restart-2")
    assert orch.run(timeout_s=600).to_json()["status"] == "completed"
    assert pus(tmp_path) == (0, 2, 3)

    # 4. more records, and a stop-start scale-in
    publish(nats_service, source, subject, FIRST, FIRST + SECOND)
    result = rescale(
        tmp_path / PIPELINE, request({"removed_parallel_units": [3]}, "stop_start"), timeout_s=600
    ).to_json()
    assert result["status"] == "completed", result
    assert pus(tmp_path) == (0, 2)
    last = int(stream_state(nats_service, source).last_seq)
    runner.wait_for(lambda: read_seq(runner) >= last, 300, "every published record")
    LocalControl(runner.control_dir).submit("stop")
    runner.wait_exit()

    # each epoch reports the stream's backlog (the autoscaler's signal): the second batch's
    # records wait while the epochs read 1,500 at a time, and none is left once all are read
    backlogs = [e["source_backlog"] for e in runner.epochs()]
    assert all(b is not None and b >= 0 for b in backlogs), backlogs
    assert max(backlogs) > 0 and backlogs[-1] == 0, backlogs

    # the state and every sink, key by key, against the oracle
    expected = expected_from_generator(PIPELINE, GENERATOR, FIRST + SECOND)
    assert_matches_oracle(tmp_path, PIPELINE, expected)
    final: dict[str, int] = expected.state[FRAGMENT]
    with psycopg.connect(sink_database) as conn:
        table = dict(conn.execute("SELECT key, count FROM word_counts").fetchall())
        ledger = conn.execute(
            "SELECT epoch, pu FROM rescaler_sink_epochs WHERE fragment = %s", (FRAGMENT,)
        ).fetchall()
    assert table == final, "Postgres: the upserted counts are the oracle's"
    assert len(ledger) == len(set(ledger))
    check_changelog(DeltaTable(str(delta)).to_pyarrow_table().to_pylist(), final, "Delta")
    messages = read_subject(nats_service, out, out_subject)
    check_changelog(
        [
            {**json.loads(m["data"]), "epoch": parse_msg_id(m["headers"][MSG_ID]).epoch}  # type: ignore[union-attr]
            for m in messages
        ],
        final,
        "NATS",
    )
