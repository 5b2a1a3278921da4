"""The layering, as a contract the suite checks (issue 23, "The cycle broken").

- ``workers/`` is the data plane that Spark runs: it imports no Django, DRF, Channels or Celery,
  and nothing of the control plane (``rescaler``, ``dashboard``).
- The Django apps (every package with an ``apps.py`` under ``rescaler/`` and ``dashboard/``)
  import each other in no circle, so each one can be read, tested and changed from the bottom up.

Every ``import`` counts, wherever it is written: at module level, inside a function (an import
moved into a function to dodge a cycle is still a dependency) or under ``TYPE_CHECKING``. A
failure names each import that makes the breach, as ``path:line``.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONTROL_PLANE = ("rescaler", "dashboard")
DATA_PLANE = "workers"
# what the data plane must never import (top-level package names)
DATA_PLANE_FORBIDDEN = frozenset(
    {"django", "rest_framework", "channels", "celery", "rescaler", "dashboard"}
)


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, dotted
    path: str  # its file, relative to the repository root
    line: int
    target: str  # the imported module, dotted (``from a import b`` gives a and a.b)

    def __str__(self) -> str:
        return f"{self.path}:{self.line} {self.module} imports {self.target}"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources(package: str) -> Iterator[Path]:
    yield from sorted((ROOT / package).rglob("*.py"))


def imports_of(path: Path) -> Iterator[Import]:
    """Every import in one file, absolute, with its line; relative imports resolved."""
    rel = str(path.relative_to(ROOT))
    yield from parse_imports(path.read_text(), _module_name(path), path.name == "__init__.py", rel)


def parse_imports(text: str, module: str, is_package: bool, rel: str) -> Iterator[Import]:
    # the package a relative import starts from
    base = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(ast.parse(text, filename=rel)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, rel, node.lineno, alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[: len(base) - (node.level - 1)]
                source = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            yield Import(module, rel, node.lineno, source)
            for alias in node.names:
                if alias.name != "*":
                    yield Import(module, rel, node.lineno, f"{source}.{alias.name}")


def app_packages() -> list[str]:
    """The Django apps: every package with an ``apps.py`` under the control plane's roots."""
    return sorted(
        _module_name(apps.parent)
        for root in CONTROL_PLANE
        for apps in (ROOT / root).rglob("apps.py")
        if (apps.parent / "__init__.py").exists()
    )


def app_of(module: str, apps: list[str]) -> str | None:
    """The app a module belongs to (the longest app package containing it), or None."""
    owners = [a for a in apps if module == a or module.startswith(a + ".")]
    return max(owners, key=len) if owners else None


def app_graph() -> dict[str, dict[str, list[Import]]]:
    """app -> app it imports -> the imports that make the edge."""
    apps = app_packages()
    graph: dict[str, dict[str, list[Import]]] = {app: {} for app in apps}
    for root in CONTROL_PLANE:
        for path in _sources(root):
            for imp in imports_of(path):
                source, target = app_of(imp.module, apps), app_of(imp.target, apps)
                if source and target and source != target:
                    edge = graph[source].setdefault(target, [])
                    if not any(e.path == imp.path and e.line == imp.line for e in edge):
                        edge.append(imp)
    return graph


def find_cycle(graph: dict[str, dict[str, list[Import]]]) -> list[str] | None:
    """One circle of apps, as [a, b, ..., a], or None (depth-first search, white/grey/black)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, {})):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_data_plane_imports_no_django_and_no_control_plane() -> None:
    breaches = [
        str(imp)
        for path in _sources(DATA_PLANE)
        for imp in imports_of(path)
        if imp.target.split(".")[0] in DATA_PLANE_FORBIDDEN
    ]
    assert not breaches, "workers/ must not import these:\n" + "\n".join(sorted(set(breaches)))


def test_the_apps_import_each_other_in_no_circle() -> None:
    graph = app_graph()
    cycle = find_cycle(graph)
    if cycle is None:
        return
    lines = [" -> ".join(cycle)]
    for a, b in itertools.pairwise(cycle):
        lines.append(f"{a} -> {b}:")
        lines.extend(f"    {imp}" for imp in graph[a][b])
    raise AssertionError("the apps import each other in a circle:\n" + "\n".join(lines))


# --- the checker checks itself -------------------------------------------------------------------


def test_the_apps_are_found() -> None:
    assert {
        "rescaler.audit",
        "rescaler.cluster",
        "rescaler.operations",
        "rescaler.runner",
        "dashboard",
    } <= set(app_packages())


def test_imports_inside_functions_and_relative_imports_count() -> None:
    text = (
        "from . import models\n"
        "from ..operations.requests import operation_request\n"
        "def later():\n"
        "    import dashboard.views\n"
    )
    probe = parse_imports(text, "rescaler.cluster.probe", False, "rescaler/cluster/probe.py")
    found = {(i.line, i.target) for i in probe}
    assert (1, "rescaler.cluster.models") in found
    assert (2, "rescaler.operations.requests") in found
    assert (4, "dashboard.views") in found


def test_a_cycle_is_found_and_a_chain_is_not() -> None:
    imp = Import("a", "a.py", 1, "b")
    assert find_cycle({"a": {"b": [imp]}, "b": {"c": [imp]}, "c": {}}) is None
    assert find_cycle({"a": {"b": [imp]}, "b": {"c": [imp]}, "c": {"a": [imp]}}) == [
        "a",
        "b",
        "c",
        "a",
    ]
