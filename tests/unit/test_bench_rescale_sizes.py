"""The size summary's arithmetic (``bench/rescale_sizes.py``): the T0 + bytes/rate fit and the
points it reads from ``bench/rescale.py`` results. Nothing here runs a benchmark."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import rescale_sizes


def test_fit_recovers_a_fixed_part_and_a_rate() -> None:
    # 2 s fixed, 100 MB/s
    xs = [10e6, 100e6, 1000e6]
    f = rescale_sizes.fit(xs, [2 + x / 100e6 for x in xs])
    assert f is not None
    assert f.t0_s == pytest.approx(2.0)
    assert f.bytes_per_s == pytest.approx(100e6)
    assert f.r2 == pytest.approx(1.0)
    assert f.predict(500e6) == pytest.approx(7.0)


def test_no_fit_without_two_sizes_or_with_time_falling_as_bytes_grow() -> None:
    assert rescale_sizes.fit([1e6, 1e6], [1.0, 2.0]) is None
    assert rescale_sizes.fit([1e6, 2e6], [2.0, 1.0]) is None


def test_the_two_term_fit_tells_keys_from_bytes() -> None:
    # 1 s fixed, a million keys a second, 100 MB a second
    sizes = [(1e6, 16e6), (10e6, 160e6), (1e6, 1e9), (1e6, 16e6)]
    keys, moved = [k for k, _ in sizes], [b for _, b in sizes]
    f = rescale_sizes.fit2(keys, moved, [1 + k / 1e6 + b / 1e8 for k, b in sizes])
    assert f is not None
    assert f.t0_s == pytest.approx(1.0)
    assert f.keys_per_s == pytest.approx(1e6)
    assert f.bytes_per_s == pytest.approx(1e8)
    assert f.predict(2e6, 100e6) == pytest.approx(4.0)
    assert rescale_sizes.fit2(keys[:2], moved[:2], [1.0, 2.0]) is None, "two sizes, three terms"


def _run(total: float, moved_bytes: int, exact: bool = True) -> dict[str, Any]:
    return {
        "summary": {
            "total_s": total,
            "state_bytes": 40_000_000,
            "keys": {"moved": 800_000, "bytes_moved": moved_bytes, "transfer_s": total / 4},
        },
        "verification": {"exact": exact},
    }


def _report(tmp: Path, name: str, keys: int, runs: list[dict[str, Any]]) -> Path:
    path = tmp / name
    path.write_text(
        json.dumps(
            {
                "valid": True,
                "machine": {"load_avg_at_start": [0.3, 0.2, 0.1]},
                "parameters": {"keys_at_operation": keys, "value_bytes": 8},
                "results": {"all_at_once": {"runs": runs}, "spark_native": {"runs": [{}]}},
            }
        )
    )
    return path


def test_points_are_medians_per_strategy_and_the_samples_every_run(tmp_path: Path) -> None:
    path = _report(
        tmp_path, "a.json", 1_600_000, [_run(4.0, 20e6), _run(6.0, 20e6), _run(5.0, 20e6)]
    )
    pts, samples = rescale_sizes.points(path)
    # spark_native's only run failed (no summary): no point, rather than a misleading one
    assert [p.strategy for p in pts] == ["all_at_once"]
    assert pts[0].total_s == 5.0
    assert pts[0].exact and pts[0].load_at_start == 0.3
    assert len(samples) == 3


def test_main_writes_the_fit_and_the_size_ratio(tmp_path: Path) -> None:
    small = _report(tmp_path, "small.json", 1_600_000, [_run(4.0, 20_000_000)])
    large = _report(tmp_path, "large.json", 16_000_000, [_run(13.0, 200_000_000, exact=False)])
    out = tmp_path / "sizes.json"
    assert rescale_sizes.main([str(small), str(large), "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["fit_total"]["t0_s"] == pytest.approx(3.0)
    assert report["fit_total"]["bytes_per_s"] == pytest.approx(20e6)
    assert report["ratio_largest_over_smallest_counts"]["ratio"] == 3.25
    assert report["ratio_largest_over_smallest_counts"]["met"] is True
    # an inexact run shows as such, whatever its time
    assert [p["exact"] for p in report["points"]] == [True, False]


def test_a_spark_only_result_takes_its_state_size_from_the_runner_run_of_the_same_keys(
    tmp_path: Path,
) -> None:
    # Spark's route reports no state bytes of its own (its state is in Spark's store); a run of
    # it kept in a file of its own must plot at its size, not at 0 bytes
    runner = _report(tmp_path, "runner.json", 16_000_000, [_run(13.0, 200_000_000)])
    spark_only = tmp_path / "spark.json"
    spark_run = {"summary": {"total_s": 140.0, "keys": {"rewritten": 16_000_000}}}
    spark_only.write_text(
        json.dumps(
            {
                "valid": True,
                "machine": {"load_avg_at_start": [0.3, 0.2, 0.1]},
                "parameters": {"keys_at_operation": 16_000_000, "value_bytes": 8},
                "results": {"spark_native": {"runs": [spark_run]}},
            }
        )
    )
    out = tmp_path / "sizes.json"
    assert rescale_sizes.main([str(spark_only), str(runner), "--out", str(out)]) == 0
    points = json.loads(out.read_text())["points"]
    assert {p["strategy"]: p["state_bytes"] for p in points} == {
        "spark_native": 40_000_000,
        "all_at_once": 40_000_000,
    }
