"""The suite's own scheduling (tests/conftest.py): the order pytest-xdist deals tests out in, and
the refusal of a scheduler that would leave tests unrun."""

from __future__ import annotations

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
