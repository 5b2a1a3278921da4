"""The pure parts of the benchmarks' shared plumbing (``bench/_common.py``): the launch order of
repeated runs, the median/min/max of their figures, exactness over all runs, and the load gate
with the invalid marking. Nothing here starts a process or Spark."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from bench import _common as common


# -- the interleaved order -------------------------------------------------------------------------
def test_interleaved_alternates_the_order_every_other_round() -> None:
    assert common.interleaved(["A", "B"], 3) == [
        (0, "A"),
        (0, "B"),
        (1, "B"),
        (1, "A"),
        (2, "A"),
        (2, "B"),
    ]


def test_interleaved_runs_every_contender_once_per_round() -> None:
    names = ["rescaler", "tws", "native"]
    order = common.interleaved(names, 4)
    assert len(order) == 12
    for rnd in range(4):
        in_round = [name for r, name in order if r == rnd]
        assert sorted(in_round) == sorted(names)
    # rounds follow each other: no contender's repetitions are bunched together
    assert [r for r, _ in order] == sorted(r for r, _ in order)
    assert [name for r, name in order if r == 1] == list(reversed(names))


def test_interleaved_once_keeps_the_given_order() -> None:
    assert common.interleaved(["b", "a", "c"], 1) == [(0, "b"), (0, "a"), (0, "c")]


def test_interleaved_refuses_fewer_than_one_round() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        common.interleaved(["A"], 0)


def test_run_rounds_runs_in_the_interleaved_order_and_records_the_load_at_each_launch() -> None:
    calls: list[tuple[str, int]] = []

    def run_one(name: str, rnd: int) -> dict[str, Any]:
        calls.append((name, rnd))
        return {"value": f"{name}{rnd}", "load_avg_at_launch": [float(len(calls)), 0.0, 0.0]}

    runs, launches = common.run_rounds(["A", "B"], 2, run_one)

    assert calls == [("A", 0), ("B", 0), ("B", 1), ("A", 1)]
    # each contender's runs in round order, whatever the launch order
    assert [r["value"] for r in runs["A"]] == ["A0", "A1"]
    assert [r["round"] for r in runs["B"]] == [0, 1]
    assert launches == [
        {"round": 0, "contender": "A", "load_avg": [1.0, 0.0, 0.0]},
        {"round": 0, "contender": "B", "load_avg": [2.0, 0.0, 0.0]},
        {"round": 1, "contender": "B", "load_avg": [3.0, 0.0, 0.0]},
        {"round": 1, "contender": "A", "load_avg": [4.0, 0.0, 0.0]},
    ]


# -- median, min and max over the runs ------------------------------------------------------------
def test_spread_is_the_median_with_min_and_max_not_the_best() -> None:
    figure = common.spread([30.0, 10.0, 20.0])
    assert figure == {
        "median": 20.0,
        "min": 10.0,
        "max": 30.0,
        "n": 3,
        "values": [30.0, 10.0, 20.0],
    }


def test_spread_of_an_even_count_is_the_mean_of_the_middle_two() -> None:
    figure = common.spread([4, 1, 3, 10])
    assert figure is not None
    assert figure["median"] == 3.5
    assert (figure["min"], figure["max"]) == (1, 10)


def test_spread_leaves_out_failed_runs_but_keeps_their_place() -> None:
    figure = common.spread([None, 5.0, 1.0])
    assert figure is not None
    assert figure["median"] == 3.0
    assert figure["n"] == 2
    assert figure["values"] == [None, 5.0, 1.0]


def test_spread_of_no_numbers_is_none() -> None:
    assert common.spread([None, None]) is None
    assert common.spread([]) is None


def test_combine_runs_reports_every_headline_figure_and_keeps_the_runs() -> None:
    runs: list[dict[str, Any]] = [
        {
            "summary": {"rows_per_s": 100.0},
            "memory": {"peak_rss_mb": 900},
            "verification": {"exact": True},
        },
        {"error": "exit code 1"},
        {
            "summary": {"rows_per_s": 300.0},
            "memory": {"peak_rss_mb": 700},
            "verification": {"exact": True},
        },
    ]
    figures: common.Figures = {
        "rows_per_s": lambda r: common.dig(r, "summary", "rows_per_s"),
        "peak_rss_mb": lambda r: common.dig(r, "memory", "peak_rss_mb"),
    }
    combined = common.combine_runs(runs, figures)
    assert combined["runs"] == runs
    assert combined["headline"]["rows_per_s"]["median"] == 200.0
    assert combined["headline"]["rows_per_s"]["min"] == 100.0
    assert combined["headline"]["rows_per_s"]["max"] == 300.0
    assert combined["headline"]["peak_rss_mb"]["median"] == 800.0
    # the failed run has no verification: the contender is not exact
    assert combined["exact"] is False


def test_dig_returns_none_where_a_run_left_a_part_out() -> None:
    run = {"summary": {"keys": {"moved": 7}}, "error": None}
    assert common.dig(run, "summary", "keys", "moved") == 7
    assert common.dig(run, "summary", "downtime", "longest_gap_s") is None
    assert common.dig(run, "summary", "keys", "moved", "deeper") is None


def test_fmt_spread_shows_median_then_min_and_max() -> None:
    figure = common.spread([2.0, 1.0, 3.0])
    assert common.fmt_spread(figure, ".2f", "x") == "2.00x [1.00x, 3.00x]"
    assert common.fmt_spread(common.spread([1234.4]), ",.0f") == "1,234"
    assert common.fmt_spread(None) == "-"


def test_format_table_right_aligns_a_column_of_spreads() -> None:
    text = common.format_table(
        ["name", "rows/s"],
        [["a", "1,000 [900, 1,100]"], ["bb", "20 [10, 30]"]],
    )
    lines = text.splitlines()
    assert lines[2] == "a     1,000 [900, 1,100]"
    assert lines[3] == "bb" + " " * 11 + "20 [10, 30]"


# -- exactness over every run ---------------------------------------------------------------------
def _verified(*exact: bool | None) -> list[dict[str, Any]]:
    return [{} if e is None else {"verification": {"exact": e}} for e in exact]


def test_exact_only_when_every_run_is_exact() -> None:
    assert common.all_exact(_verified(True, True, True)) is True
    assert common.all_exact(_verified(True, False, True)) is False
    assert common.all_exact(_verified(True, None)) is False  # a run never verified
    assert common.all_exact([]) is False


def test_exact_cell_counts_the_runs_that_were_not() -> None:
    assert common.exact_cell(_verified(True, True, True)) == "yes"
    assert common.exact_cell(_verified(True, False, None)) == "NO (2 of 3 runs)"


# -- the load gate and the invalid marking ------------------------------------------------------
@pytest.mark.parametrize("load1", [0.0, 0.42, 1.0])
def test_load_gate_lets_a_quiet_machine_start_valid(load1: float) -> None:
    for allow in (False, True):
        assert common.load_gate(load1, allow) == common.Validity(valid=True)


def test_load_gate_refuses_a_loaded_machine_and_says_what_to_do() -> None:
    with pytest.raises(SystemExit) as refused:
        common.load_gate(1.01, allow_load=False)
    message = str(refused.value.code)
    assert "1.01" in message
    assert "--allow-load" in message
    assert "Wait until it is below 1.00" in message


def test_load_gate_with_allow_load_runs_but_marks_the_result_invalid() -> None:
    validity = common.load_gate(2.5, allow_load=True)
    assert validity.valid is False
    assert validity.reason is not None
    assert "2.50" in validity.reason


def test_check_load_judges_this_machines_one_minute_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(common.os, "getloadavg", lambda: (3.14159, 0.5, 0.25))
    with pytest.raises(SystemExit):
        common.check_load(False, prefix="test")
    validity, load = common.check_load(True, prefix="test")
    assert validity.valid is False
    assert load == [3.14, 0.5, 0.25]

    monkeypatch.setattr(common.os, "getloadavg", lambda: (0.2, 3.0, 3.0))  # only 1 minute counts
    validity, _ = common.check_load(False, prefix="test")
    assert validity.valid is True


def test_an_invalid_report_says_so_in_its_json_and_over_its_table() -> None:
    validity = common.load_gate(2.5, allow_load=True)
    launches = [{"round": 0, "contender": "A", "load_avg": [2.4, 1.0, 0.5]}]
    report = common.trust_fields(validity, [2.5, 1.1, 0.6], launches)
    assert report["valid"] is False
    assert "2.50" in report["invalid_reason"]
    assert report["load"]["before_start"] == [2.5, 1.1, 0.6]
    assert report["load"]["at_launch"] == launches

    text = common.with_verdict("name  rows/s\n----  ------", report)
    first, *rest = text.splitlines()
    assert first.startswith("INVALID (load 2.50)")
    assert rest == ["name  rows/s", "----  ------"]


def test_a_valid_report_has_no_verdict_over_its_table() -> None:
    report = common.trust_fields(common.load_gate(0.3, allow_load=False), [0.3, 0.2, 0.1], [])
    assert report["valid"] is True
    assert report["invalid_reason"] is None
    assert common.with_verdict("table", report) == "table"
    assert common.with_verdict("table", {}) == "table"  # a report from before the gate


# -- the command line -----------------------------------------------------------------------------
def test_repeat_defaults_to_three_and_must_be_at_least_one() -> None:
    parser = argparse.ArgumentParser()
    common.add_trust_args(parser)
    args = parser.parse_args([])
    assert (args.repeat, args.allow_load) == (3, False)
    assert parser.parse_args(["--repeat", "1", "--allow-load"]).repeat == 1
    with pytest.raises(SystemExit):
        parser.parse_args(["--repeat", "0"])


def test_the_epoch_breakdown_adds_up_to_sparks_trigger_time() -> None:
    from bench.steady_state import Workload, breakdown

    w = Workload(
        dist="uniform", zipf_s=0.0, key_space=10, rows_per_epoch=5, warmup=1, epochs=2,
        shuffle_partitions=2,
    )  # fmt: skip
    timings = {"plan_s": 0.002, "build_s": 0.04, "spark_job_s": 0.2, "bookkeeping_s": 0.0,
               "report_s": 0.005}  # fmt: skip
    reports = [{"epoch": e, "timings": timings} for e in range(4)]
    reports[0]["timings"] = {k: 9.0 for k in timings}  # the warm-up epoch is not measured
    summary = {"mean_ms_by_component": {"triggerExecution": 300.0, "walCommit": 15.0,
                                        "commitOffsets": 20.0, "queryPlanning": 5.0}}  # fmt: skip
    parts = breakdown(reports, summary, w)
    assert parts["spark_job"] == 200.0 and parts["build"] == 40.0 and parts["plan"] == 2.0
    assert parts["spark_latestOffset"] == 0.0 and parts["spark_walCommit"] == 15.0
    assert parts["other"] == 13.0  # 300 - (15 + 20 + 5 + 2 + 40 + 200 + 0 + 5)
    assert parts["total_triggerExecution"] == 300.0


# -- settling before each launch -------------------------------------------------------------------
class _FakeLoad:
    """A 1-minute load average that reads the next value each time, on a clock the sleeps move."""

    def __init__(self, *loads: float) -> None:
        self.loads = list(loads)
        self.now = 0.0
        self.sleeps: list[float] = []

    def read(self) -> tuple[float, float, float]:
        value = self.loads.pop(0) if len(self.loads) > 1 else self.loads[0]
        return (value, 0.0, 0.0)

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


def _settle(fake: _FakeLoad, **kwargs: Any) -> float:
    return common.settle_load(
        prefix="test", read=fake.read, sleep=fake.sleep, clock=fake.clock, **kwargs
    )


def test_settle_load_launches_at_once_on_a_quiet_machine() -> None:
    fake = _FakeLoad(0.42)
    assert _settle(fake) == 0.0
    assert fake.sleeps == []


def test_settle_load_waits_until_the_load_left_by_earlier_work_decays() -> None:
    # the lagging average after a count of distinct keys: 1.05 at the launch that prompted this
    fake = _FakeLoad(1.6, 1.3, 1.05, 1.004, 0.9)
    assert _settle(fake, poll_s=5.0) == 15.0
    assert fake.sleeps == [5.0, 5.0, 5.0]  # 1.004 is judged as shown (1.00), like the start gate


def test_settle_load_gives_up_after_its_timeout_when_other_work_keeps_running() -> None:
    fake = _FakeLoad(2.0)
    assert _settle(fake, poll_s=5.0, timeout_s=20.0) == 20.0
    assert fake.sleeps == [5.0, 5.0, 5.0, 5.0]
