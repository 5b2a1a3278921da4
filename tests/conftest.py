"""Settings every test under tests/ shares."""

import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

# Tests assert behaviour, never time: no per-example deadline (a loaded CI machine would turn
# slowness into flaky failures), and no database of past examples written into the checkout.
# In CI the examples are derandomized, so a landing never depends on the luck of the draw;
# developers' runs keep exploring new examples (RESCALER_MODEL_EXAMPLES=400 for a deep run).
settings.register_profile(
    "rescaler", deadline=None, database=None, derandomize=bool(os.environ.get("CI"))
)
settings.load_profile("rescaler")


def _cost_class(item: pytest.Item) -> int:
    """0: starts Spark (a minute or more a test), 1: other real-service tests, 2: unit tests."""
    path = item.path.as_posix()
    if "/tests/unit/" in path:
        return 2
    if item.get_closest_marker("spark") or "/tests/integration/workers/" in path:
        return 0
    return 1


#: pytest-xdist's schedulers that hand out whole files (or classes, or groups): they keep one
#: test per node id, so the cases a plugin collects under one id (schemathesis's operations)
#: would all but one go unrun
SCOPE_SCHEDULERS = frozenset({"loadscope", "loadfile", "loadgroup"})


def unrunnable_duplicates(nodeids: list[str], dist: str) -> list[str]:
    """The node ids collected more than once, when ``dist`` would run only one of each."""
    if dist not in SCOPE_SCHEDULERS:
        return []
    return sorted(n for n, times in Counter(nodeids).items() if times > 1)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """On pytest-xdist's controller, once a worker has collected: refuse a scheduler that would
    leave tests unrun (the workers cannot tell: xdist clears ``--dist`` in them)."""
    dist = node.config.getoption("dist", "no")
    duplicates = unrunnable_duplicates(ids, dist)
    if duplicates:
        pytest.exit(
            f"--dist {dist} would run one test of each of these node ids, which name several: "
            f"{', '.join(duplicates)}; use --dist load (as scripts/test does)",
            returncode=pytest.ExitCode.USAGE_ERROR,
        )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest tests first: pytest-xdist (``scripts/test``: ``-n 2 --dist load
    --maxschedchunk 1``) hands the next test to whichever worker is down to one queued, so the
    Spark tests are shared between the workers from the start and the many short unit tests
    come last, filling whichever worker frees up first instead of a worker waiting alone on a
    Spark test at the end. A file keeps its tests together, in their order.

    Every test that starts Spark carries the ``spark`` marker (those under
    tests/integration/workers/ get it here), so ``scripts/test -m "not spark" -n 2`` is the
    quick loop of everything else. This hook runs after pytest-django's (``tryfirst``), which
    orders by test type and would undo this order, and before ``-m`` deselects."""
    by_file: dict[Path, int] = {}
    for item in items:
        cost = _cost_class(item)
        if cost == 0 and item.get_closest_marker("spark") is None:
            item.add_marker(pytest.mark.spark)
        by_file[item.path] = min(by_file.get(item.path, 2), cost)
    items.sort(key=lambda item: by_file[item.path])


@pytest.fixture
def processes(tmp_path: Path, redis_service: str, transactional_db: None) -> Iterator[object]:
    """The real stack's processes for one test (tests/integration/stack.py), all stopped after."""
    from rescaler.celery import app
    from tests.integration.stack import Processes

    procs = Processes(tmp_path)
    # tasks this process queues (the API's drivers) go to the test's own workers
    previous = app.conf.get("task_default_queue") or "celery"
    app.conf.update(task_default_queue=procs.queue)
    try:
        yield procs
    finally:
        app.conf.update(task_default_queue=previous)
        procs.stop_all()


@pytest.fixture(autouse=True)
def executor_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's executor directory (workers/layout.py): where the stores of a task run in
    the test's own process go, and what a runner the test starts gives its executors. Each test
    its own, as each executor has its own disk."""
    directory = tmp_path_factory.mktemp("executor")
    monkeypatch.setenv("RESCALER_LOCAL_DIR", str(directory))
    return directory
