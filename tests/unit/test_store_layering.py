"""Only a task on the PU's home executor opens a store, and only in that executor's own
directory (issue 45; workers/layout.py): checked on the code, not left to a review.

Two rules over every module of ``workers/``:

1. ``open_store`` is called only inside the functions that run as tasks on an executor (and
   in the reader of ``workers/readout.py``, which opens a store where its task said it is);
2. a store's path is made only from an executor's directory: every ``store_path``,
   ``staging_path`` and ``sums_path`` outside ``workers/layout.py`` and
   ``workers/store_homes.py`` takes a root assigned from ``local_root(...)`` in the same
   function, or ``local_root(...)`` itself; nothing else joins ``"stores"`` into a path.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

WORKERS = Path(__file__).resolve().parents[2] / "workers"

#: (module, function) pairs that open a store: tasks pinned to the PU's home executor
STORE_OPENERS = {
    ("workers/epoch/task.py", "run_task"),
    ("workers/rescale/exports.py", "export_pu"),
    ("workers/recovery/stores.py", "_check"),
    ("workers/recovery/tasks.py", "write_snapshot_segments"),
    ("workers/recovery/tasks.py", "restore_pu"),
    ("workers/worker_pool.py", "bootstrap_pu"),
    # the reader: a store where its last task said it is (workers/store_homes.py)
    ("workers/readout.py", "iter_state"),
    ("workers/readout.py", "_iter_region"),
    ("workers/readout.py", "read_key"),
}
PATH_MAKERS = {"store_path", "staging_path", "sums_path"}
LAYOUT = {"workers/layout.py", "workers/store_homes.py"}


def functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def modules() -> Iterator[tuple[str, ast.AST]]:
    for path in sorted(WORKERS.rglob("*.py")):
        yield path.relative_to(WORKERS.parent).as_posix(), ast.parse(path.read_text("utf-8"))


def called(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name):
            return func.id
        if isinstance(func, ast.Attribute):
            return func.attr
    return None


def from_local_root(function: ast.AST) -> set[str]:
    """Names assigned from ``local_root(...)`` in the function."""
    names = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and called(node.value) == "local_root":
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def store_openers(module: str, tree: ast.AST) -> set[tuple[str, str]]:
    """The functions of the module that call ``open_store``."""
    return {
        (module, fn.name)
        for fn in functions(tree)
        if any(called(n) == "open_store" for n in ast.walk(fn))
    }


def wrong_paths(module: str, tree: ast.AST) -> list[str]:
    """Store paths in the module not made from an executor's directory."""
    wrong = []
    for fn in functions(tree):
        roots = from_local_root(fn)
        for node in ast.walk(fn):
            name = called(node)
            if name in PATH_MAKERS:
                assert isinstance(node, ast.Call)
                root = node.args[0] if node.args else None
                if not (
                    called(root) == "local_root"
                    or (isinstance(root, ast.Name) and root.id in roots)
                ):
                    wrong.append(f"{module}:{node.lineno} {name}(…)")
            if isinstance(node, ast.Constant) and node.value == "stores":
                wrong.append(f'{module}:{node.lineno} "stores"')
    return wrong


def test_only_tasks_on_the_home_executor_open_a_store() -> None:
    openers = set().union(
        *(store_openers(m, t) for m, t in modules() if m != "workers/state/__init__.py")
    )
    assert openers <= STORE_OPENERS, (
        f"{sorted(openers - STORE_OPENERS)} open a store: only a task on the PU's home "
        f"executor may (run it with run_tasks(..., locations=homes)) and add it here"
    )


def test_a_store_path_is_made_only_from_the_executors_directory() -> None:
    wrong = [w for m, t in modules() if m not in LAYOUT for w in wrong_paths(m, t)]
    assert not wrong, f"store paths not under an executor's directory: {wrong}"


def test_the_rules_catch_the_shared_directory_layout() -> None:
    """Not vacuous: the driver opening a store under the state directory, as the shared
    layout did, breaks both rules; a task's store under ``local_root`` breaks neither."""
    shared = ast.parse(
        "def snapshot_all(pipeline_dir):\n"
        "    path = pipeline_dir / 'stores' / 'f' / 'pu-0'\n"
        "    with open_store('lmdb', store_path(pipeline_dir, 'f', 0)) as s:\n"
        "        return s, path\n"
    )
    assert store_openers("workers/x.py", shared) == {("workers/x.py", "snapshot_all")}
    assert sorted(wrong_paths("workers/x.py", shared)) == [
        'workers/x.py:2 "stores"',
        "workers/x.py:3 store_path(…)",
    ]
    local = ast.parse(
        "def task(t):\n"
        "    root = local_root(t.state_root)\n"
        "    return store_path(root, 'f', 0), staging_path(local_root(t.state_root), 's', 'f', 0)\n"
    )
    assert wrong_paths("workers/x.py", local) == []
