"""The runner's SparkSession helpers that need no JVM."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from workers.spark_session import spark_info, stop_spark


def test_a_stop_that_hangs_is_given_up_so_the_runner_can_end() -> None:
    release = threading.Event()
    hung = SimpleNamespace(stop=lambda: release.wait(30))
    try:
        assert stop_spark(hung, timeout_s=0.2) is False
    finally:
        release.set()


def test_a_stop_that_returns_is_waited_for() -> None:
    stopped: list[bool] = []
    assert stop_spark(SimpleNamespace(stop=lambda: stopped.append(True)), timeout_s=5) is True
    assert stopped == [True]


def test_a_stopped_context_is_reported_down_without_raising() -> None:
    """Once stopped, the context's JVM handle is None: the heartbeat that reads it beside the
    stop says Spark is down (it used to raise, and log a traceback, on the application id)."""
    stopped = SimpleNamespace(sparkContext=SimpleNamespace(_jsc=None, master="local[2]"))
    assert spark_info(stopped) == {"alive": False, "master": "local[2]", "app_id": ""}
