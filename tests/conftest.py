"""Settings every test under tests/ shares."""

import os
from collections.abc import Iterator
from pathlib import Path

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
