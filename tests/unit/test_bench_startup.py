"""The startup benchmark's pure parts (``bench/startup.py``): which epoch counts as the first at
a rescale's new size, and the figures, ratios and phase profiles of a report. Nothing here starts
a process or Spark."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench import startup


def _run(contender: str, cold: float, restart: float, rescale: dict[str, Any]) -> dict[str, Any]:
    return {
        "contender": contender,
        "cold_s": cold,
        "restart_s": restart,
        "cold_phases": {"spark": cold / 2},
        "restart_phases": {"spark": restart / 2},
        "rescale": rescale,
    }


def _ours(cold: float, stop_start: float, live: float, live_at_size: float) -> dict[str, Any]:
    return _run(
        "rescaler",
        cold,
        cold,
        {
            "stop_start": {"first_epoch_s": stop_start, "at_new_size_s": stop_start},
            "live": {"first_epoch_s": live, "at_new_size_s": live_at_size},
        },
    )


def _plain(cold: float, relaunch: float) -> dict[str, Any]:
    return _run("plain", cold, cold, {"restart_at_new_size": {"at_new_size_s": relaunch}})


def test_each_rescale_is_set_beside_the_plain_query_s_stop_and_relaunch() -> None:
    runs = [
        _ours(10, 2, 1, 3),
        _plain(8, 16),
        _ours(12, 4, 1, 5),
        _plain(8, 16),
        {"contender": "rescaler", "error": "exited"},  # a failed round counts in no figure
    ]
    figures = startup.summarize(runs)
    assert figures["rescaler"]["cold_s"]["median"] == 11
    assert figures["rescaler"]["cold_s"]["n"] == 2
    assert figures["ratios"] == {
        "cold_s": round(11 / 8, 2),
        "restart_s": round(11 / 8, 2),
        "stop_start_s": round(3 / 16, 2),
        "live_s": round(1 / 16, 2),
        "live_at_new_size_s": round(4 / 16, 2),
    }
    phases = startup.profiles(runs)
    assert phases["rescaler cold start"] == {"spark": 5.5}
    assert phases["plain restart"] == {"spark": 4.0}
    text = startup.table(figures, phases)
    assert "stop-start rescale request" in text and "0.19x" in text


def test_the_first_epoch_at_the_new_size_is_the_first_with_keys_on_the_new_pu(
    tmp_path: Path,
) -> None:
    contender = startup.Contender("rescaler", tmp_path, rows_per_epoch=10, keys=10)
    control = tmp_path / "state" / startup.PIPELINE / "control"
    assert contender.epoch_with_pu(2, after=-1) is None  # no runner has written yet
    control.mkdir(parents=True)
    epochs = [
        {"epoch": 4, "per_pu": [{"pu": 0, "keys": 5}, {"pu": 2, "keys": 3}]},  # before the request
        {"epoch": 5, "per_pu": [{"pu": 0, "keys": 5}, {"pu": 2, "keys": 0}]},  # there, no keys yet
        {"epoch": 6, "per_pu": [{"pu": 0, "keys": 4}, {"pu": 2, "keys": 1}]},
    ]
    text = "\n".join(json.dumps(e) for e in epochs) + '\n{"epoch": 7, "per'  # a line being written
    (control / "epochs.jsonl").write_text(text)
    assert contender.epoch_with_pu(2, after=4) == 6
    assert contender.epoch_with_pu(3, after=4) is None
