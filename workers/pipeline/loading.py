"""Pipelines from the user's own module: ``package.module:build`` names a function returning a
:class:`~workers.pipeline.model.Pipeline`; ``wordcount`` and ``clickstream`` are the built-in
examples, defined the same way in ``workers.pipeline.builtins``.

The runner records the reference beside the pipeline's state (``pipeline.json``), so every
other reader of that state (the key finder, ``export-state``) loads the same definition by the
pipeline's name. Spark's executors need the module too: :func:`ship` sends its package with
``addPyFile`` unless it is installed, and :func:`check_on_executors` imports it inside a Spark
task before the first epoch, so a missing dependency stops the start with its name.
"""

from __future__ import annotations

import importlib
import json
import sys
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workers.pipeline.model import InvalidPipeline, Pipeline, UnknownPipeline
from workers.pipeline.placement import write_json_atomic
from workers.spark_tasks import run_tasks

if TYPE_CHECKING:
    from workers.config import RunnerConfig
    from workers.sinks.base import Sink

REGISTRY_FILE = "pipeline.json"
BUILTIN_MODULE = "workers.pipeline.builtins"


def builtin_names() -> list[str]:
    from workers.pipeline.builtins import BUILTINS

    return sorted(BUILTINS)


def normalise(ref: str) -> str:
    """A built-in's name stands for its function in ``workers.pipeline.builtins``."""
    ref = ref.strip()
    if ref in builtin_names():
        return f"{BUILTIN_MODULE}:{ref}"
    return ref


def load_pipeline(ref: str, vnodes: int | None = None) -> Pipeline:
    """Import ``module:function``, call it, check the result; every failure says what to do."""
    full = normalise(ref)
    module_name, sep, attr = full.partition(":")
    if not sep or not module_name or not attr.isidentifier():
        raise UnknownPipeline(
            f"pipeline {ref!r}: give a built-in ({', '.join(builtin_names())}) or "
            f"package.module:function, a function returning a workers.pipeline.Pipeline"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UnknownPipeline(
            f"pipeline {ref!r}: cannot import {module_name!r} ({exc}); install it, or run from "
            f"the directory holding it (or add that directory to PYTHONPATH)"
        ) from exc
    build = getattr(module, attr, None)
    if not callable(build):
        found = sorted(n for n in dir(module) if not n.startswith("_"))[:12]
        raise UnknownPipeline(
            f"pipeline {ref!r}: {module_name} has no function {attr!r} (it has: {', '.join(found)})"
        )
    try:
        pipeline = build()
    except ValueError as exc:  # an operator refusing its arguments (UnsupportedProcessor, ...)
        raise InvalidPipeline(f"pipeline {ref!r}: {exc}") from exc
    if not isinstance(pipeline, Pipeline):
        raise InvalidPipeline(
            f"pipeline {ref!r}: {attr}() returned {type(pipeline).__name__}, not a "
            f"workers.pipeline.Pipeline"
        )
    if vnodes is not None:
        pipeline = pipeline.with_vnodes(vnodes)
    pipeline.validate()
    return pipeline


def module_of(ref: str) -> str:
    return normalise(ref).partition(":")[0]


def record(pipeline_dir: Path, ref: str, pipeline: Pipeline) -> None:
    """Remember which definition runs in this state directory."""
    write_json_atomic(
        Path(pipeline_dir) / REGISTRY_FILE,
        {"ref": normalise(ref), "name": pipeline.name, "vnodes": pipeline.fragments[0].vnodes},
    )


def registered(state_dir: Path, name: str) -> Pipeline:
    """The pipeline named ``name`` under ``state_dir``, as its runner loaded it."""
    path = Path(state_dir) / name / REGISTRY_FILE
    if path.exists():
        data = json.loads(path.read_text("utf-8"))
        return load_pipeline(data["ref"], data.get("vnodes"))
    if name in builtin_names():  # state written before pipelines were registered
        return load_pipeline(name)
    raise UnknownPipeline(
        f"no pipeline {name!r} under {state_dir}: start its runner first "
        f"(python manage.py run_pipeline --pipeline package.module:build)"
    )


def _installed(path: Path) -> bool:
    return any(part in ("site-packages", "dist-packages") for part in path.parts)


def ship(spark: Any, ref: str, work_dir: Path) -> Path | None:
    """Send the pipeline's top-level package (or module file) to the executors with
    ``addPyFile``, unless it is installed or part of Rescaler. Returns what was shipped."""
    module_name = module_of(ref)
    top = module_name.split(".")[0]
    if top == "workers":
        return None  # Rescaler itself: the executors run it from the same installation
    module = sys.modules.get(top) or importlib.import_module(top)
    origin = Path(getattr(module, "__file__", "") or "")
    namespace = list(getattr(module, "__path__", []))  # a package without __init__.py
    if not origin.name and namespace:
        origin = Path(namespace[0]) / "__init__.py"
    if not origin.name or _installed(origin):
        return None
    work_dir.mkdir(parents=True, exist_ok=True)
    if origin.name == "__init__.py":
        package_dir = origin.parent
        target = work_dir / f"{top}.zip"
        tmp = target.with_suffix(".zip.tmp")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
            for file in sorted(package_dir.rglob("*.py")):
                zf.write(file, Path(top) / file.relative_to(package_dir))
        tmp.replace(target)
    else:
        target = origin
    spark.sparkContext.addPyFile(str(target))
    return target


def _import_in_task(modules: tuple[str, ...]) -> str:
    """Import each module in this Python worker; the first failure, said, or ""."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:
            return f"{name}: {type(exc).__name__}: {exc}"
    return ""


def check_on_executors(spark: Any, ref: str, *, warm: tuple[str, ...] = ()) -> None:
    """Import the pipeline's module inside Spark tasks, one per task slot; raise InvalidPipeline
    if it fails.

    The tasks are SQL tasks (``mapInArrow``, like the epochs'), so the Python workers they start
    are the ones Spark keeps idle for the SQL tasks after them: having imported the pipeline and
    ``warm`` (the epoch task's modules), the first epoch's tasks find them ready instead of
    starting and importing their own (Spark reuses idle workers, ``spark.python.worker.reuse``).
    """
    module_name = module_of(ref)
    slots = max(int(spark.sparkContext.defaultParallelism), 1)
    modules = (module_name, *warm)
    errors = run_tasks(
        spark, [modules] * slots, _import_in_task, f"rescaler import check ({slots} tasks)"
    )
    failed = next((e for e in errors if e), "")
    if failed.startswith(f"{module_name}: "):
        raise InvalidPipeline(
            f"pipeline module {module_name!r} does not import inside a Spark task "
            f"({failed.removeprefix(module_name + ': ')}): install it and its dependencies on "
            f"every executor, or keep it in a package Rescaler can ship (a directory with "
            f"__init__.py)"
        )
    if failed:
        raise InvalidPipeline(
            f"a module the epoch tasks need does not import inside a Spark task ({failed}): "
            f"install Rescaler's requirements on every executor (requirements.lock)"
        )


def resolve_sink(config: RunnerConfig, pipeline: Pipeline) -> Sink:
    """Where the last fragment's outputs go: ``--sink`` (RESCALER_SINK), else the pipeline's
    own sink, else, for a built-in demo pipeline only, the Arrow debugging files."""
    from workers.sinks.factory import sink_from_uri
    from workers.sinks.files import FileSink

    sink = sink_from_uri(config.sink) if config.sink else pipeline.sink
    if sink is not None:  # the files sink: in the durable location (the state directory)
        return sink.bound(config.durable)
    if normalise(config.ref).startswith(f"{BUILTIN_MODULE}:"):
        return FileSink(config.durable)
    raise InvalidPipeline(
        f"pipeline {pipeline.name!r} names no sink: give Pipeline(sink=...) a sink "
        f"(workers.sinks.sink_from_uri('postgres://...?table=...'), FunctionSink(fn), ...) or run "
        f"with --sink URI (RESCALER_SINK); --sink files keeps Arrow files in the state directory "
        f"for debugging (docs/sources-and-sinks.md)"
    )
