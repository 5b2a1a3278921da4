"""The rescale benchmark's arithmetic (``bench/rescale.py``): downtime as the issue defines it
(the longest interval without a commit of non-moving keys' records during the operation, minus
the steady p99 of that interval) and the goals read from one round. Nothing here starts Spark."""

from __future__ import annotations

from typing import Any

import pytest

from bench import rescale

P = rescale.Params(
    key_space=100,
    zipf_s=0.0,
    rows_per_epoch=10,
    target_keys=50,
    warmup_epochs=2,
    steady_epochs=4,
    post_epochs=1,
    vnodes=8,
    fluid_in_flight=2,
    batch_vnodes=2,
    batched_in_flight=1,
)


def _epochs(commits: list[float], duration: float = 0.5) -> list[dict[str, Any]]:
    return [
        {"epoch": i + 1, "committed_at": t, "duration_s": duration, "rows": 10, "keys": 50}
        for i, t in enumerate(commits)
    ]


def _live_run(commits: list[float], before: int, t0: float, t1: float) -> dict[str, Any]:
    step = {
        "collect_epoch": before + 1,
        "acquire_epoch": before + 2,
        "hold_queue": 3,
        "timings": {"collecting": t0 + 0.1, "exported": t0 + 0.3, "acquiring": t0 + 1.0},
    }
    return {
        "epochs": _epochs(commits),
        "epochs_before": before,
        "requested_at": t0,
        "completed_at": t1,
        "result": {
            "status": "completed",
            "progress": {"steps": [step], "keys_moved": 1000, "bytes_moved": 50_000_000},
        },
    }


def test_downtime_is_the_longest_gap_during_the_operation_minus_the_steady_p99_gap() -> None:
    # steady gaps of 1 s with one of 1.2 s; during the operation a gap of 2 s
    commits = [1.0, 2.0, 3.0, 4.2, 5.2, 6.2, 8.2, 9.2]
    run = _live_run(commits, before=6, t0=6.5, t1=8.5)
    s = rescale.summarize("all_at_once", run, P)
    assert s["steady"]["p99_gap_s"] == pytest.approx(1.2, abs=0.01)
    assert s["downtime"]["longest_gap_s"] == pytest.approx(2.0)
    assert s["downtime"]["downtime_s"] == pytest.approx(0.8, abs=0.01)


def test_non_moving_latency_is_also_read_against_the_steady_state_at_the_new_size() -> None:
    # 0.5 s epochs before, 1.5 s during the operation, 0.75 s after it (more PUs than slots)
    commits = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.5, 9.0, 10.0, 11.0, 12.0]
    run = _live_run(commits, before=6, t0=6.1, t1=9.1)
    for epoch in run["epochs"][6:8]:
        epoch["duration_s"] = 1.5
    for epoch in run["epochs"][8:]:
        epoch["duration_s"] = 0.75
    s = rescale.summarize("fluid", run, P)
    assert s["non_moving"]["max_over_steady_p99"] == pytest.approx(3.0)
    assert s["after"] == {"epochs": 3, "p50_latency_s": 0.75}
    assert s["non_moving"]["max_over_after_p50"] == pytest.approx(2.0)


def test_no_downtime_when_no_gap_exceeds_the_steady_p99_gap() -> None:
    commits = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    s = rescale.summarize("fluid", _live_run(commits, before=6, t0=6.5, t1=7.5), P)
    assert s["downtime"]["downtime_s"] == 0
    g = rescale.goals("fluid", s, {})
    assert g["downtime_0s"]["met"] is True
    assert g["moving_extra_le_2_epochs"] == {"value": 1, "met": True}


def test_goals_compare_runs_of_one_round() -> None:
    commits = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    aao = rescale.summarize("all_at_once", _live_run(commits, before=6, t0=6.5, t1=7.5), P)
    fluid = rescale.summarize("fluid", _live_run(commits, before=6, t0=6.5, t1=12.5), P)
    spark = {"phases_s": {"stop": 1.0, "repartition": 2.0, "restart": 2.5}, "total_s": 7.0}
    g = rescale.goals("all_at_once", aao, {"spark_native": spark, "fluid": fluid})
    assert g["ge_5x_sooner_than_spark"]["value"] == pytest.approx(5.5)
    assert g["ge_5x_sooner_than_spark"]["met"] is True
    # 1000 keys in 0.2 s of export: far below two million keys a second
    assert g["ge_2M_keys_per_s_transfer"] == {"value": 5000, "met": False}
    f = rescale.goals("fluid", fluid, {"all_at_once": aao})
    assert f["le_5x_all_at_once_time"]["value"] == pytest.approx(6.0)
    assert f["le_5x_all_at_once_time"]["met"] is False


def test_large_states_are_judged_by_bytes_per_second_of_transfer() -> None:
    commits = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    aao = rescale.summarize("all_at_once", _live_run(commits, before=6, t0=6.5, t1=7.5), P)
    # 50 MB exported in 0.2 s
    assert aao["keys"]["mb_per_s_transfer"] == pytest.approx(250.0)
    g = rescale.goals("all_at_once", aao, {}, value_bytes=1024)
    assert g["ge_200MB_per_s_transfer"] == {"value": 250.0, "met": True}
    assert "ge_2M_keys_per_s_transfer" not in g
    # a live operation is also judged on its latency for the keys that stay
    assert g["non_moving_max_le_1.2x_steady_p99"]["met"] is True
    assert g["downtime_le_0.1s"]["met"] is True


def test_spark_routes_refuse_padded_states() -> None:
    with pytest.raises(SystemExit, match="drop spark_native"):
        rescale.main(["--value-bytes", "1024", "--strategies", "all_at_once,spark_native"])


def test_the_hot_vnode_is_judged_by_its_held_records_per_epoch_against_the_cap_share() -> None:
    commits = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]

    def step(vnode: int, collect: int, acquire: int, held: int, kr: Any = None) -> dict[str, Any]:
        return {
            "collect_epoch": collect,
            "acquire_epoch": acquire,
            "hold_queue": held,
            "key_range": kr,
            "per_vnode": {str(vnode): {"hold_queue": held}},
            "timings": {},
        }

    whole = _live_run(commits, before=6, t0=6.5, t1=9.5)
    # vnode 3 is the hot one: 400 records held over 2 epochs; vnode 1 less
    whole["result"]["progress"]["steps"] = [step(1, 7, 8, 50), step(3, 7, 9, 400)]
    cut = _live_run(commits, before=6, t0=6.5, t1=9.5)
    # the same vnode in 4 key ranges, one epoch each: at most 60 records held in one epoch;
    # another vnode is the cut run's hottest, but the goal reads fluid's hottest
    cut["result"]["progress"]["steps"] = [
        step(3, 7 + i, 8 + i, held, [i, 4]) for i, held in enumerate((40, 60, 55, 45))
    ] + [step(5, 7, 8, 300)]
    p = rescale.Params(**{**P.__dict__, "key_cap": 2})  # a quarter of 50 / 8 keys per vnode
    s_whole = rescale.summarize("fluid", whole, p)
    s_cut = rescale.summarize("fluid_cut", cut, p)
    assert (s_whole["moving"]["hot_vnode"], s_whole["moving"]["hot_vnode_held_per_epoch"]) == (
        3,
        200.0,
    )
    assert s_cut["moving"]["held_per_epoch_by_vnode"] == {"3": 60.0, "5": 300.0}
    assert s_cut["moving"]["key_range_steps"] == 4
    assert s_cut["key_cap_share"] == pytest.approx(0.32)
    g = rescale.goals("fluid_cut", s_cut, {"fluid": s_whole})["hot_vnode_held_le_cap_share"]
    assert g["value"] == pytest.approx(0.3) and g["met"] is True and g["vnode"] == 3
    # a cut that holds more than the cap's share misses the goal
    cut["result"]["progress"]["steps"][1]["per_vnode"]["3"]["hold_queue"] = 90
    s_cut = rescale.summarize("fluid_cut", cut, p)
    g = rescale.goals("fluid_cut", s_cut, {"fluid": s_whole})["hot_vnode_held_le_cap_share"]
    assert g["value"] == pytest.approx(0.45) and g["met"] is False


def test_the_moving_load_is_timed_by_each_step_s_acquire_weighted_by_its_held_records() -> None:
    """``load moved, mean s``: each step's records held per epoch (its vnodes' load) weighs the
    time its acquire epoch committed; half the load had moved when the weights passed half."""

    def step(collect: int, acquire: int | None, held: dict[str, int]) -> dict[str, Any]:
        per_vnode = {v: {"hold_queue": n} for v, n in held.items()}
        return {"collect_epoch": collect, "acquire_epoch": acquire, "per_vnode": per_vnode}

    commit = {1: 101.0, 2: 102.0, 3: 103.0, 5: 105.0}
    steps = [
        step(1, 2, {"7": 300}),  # 300 records per epoch, moved at 2 s
        step(2, 5, {"3": 60, "4": 60}),  # held 3 epochs: 40 per epoch, moved at 5 s
        step(1, 3, {"9": 0}),  # nothing held: no weight
        step(3, None, {"1": 500}),  # not acquired (returned): not moved
    ]
    moved = rescale._load_moved(steps, commit, t0=100.0)
    assert moved["load_moved_mean_s"] == pytest.approx((300 * 2 + 40 * 5) / 340, abs=1e-3)
    assert moved["load_half_moved_s"] == 2.0
    # the hottest last: the same load moves later
    late = rescale._load_moved([step(1, 5, {"7": 1200}), step(1, 2, {"3": 120})], commit, 100.0)
    assert late["load_moved_mean_s"] > moved["load_moved_mean_s"]
    assert rescale._load_moved([], commit, 100.0) == {
        "load_moved_mean_s": None,
        "load_half_moved_s": None,
    }


def test_the_hot_orders_are_fluid_and_batched_with_hot_vnodes_set() -> None:
    assert P.granularity("fluid_hot_last") == {**P.granularity("fluid"), "hot_vnodes": "last"}
    assert P.granularity("batched_by_vnode") == {**P.granularity("batched"), "hot_vnodes": None}
    assert rescale.request_body("fluid_hot_first", P)["granularity"]["hot_vnodes"] == "first"


def test_the_cpu_profile_separates_the_operation_s_cpu_from_the_stream_s() -> None:
    # 1 s epochs of 10 rows using 1.5 CPU-s each before the operation; during it, two epochs of
    # 2 s and 1.5 s using 4 and 2.5 CPU-s: 6.5 CPU-s, of which 3.5 beyond the stream's 3
    commits = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 9.5, 10.5]
    busy = [1.5, 3.0, 4.5, 6.0, 7.5, 9.0, 13.0, 15.5, 17.0]
    run = _live_run(commits, before=6, t0=6.1, t1=9.4)
    for epoch, cpu in zip(run["epochs"], busy, strict=True):
        epoch["busy_cpu_s"] = cpu
    cpu = rescale.summarize("all_at_once", run, P)["cpu"]
    cores = cpu["cores"]
    assert cpu["steady"]["cores_busy"] == pytest.approx(1.5)
    assert cpu["steady"]["cpu_s_per_100k_rows"] == pytest.approx(15_000)
    assert cpu["during"]["epochs"] == 2
    assert cpu["during"]["cpu_s"] == pytest.approx(6.5)
    assert cpu["during"]["extra_cpu_s"] == pytest.approx(3.5)
    assert cpu["during"]["extra_wall_s"] == pytest.approx(1.5)
    assert cpu["slowest"]["epoch"] == 7 and cpu["slowest"]["gap_s"] == pytest.approx(2.0)
    assert cpu["slowest"]["extra_cpu_s"] == pytest.approx(2.5)
    assert cpu["slowest"]["cpu_floor_s"] == pytest.approx(4.0 / cores, abs=1e-3)
    # the epoch after the operation, at the new size: 1.5 CPU-s for 10 rows, as before it
    assert cpu["after"]["cpu_s_per_100k_rows"] == pytest.approx(15_000)
    assert cpu["slowest"]["extra_cpu_s_over_after"] == pytest.approx(2.5)


def test_the_slowest_epoch_s_extra_cpu_is_also_read_against_the_new_size() -> None:
    # after the operation every epoch of 10 rows takes 2 CPU-s (more PUs than cores), not 1.5
    commits = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 9.5, 10.5, 11.5]
    busy = [1.5, 3.0, 4.5, 6.0, 7.5, 9.0, 13.0, 15.5, 17.5, 19.5]
    run = _live_run(commits, before=6, t0=6.1, t1=9.4)
    for epoch, cpu in zip(run["epochs"], busy, strict=True):
        epoch["busy_cpu_s"] = cpu
    for epoch in run["epochs"]:  # the JIT's share: 0.1 CPU-s an epoch, 1 s in epoch 7
        epoch["cpu_s_by_role"] = {
            "jvm_jit": epoch["epoch"] * 0.1 + (0.9 if epoch["epoch"] >= 7 else 0)
        }
    cpu = rescale.summarize("all_at_once", run, P)["cpu"]
    assert cpu["by_role_s"] == {"jvm_jit": {"steady_per_epoch": 0.1, "slowest": 1.0}}
    assert cpu["after"] == {"epochs": 2, "cores_busy": 2.0, "cpu_s_per_100k_rows": 20_000}
    assert cpu["slowest"]["extra_cpu_s"] == pytest.approx(2.5)
    assert cpu["slowest"]["extra_cpu_s_over_after"] == pytest.approx(2.0)


def test_runs_recorded_without_cpu_readings_have_no_cpu_profile() -> None:
    commits = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 9.0]
    s = rescale.summarize("fluid", _live_run(commits, before=6, t0=6.5, t1=8.5), P)
    assert s["cpu"] is None
