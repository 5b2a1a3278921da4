"""The suite's own scheduling (tests/conftest.py): the order pytest-xdist deals tests out in, and
the refusal of a scheduler that would leave tests unrun."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import unrunnable_duplicates


def test_a_file_scheduler_is_refused_where_node_ids_repeat() -> None:
    # schemathesis collects every API operation of a test under the test's one node id; xdist's
    # file scheduler keeps one test per node id (28 of 30 went unrun before this check)
    ids = ["a.py::test_x", "b.py::test_fuzz", "b.py::test_fuzz", "b.py::test_fuzz"]
    assert unrunnable_duplicates(ids, "loadfile") == ["b.py::test_fuzz"]
    assert unrunnable_duplicates(ids, "loadscope") == ["b.py::test_fuzz"]
    assert unrunnable_duplicates(ids, "load") == []
    assert unrunnable_duplicates(ids, "no") == []
    assert unrunnable_duplicates(["a.py::test_x", "a.py::test_y"], "loadfile") == []


def test_spark_tests_come_first_and_the_quick_loop_leaves_them_out() -> None:
    """The order survives pytest-django's own (by test type: database tests first), and
    ``-m "not spark"`` (the quick loop) drops every Spark test, those under
    tests/integration/workers/ included. A conftest hook run before pytest-django's put the
    unit tests first, so a worker ended waiting alone on Spark tests. Collected from three
    files, one of each cost class, with the suite's own conftest."""
    files = [
        "tests/unit/test_health.py",  # unit, with database tests
        "tests/integration/sinks/test_sink_ahead.py",  # real services, no Spark
        "tests/integration/workers/test_scheduling.py",  # Spark, unmarked in the file
    ]
    collect = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    order = _ids([*collect, *files])
    spark = set(_ids([*collect, "-m", "spark", *files]))
    assert spark and spark == {n for n in order if n.startswith("tests/integration/workers/")}
    kinds = [0 if n in spark else 2 if n.startswith("tests/unit/") else 1 for n in order]
    assert kinds == sorted(kinds) and set(kinds) == {0, 1, 2}, order
    quick = _ids([*collect, "-m", "not spark", *files])
    assert set(quick) == set(order) - spark


REPO = Path(__file__).resolve().parents[2]


def _ids(command: list[str]) -> list[str]:
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=True)
    return [line for line in done.stdout.splitlines() if "::" in line]
