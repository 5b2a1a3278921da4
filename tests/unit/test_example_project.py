"""The example project (examples/sessions): its definition loads as a user's would, and its
oracle follows Spark's micro-batch rules on a hand-made input. The integration test runs it on
Spark against transformWithState and this oracle."""

from __future__ import annotations

from examples.sessions.oracle import expected
from workers.pipeline.loading import load_pipeline


def test_the_example_loads_as_a_user_pipeline() -> None:
    pipeline = load_pipeline("examples.sessions.pipeline:build")
    (row,) = [r for r in pipeline.topology_fragments() if r["kind"] == "stateful"]
    assert row["key"] == "user"
    assert row["operator"].startswith("SessionTracker (row, time eventtime")
    for variable in ("value session", "list path", "map views"):
        assert variable in row["operator"]


def test_the_oracle_closes_by_timer_and_drops_late_clicks() -> None:
    epochs = [
        [("a", "p1", 100, 10), ("a", "p2", 101, 5)],  # a's session; watermark then 100 s
        [("b", "p1", 105, 1)],  # watermark then 104 s
        [],  # a's timer (101 + 2 s) is due at 104 s: an empty epoch closes it
        [("a", "p9", 99, 7)],  # 99 s is at or below the previous watermark: late, dropped
    ]
    closed, sessions = expected(epochs)
    assert closed == {("a", 100, 101, 2, 15, 2, "p1", "p1>p2"): 1}
    assert list(sessions) == ["b"]
    b = sessions["b"]
    assert (b.start, b.last, b.clicks, b.nbytes) == (105, 105, 1, 1)


def test_a_longer_gap_inside_an_epoch_closes_at_once() -> None:
    closed, sessions = expected([[("a", "p1", 100, 1), ("a", "p1", 103, 1), ("a", "p2", 104, 1)]])
    assert closed == {("a", 100, 100, 1, 1, 1, "p1", "p1"): 1}
    assert sessions["a"].clicks == 2 and sessions["a"].path == ["p1", "p2"]
