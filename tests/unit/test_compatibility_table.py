"""docs/pipelines.md's compatibility table stays true: every part the compatibility suite runs
is a "same as Spark" row naming a case that uses it, and every row names a test that exists."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "pipelines.md"
TESTS = {
    "test_compatibility.py": REPO / "tests/integration/workers/test_compatibility.py",
    "test_user_pipeline.py": REPO / "tests/integration/workers/test_user_pipeline.py",
    "test_processor.py": REPO / "tests/unit/workers/test_processor.py",
    "test_pipeline_loading.py": REPO / "tests/unit/workers/test_pipeline_loading.py",
}


def table() -> list[tuple[str, str, str]]:
    text = DOC.read_text("utf-8")
    section = text.split("## Compatibility with transformWithState", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] not in ("part", "---"):
            rows.append((cells[0], cells[1], cells[2]))
    return rows


def cases() -> dict[str, tuple[str, ...]]:
    sys.path.insert(0, str(REPO / "tests" / "fixtures"))
    try:
        from tws_compat.processors import CASES
    finally:
        sys.path.remove(str(REPO / "tests" / "fixtures"))
    return {c.name: c.features for c in CASES}


def test_every_part_the_suite_runs_is_a_same_as_spark_row_naming_its_case() -> None:
    rows = {part: (status, by) for part, status, by in table()}
    found = cases()
    for name, features in found.items():
        for feature in features:
            assert feature in rows, f"case {name} runs {feature!r}, which the table lacks"
            status, _ = rows[feature]
            assert status.startswith("same as Spark"), f"{feature!r}: {status}"
    for part, (status, by) in rows.items():
        if by.startswith("compat: "):
            case = by.removeprefix("compat: ")
            assert case in found, f"{part!r} names case {case!r}, which does not exist"
            assert status.startswith("same as Spark"), f"{part!r} is compared, yet says {status}"


def test_every_row_names_a_test_that_exists() -> None:
    defined: dict[str, set[str]] = {
        name: {
            n.name
            for n in ast.walk(ast.parse(path.read_text("utf-8")))
            if isinstance(n, ast.FunctionDef)
        }
        for name, path in TESTS.items()
    }
    for part, status, by in table():
        assert status, f"{part!r} says nothing"
        if by.startswith("compat: "):
            assert (
                "test_the_processor_gives_spark_s_outputs_and_state"
                in defined["test_compatibility.py"]
            )
            continue
        file, _, test = by.partition("::")
        assert file in defined and test in defined[file], f"{part!r}: no test {by}"
