"""The layering, as a contract the suite checks (issue 23, "The cycle broken").

- ``workers/`` is the data plane that Spark runs: it imports no Django, DRF, Channels or Celery,
  and nothing of the control plane (``rescaler``, ``dashboard``).
- The Django apps (every package with an ``apps.py`` under ``rescaler/`` and ``dashboard/``)
  import each other in no circle, so each one can be read, tested and changed from the bottom up.
- Nor do the modules inside them (issue 48: ``rescaler.operations`` had drive -> requests ->
  tasks -> drive), nor the modules of ``workers/`` (issue 48: ``workers.state`` and its backends,
  ``workers.sinks.base`` and every sink): a module is read from the modules it imports. A
  package's ``__init__`` that re-exports its submodules is no circle with them (``from pkg import
  sub`` imports ``pkg.sub``); a submodule importing a name its package's ``__init__`` defines is
  an edge to the package.
- Inside ``workers/``, lower layers never import upper ones: the stores (``workers.state``)
  nothing of rescales, the epoch task or the runner; sources and sinks nothing of the epoch
  task, its job or the runner (``DATA_PLANE_LAYERS``).

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

import pytest

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


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources(package: str, root: Path = ROOT) -> Iterator[Path]:
    yield from sorted((root / package).rglob("*.py"))


def imports_of(path: Path) -> Iterator[Import]:
    """Every import in one file, absolute, with its line; relative imports resolved."""
    rel = str(path.relative_to(ROOT))
    yield from parse_imports(path.read_text(), _module_name(path), path.name == "__init__.py", rel)


def parse_imports(text: str, module: str, is_package: bool, rel: str) -> Iterator[Import]:
    base = _relative_base(module, is_package)
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


def _relative_base(module: str, is_package: bool) -> list[str]:
    """The package a relative import of ``module`` starts from."""
    return module.split(".") if is_package else module.split(".")[:-1]


def parse_module_imports(
    text: str, module: str, is_package: bool, rel: str, known: frozenset[str]
) -> Iterator[Import]:
    """The modules of ``known`` that one file imports, each with its line, wherever the import
    is written: ``import a.b`` imports the module ``a.b``; ``from p import n`` imports ``p.n``
    when that is a module, else ``p`` (a name ``p`` defines). A name below a module
    (``a.b.f``) is its module's; a target outside ``known`` (a library) is left out."""
    base = _relative_base(module, is_package)

    def known_module(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    for node in ast.walk(ast.parse(text, filename=rel)):
        targets: list[str | None] = []
        if isinstance(node, ast.Import):
            targets = [known_module(alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[: len(base) - (node.level - 1)]
                source = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            targets = [
                f"{source}.{alias.name}"
                if f"{source}.{alias.name}" in known
                else known_module(source)
                for alias in node.names
            ]
        for target in dict.fromkeys(targets):
            if target is not None and target != module:
                yield Import(module, rel, node.lineno, target)


def module_graph(
    packages: tuple[str, ...] = CONTROL_PLANE, root: Path = ROOT
) -> dict[str, dict[str, list[Import]]]:
    """module -> module it imports -> the imports that make the edge, over every module of
    ``packages`` (under ``root``)."""
    files = {
        _module_name(path, root): path for package in packages for path in _sources(package, root)
    }
    known = frozenset(files)
    graph: dict[str, dict[str, list[Import]]] = {module: {} for module in files}
    for module, path in files.items():
        rel = str(path.relative_to(root))
        text = path.read_text()
        for imp in parse_module_imports(text, module, path.name == "__init__.py", rel, known):
            graph[module].setdefault(imp.target, []).append(imp)
    return graph


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


def circle_text(graph: dict[str, dict[str, list[Import]]], cycle: list[str]) -> str:
    """A circle, and each import that makes each of its edges."""
    lines = [" -> ".join(cycle)]
    for a, b in itertools.pairwise(cycle):
        lines.append(f"{a} -> {b}:")
        lines.extend(f"    {imp}" for imp in graph[a][b])
    return "\n".join(lines)


def assert_no_circle(graph: dict[str, dict[str, list[Import]]], what: str) -> None:
    """Fail naming one circle of ``graph`` and every import that makes it, if it has one."""
    cycle = find_cycle(graph)
    if cycle is not None:
        raise AssertionError(f"{what} import each other in a circle:\n{circle_text(graph, cycle)}")


def test_the_apps_import_each_other_in_no_circle() -> None:
    assert_no_circle(app_graph(), "the apps")


def test_the_modules_import_each_other_in_no_circle() -> None:
    assert_no_circle(module_graph(), "modules of rescaler/ and dashboard/")


def test_the_data_plane_modules_import_each_other_in_no_circle() -> None:
    assert_no_circle(module_graph((DATA_PLANE,)), "modules of workers/")


#: the data plane's own layers: (the packages below, what they must never import). A store
#: knows nothing of rescales or of the runner; a source or a sink nothing of the epoch task.
DATA_PLANE_LAYERS = (
    (("workers.state",), ("workers.rescale", "workers.runner", "workers.epoch", "workers.job")),
    (("workers.sources", "workers.sinks"), ("workers.epoch", "workers.runner", "workers.job")),
)


def _under(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def layer_breaches(graph: dict[str, dict[str, list[Import]]]) -> list[str]:
    """Each import of ``graph`` that crosses a data-plane layer the wrong way, as path:line."""
    return [
        f"{imp.path}:{imp.line}: {imp.module} imports {imp.target}"
        for lower, forbidden in DATA_PLANE_LAYERS
        for module, edges in graph.items()
        if _under(module, lower)
        for target, imports in edges.items()
        if _under(target, forbidden)
        for imp in imports
    ]


def test_the_data_plane_layers_import_only_downwards() -> None:
    breaches = layer_breaches(module_graph((DATA_PLANE,)))
    assert not breaches, "a lower layer of workers/ imports an upper one:\n" + "\n".join(breaches)


def test_a_store_importing_the_runner_is_a_breach(tmp_path: Path) -> None:
    state = tmp_path / "workers" / "state"
    state.mkdir(parents=True)
    (tmp_path / "workers" / "__init__.py").write_text("")
    (state / "__init__.py").write_text("")
    (tmp_path / "workers" / "runner.py").write_text("")
    (state / "store.py").write_text("def f():\n    from workers.runner import x\n")
    breaches = layer_breaches(module_graph((DATA_PLANE,), tmp_path))
    assert breaches == ["workers/state/store.py:2: workers.state.store imports workers.runner"]


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


def _plant(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_planted_circle_is_found_with_the_import_inside_a_function(tmp_path: Path) -> None:
    root = _plant(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/drive.py": "from pkg.cancel import cancel\n",
            "pkg/cancel.py": "def cancel():\n    from . import tasks\n",
            "pkg/tasks.py": "import pkg.drive\nimport json\n",
        },
    )
    graph = module_graph(("pkg",), root)
    cycle = find_cycle(graph)
    assert cycle == ["pkg.cancel", "pkg.tasks", "pkg.drive", "pkg.cancel"]
    text = circle_text(graph, cycle)
    assert "pkg/cancel.py:2 pkg.cancel imports pkg.tasks" in text
    assert "pkg/drive.py:1 pkg.drive imports pkg.cancel" in text
    with pytest.raises(AssertionError, match=r"pkg\.cancel -> pkg\.tasks -> pkg\.drive"):
        assert_no_circle(graph, "modules")


def test_a_facade_package_and_a_chain_are_no_circle(tmp_path: Path) -> None:
    """A package's __init__ re-exporting its submodules, which import each other by the
    package's name (``from pkg import sub``) in a chain: no circle."""
    root = _plant(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.reports import record\nfrom pkg.tasks import release\n",
            "pkg/reports.py": "from pkg import tasks\nfrom pkg.tasks import release\n",
            "pkg/tasks.py": "from pkg import machines\n",
            "pkg/machines.py": "import os\n",
        },
    )
    graph = module_graph(("pkg",), root)
    assert graph["pkg.reports"] == {"pkg.tasks": graph["pkg.reports"]["pkg.tasks"]}
    assert set(graph["pkg"]) == {"pkg.reports", "pkg.tasks"}
    assert find_cycle(graph) is None
    # a submodule that imports a name the __init__ defines does close a circle with it
    (root / "pkg/machines.py").write_text("from pkg import record\n")
    assert find_cycle(module_graph(("pkg",), root)) is not None
