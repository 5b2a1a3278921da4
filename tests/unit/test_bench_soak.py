"""The soak's pure parts (``bench/soak.py``): the seeded schedule, the choices made against the
live cluster, the report's arithmetic (records lost and duplicated, 5xx outside daphne's
downtime, read p99, websocket clients left on a stale status) and the websocket framing.
Nothing here starts a process, Spark or a server."""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

import pytest

from bench import _common as common
from bench import soak

# -- the schedule ---------------------------------------------------------------------------------


def test_the_same_seed_gives_the_same_schedule_and_another_seed_another() -> None:
    a = soak.make_schedule(1234, 30 * 60, soak.FULL)
    assert a == soak.make_schedule(1234, 30 * 60, soak.FULL)
    assert a.to_json() == soak.make_schedule(1234, 30 * 60, soak.FULL).to_json()
    assert a != soak.make_schedule(1235, 30 * 60, soak.FULL)
    json.dumps(a.to_json())  # it goes into the report as it is


@pytest.mark.parametrize("seed", [0, 1, 7, 2026, 99_999])
def test_a_full_run_has_a_fault_in_every_minute_and_every_kind_of_everything(seed: int) -> None:
    s = soak.make_schedule(seed, 30 * 60, soak.FULL)
    for minute in range(30):
        assert any(minute * 60 <= f.at_s < (minute + 1) * 60 for f in s.faults), minute
    assert len(s.faults) / 30 >= 1
    assert {f.kind for f in s.faults} == set(soak.FAULT_KINDS)
    assert {o.kind for o in s.operations} == set(soak.OPERATION_KINDS)
    assert any(o.cancel_after_s is not None for o in s.operations)
    assert len(s.operations) >= 60
    assert {w.action for w in s.worker_actions} == set(soak.WORKER_ACTIONS)
    # every event inside the run, faults in order and never on top of each other
    times = [f.at_s for f in s.faults]
    assert times == sorted(times) and all(0 <= t < 30 * 60 for t in times)
    assert all(b - a >= 10 for a, b in itertools.pairwise(times))
    for f in s.faults:
        lo, hi = soak.FAULT_DOWN_S[f.kind]
        assert lo <= f.down_s <= hi


def test_granularities_are_what_the_api_takes() -> None:
    s = soak.make_schedule(5, 30 * 60, soak.FULL)
    for o in s.operations:
        if o.kind == "stop_start":
            assert o.granularity is None
        elif o.kind == "custom":
            assert isinstance(o.granularity, dict)
            assert set(o.granularity) == {"vnodes_per_step", "steps_in_flight"}
            assert 1 <= o.granularity["vnodes_per_step"] <= 8
        else:
            assert o.granularity == o.kind


def test_the_quick_profile_is_small_and_its_faults_come_from_the_kinds_asked_for() -> None:
    s = soak.make_schedule(3, 2 * 60, soak.QUICK, ["kill_runner", "restart_redis"])
    assert 2 <= len(s.faults) <= 4
    assert {f.kind for f in s.faults} <= {"kill_runner", "restart_redis"}
    assert 1 <= len(s.operations) <= 6
    assert s.fault_kinds == ("kill_runner", "restart_redis")
    assert soak.make_schedule(3, 2 * 60, soak.QUICK, []).faults == ()


def test_unknown_fault_kinds_and_empty_durations_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown fault kinds"):
        soak.make_schedule(1, 60, soak.QUICK, ["kill_everything"])
    with pytest.raises(ValueError, match="positive"):
        soak.make_schedule(1, 0, soak.QUICK)


def test_the_operators_events_come_in_time_order() -> None:
    events = soak.make_schedule(11, 30 * 60, soak.FULL).actions()
    assert [e.at_s for e in events] == sorted(e.at_s for e in events)
    assert any(isinstance(e, soak.WorkerEvent) for e in events)


def test_the_final_statuses_are_the_protocols() -> None:
    from workers.rescale.protocol import FINAL

    assert {str(s.value) for s in FINAL} == soak.FINAL_STATUSES


def test_print_schedule_starts_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert soak.main(["--quick", "--seed", "42", "--print-schedule"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == soak.make_schedule(42, 120, soak.QUICK).to_json()


# -- choices against the live cluster ---------------------------------------------------------------


def _cluster(
    fragment_pus: list[int],
    workers: dict[str, tuple[str, bool, list[int]]],
    lost_pus: tuple[int, ...] = (),
    busy: str | None = None,
) -> soak.ClusterView:
    """A GET /api/v1/cluster body: workers name -> (status, alive, PUs)."""
    body: dict[str, Any] = {
        "pipelines": [{"name": "wordcount", "last_epoch": 9, "runner_alive": True}],
        "fragments": [
            {"name": "source", "pipeline": "wordcount", "parallel_units": fragment_pus},
            {
                "name": "word_count",
                "pipeline": "wordcount",
                "parallel_units": fragment_pus,
                "busy_with": busy,
            },
        ],
        "workers": [
            {
                "name": name,
                "pipeline": "wordcount",
                "status": status,
                "alive": alive,
                "bootstrapped_epoch": 1,
                "parallel_units": pus,
            }
            for name, (status, alive, pus) in workers.items()
        ],
        "parallel_units": {
            str(pu): {
                "worker": name,
                "alive": alive and pu not in lost_pus,
                "status": "lost" if pu in lost_pus else "active",
            }
            for name, (_, alive, pus) in workers.items()
            for pu in pus
        },
    }
    return soak.ClusterView.from_json(body)


def test_lost_pus_of_the_fragment_are_repaired_first() -> None:
    view = _cluster(
        [0, 1],
        {"w1": ("active", True, [0]), "w2": ("lost", False, [1]), "w3": ("active", True, [2])},
        lost_pus=(1,),
    )
    assert soak.plan_change(view, random.Random(0)) == soak.Change("repair", (), (1,))
    # nothing live left in the fragment: an open PU is added in the same request
    view = _cluster([1], {"w2": ("lost", False, [1]), "w3": ("active", True, [2])}, lost_pus=(1,))
    assert soak.plan_change(view, random.Random(0)) == soak.Change("repair", (2,), (1,))


def test_plans_use_only_open_pus_and_keep_at_least_one() -> None:
    view = _cluster(
        [0, 1],
        {"w1": ("active", True, [0]), "w2": ("active", True, [1]), "w3": ("cordoned", True, [2])},
    )
    # w3 is cordoned: its PU is not open, so only a scale-in is possible
    for seed in range(20):
        change = soak.plan_change(view, random.Random(seed))
        assert isinstance(change, soak.Change)
        assert change.shape == "scale_in" and change.added == () and len(change.removed) == 1
    alone = _cluster([0], {"w1": ("active", True, [0])})
    assert isinstance(soak.plan_change(alone, random.Random(0)), soak.Skip)
    grow = _cluster([0], {"w1": ("active", True, [0]), "w2": ("active", True, [1])})
    shapes = {soak.plan_change(grow, random.Random(s)).shape for s in range(30)}  # type: ignore[union-attr]
    assert shapes == {"scale_out", "migrate"}


def test_the_same_event_seed_makes_the_same_choice() -> None:
    view = _cluster(
        [0, 1, 2],
        {"w1": ("active", True, [0]), "w2": ("active", True, [1]), "w3": ("active", True, [2, 3])},
    )
    assert soak.plan_change(view, random.Random(77)) == soak.plan_change(view, random.Random(77))


def test_worker_choices_leave_the_fragment_somewhere_to_go() -> None:
    two = _cluster([0, 1], {"w1": ("active", True, [0]), "w2": ("active", True, [1])})
    assert soak.pick_worker(two, "drain", random.Random(0), 3) in ("w1", "w2")
    one = _cluster([0], {"w1": ("active", True, [0])})
    assert isinstance(soak.pick_worker(one, "drain", random.Random(0), 3), soak.Skip)
    assert isinstance(soak.pick_worker(one, "notice", random.Random(0), 3), soak.Skip)
    full = _cluster(
        [0, 1],
        {"w1": ("active", True, [0]), "w2": ("active", True, [1]), "w3": ("active", True, [2])},
    )
    assert isinstance(soak.pick_worker(full, "add", random.Random(0), 3), soak.Skip)
    assert soak.pick_worker(two, "add", random.Random(0), 3) is None
    cordoned = _cluster([0, 1], {"w1": ("cordoned", True, [0]), "w2": ("active", True, [1])})
    assert soak.pick_worker(cordoned, "cordon", random.Random(0), 3) == "w2"
    with pytest.raises(ValueError, match="unknown worker action"):
        soak.pick_worker(two, "reboot", random.Random(0), 3)


# -- the report's arithmetic ------------------------------------------------------------------------


def test_records_lost_and_duplicated_are_counted_per_key() -> None:
    d = soak.count_diff({"a": 3, "b": 2, "c": 1}, {"a": 3, "b": 5, "d": 4})
    assert (d.records_lost, d.records_duplicated) == (1, 7)  # c lost 1; b +3, d +4
    assert (d.missing_keys, d.extra_keys, d.wrong_keys) == (1, 1, 1)
    assert not d.exact and len(d.problems) == 3
    same = soak.count_diff({"a": 3}, {"a": 3})
    assert same.exact and (same.records_lost, same.records_duplicated) == (0, 0)
    assert not soak.count_diff({"a": 3}, {"a": 3}, stored_twice=1).exact


def _sample(t: float, status: int, ms: float = 10.0, source: str = "reader") -> soak.HttpSample:
    return soak.HttpSample(t, source, "GET", "/api/v1/cluster", status, ms / 1000)


def test_5xx_while_daphne_is_down_do_not_count_against_the_goal_the_others_do() -> None:
    windows = [
        soak.Window("kill_daphne", 10.0, 14.0),
        soak.Window("restart_postgres", 30.0, 37.0),
    ]
    samples = [
        _sample(1, 200),
        _sample(11, 0),  # no answer while daphne is down
        _sample(15.5, 502),  # within the grace after daphne answered again
        _sample(33, 500, source="operator"),  # Postgres down: counts
        _sample(50, 503),  # outside every window: counts
    ]
    h = soak.http_summary(samples, windows)
    assert h["five_xx"] == 3
    assert h["five_xx_outside_daphne_down"] == 2
    assert h["five_xx_by_window"] == {"kill_daphne": 1, "none": 1, "restart_postgres": 1}
    assert h["no_answer"] == 1 and h["no_answer_outside_daphne_down"] == 0
    assert [s["t"] for s in h["five_xx_samples"]] == [33, 50]


def test_read_p99_is_over_the_readers_answers_outside_daphnes_downtime() -> None:
    windows = [
        soak.Window("kill_daphne", 100.0, 110.0),
        soak.Window("restart_redis", 200, 220),
        soak.Window("restart_postgres", 300, 308),
    ]
    samples = [_sample(t, 200, ms=10.0) for t in range(0, 99)]
    samples.append(_sample(105, 200, ms=60_000.0))  # daphne down: left out
    samples.append(_sample(150, 200, ms=5_000.0, source="operator"))  # not a reader
    samples.append(_sample(210, 200, ms=1_000.0))  # a fault's window: in, but not in steady
    samples.append(_sample(305, 200, ms=9_000.0))  # waited for Postgres: only in ..._all
    h = soak.http_summary(samples, windows)
    assert h["reads_measured"] == 101
    assert h["read_p99_ms"] == pytest.approx(common.percentile([10.0] * 99 + [1000.0], 99), 0.01)
    assert h["read_p99_ms_all"] == pytest.approx(
        common.percentile([10.0] * 99 + [1000.0, 9000.0], 99), 0.01
    )
    assert h["read_p99_ms_steady"] == pytest.approx(10.0)


def test_a_client_is_stale_when_its_last_status_is_not_the_final_one() -> None:
    finals = {"op1": "completed", "op2": "cancelled"}
    good = soak.WsClientResult("c0", "cluster", last_status=dict(finals))
    behind = soak.WsClientResult(
        "c1", "cluster", last_status={"op1": "running", "op2": "cancelled"}
    )
    missed = soak.WsClientResult("c2", "cluster", last_status={"op1": "completed"})
    follower = soak.WsClientResult(
        "o0", "operation", last_status={"op2": "cancelling"}, followed=["op2"]
    )
    stale = soak.stale_clients([good, behind, missed, follower], finals)
    assert [(s["client"], s["operation_id"], s["seen"]) for s in stale] == [
        ("c1", "op1", "running"),
        ("c2", "op2", None),
        ("o0", "op2", "cancelling"),
    ]


def test_operations_are_summed_by_the_apis_status_with_the_failures_reasons() -> None:
    api = [
        {"operation_id": "a", "status": "completed"},
        {"operation_id": "b", "status": "failed", "error_code": "step_timeout", "outcome": "x"},
        {"operation_id": "c", "status": "running"},
        {"operation_id": "d", "status": "cancelled"},
    ]
    records = [
        soak.OperationRecord("schedule", 0, "fluid", 1.0, operation_id="a"),
        soak.OperationRecord("schedule", 1, "stop_start", 2.0, operation_id="b"),
        soak.OperationRecord("drain", 0, "drain", 3.0, operation_id="c"),
        soak.OperationRecord("schedule", 2, "batched", 4.0, refused_code="fragment_busy"),
        soak.OperationRecord("schedule", 3, "batched", 5.0, skipped="no PU open"),
    ]
    s = soak.operations_summary(api, records)
    assert (s["completed"], s["cancelled"], s["failed"], s["unfinished"]) == (1, 1, 1, 1)
    assert s["final"] == 3 and s["untracked"] == 1  # d: no record names it
    assert s["failed_list"][0]["error_code"] == "step_timeout"
    assert s["refused"] == {"fragment_busy": 1} and s["skipped"] == 1


def test_the_report_of_a_clean_run_meets_the_correctness_goals() -> None:
    schedule = soak.make_schedule(9, 30 * 60, soak.FULL)
    faults = [
        soak.FaultRecord(i, "kill_daphne" if i == 0 else "restart_redis", 60.0 * i,
                         started_at=60.0 * i, ended_at=60.0 * i + 5)
        for i in range(31)
    ]  # fmt: skip
    api_ops = [{"operation_id": f"op{i}", "status": "completed"} for i in range(61)]
    records = [
        soak.OperationRecord("schedule", i, "fluid", 10.0 * i, operation_id=f"op{i}")
        for i in range(61)
    ]
    clients = [
        soak.WsClientResult(
            f"c{i}", "cluster", last_status={o["operation_id"]: "completed" for o in api_ops}
        )
        for i in range(20)
    ]
    diff = {**soak.asdict(soak.count_diff({"a": 1}, {"a": 1})), "exact": True}
    outcome = soak.SoakOutcome(
        duration_s=1800,
        faults=faults,
        operations=records,
        worker_actions=[],
        exits=[],
        samples=[_sample(t, 200, ms=20.0) for t in range(100)] + [_sample(2.0, 502)],
        clients=clients,
        api_operations=api_ops,
        verification={"state": diff, "sink": diff, "runner_stopped_cleanly": True},
        errors=[],
    )
    report = soak.build_report(
        profile=soak.FULL,
        schedule=schedule,
        outcome=outcome,
        trust=common.trust_fields(common.Validity(True), [0.1, 0.1, 0.1], []),
        machine={},
        elapsed_s=1900.0,
        error=None,
    )
    assert all(g["met"] for g in report["goals"].values()), report["goals"]
    assert report["http"]["five_xx"] == 1 and report["http"]["five_xx_outside_daphne_down"] == 0
    assert report["faults"]["by_kind"] == {"kill_daphne": 1, "restart_redis": 30}
    assert "operations completed / cancelled / failed" in report["table"]
    json.dumps(report)  # the report is JSON as it is


def test_a_process_that_exited_by_itself_fails_the_run() -> None:
    """Both Celery workers exited with status 1 when Redis restarted (seed 9090); the
    supervisor brought them back and the run read as a pass. Such an exit is now a goal missed
    (and ``main`` exits 1 for it)."""
    outcome = soak.SoakOutcome(
        duration_s=120,
        faults=[],
        operations=[],
        worker_actions=[],
        exits=[soak.UnexpectedExit("celery-1", 71.2, 1, "Unrecoverable error: AttributeError")],
        samples=[],
        clients=[],
        api_operations=[],
        verification={},
        errors=[],
    )
    report = soak.build_report(
        profile=soak.QUICK,
        schedule=soak.make_schedule(9090, 120, soak.QUICK),
        outcome=outcome,
        trust=common.trust_fields(common.Validity(True), [0.1, 0.1, 0.1], []),
        machine={},
        elapsed_s=130.0,
        error=None,
    )
    assert report["goals"]["unexpected_exits_0"] == {"value": 1, "met": False}
    assert report["unexpected_exits"][0]["name"] == "celery-1"


def test_a_run_that_never_started_still_reports_why() -> None:
    report = soak.build_report(
        profile=soak.QUICK,
        schedule=soak.make_schedule(1, 120, soak.QUICK),
        outcome=None,
        trust=common.trust_fields(common.Validity(True), [0.1, 0.1, 0.1], []),
        machine={},
        elapsed_s=3.0,
        error="the Spark standalone cluster did not start",
    )
    assert report["error"] == "the Spark standalone cluster did not start"
    assert report["goals"]["records_lost_0"]["met"] is False  # nothing was checked


# -- the websocket client's framing -----------------------------------------------------------------


def test_the_accept_key_is_rfc_6455s_example() -> None:
    assert soak.ws_accept("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


@pytest.mark.parametrize("size", [0, 5, 125, 126, 300, 70_000])
def test_a_masked_frame_decodes_to_what_was_encoded(size: int) -> None:
    payload = bytes(range(256)) * (size // 256) + bytes(range(size % 256))
    frame = soak.ws_encode(soak.OP_TEXT, payload, b"\x01\x02\x03\x04")
    assert frame[1] & 0x80  # a client's frame is masked
    decoded, used = soak.ws_decode(frame + b"next")
    assert decoded == soak.WsFrame(True, soak.OP_TEXT, payload)
    assert used == len(frame)
    # an incomplete frame waits for more
    assert soak.ws_decode(frame[:-1] if size else frame[:1]) == (None, 0)


def test_a_servers_unmasked_frames_decode_one_at_a_time() -> None:
    text = json.dumps({"type": "operation.finished", "operation_id": "a1", "status": "completed"})
    body = text.encode() * 10  # 126..65535 bytes: a 16-bit length
    first = bytes([0x81, 126]) + len(body).to_bytes(2, "big") + body
    ping = bytes([0x89, 2]) + b"hi"
    frame, used = soak.ws_decode(first + ping)
    assert frame is not None and frame.payload == body and used == len(first)
    frame, used = soak.ws_decode(ping)
    assert frame == soak.WsFrame(True, soak.OP_PING, b"hi") and used == 4
    with pytest.raises(ValueError, match="4 bytes"):
        soak.ws_encode(soak.OP_TEXT, b"x", b"\x00")


def test_only_events_that_carry_the_operations_status_change_it() -> None:
    assert soak.ws_status_update(
        {"type": "operation.finished", "operation_id": "a", "status": "failed"}
    ) == ("a", "failed")
    assert soak.ws_status_update(
        {"type": "operation.requested", "operation_id": "a", "status": "pending"}
    ) == ("a", "pending")
    assert soak.ws_status_update({"type": "operation.cancelling", "operation_id": "a"}) == (
        "a",
        "cancelling",
    )
    # the runner's report in a progress event is not the operation's status
    assert (
        soak.ws_status_update({"type": "operation.progress", "operation_id": "a", "status": "x"})
        is None
    )
    assert soak.ws_status_update({"type": "epoch.committed", "epoch": 3}) is None
