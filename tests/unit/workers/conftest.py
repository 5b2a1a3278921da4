"""Fixtures of the data plane's unit tests: every state store test runs on each backend."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from workers.state import BACKENDS, StateStore, open_store


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store(backend: str, tmp_path: Path) -> Iterator[StateStore]:
    s = open_store(backend, tmp_path / "store")
    yield s
    s.close()
