"""Where a PU's store lives (on its executor's own disk) and where each epoch's sink output goes.

A store is never in a directory that another process writes: each executor keeps the stores of
its PUs in its own directory (:func:`executor_dir`), and the driver, Celery and the web process
never open one (docs/elastic-workers.md, "Where state lives"). Free of the epoch task's
dependencies, so that code which only finds these files (the rescale executor, the recovery
tasks, tests) need not import :mod:`workers.epoch`.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

#: the variable naming an executor's own directory (each host or pod its own disk)
LOCAL_DIR = "RESCALER_LOCAL_DIR"


class AwayFromHome(RuntimeError):
    """Spark ran a PU's task on another executor than its home (the home was busy past Spark's
    locality wait, or is going), on a disk without the PU's store: the task refuses before it
    writes anything, and Spark runs it again. On the home's host, whose disk the executors
    share, it runs."""


def refuse_away_from_home(home: str, here: str, path: Path, what: str) -> None:
    """Raise :class:`AwayFromHome` when this task runs on executor ``here`` while its PU's home
    is ``home`` ("": none known, as in local mode) and ``path``, the PU's store, is not on this
    executor's disk: before anything is created here, where the PU's epochs would never look."""
    if home and home != here and not Path(path).is_dir():
        raise AwayFromHome(
            f"{what} ran on executor {here}, but its store is on executor {home}, not on this "
            f"one's disk ({path}): Spark runs it again (raise spark.locality.wait if this repeats)"
        )


class NoExecutorDir(RuntimeError):
    """This process has no directory of its own for stores; the message says what to set."""


def executor_dir() -> Path:
    """This executor's own directory: ``RESCALER_LOCAL_DIR`` as the executor sees it (its host's
    or pod's environment, or the runner's ``spark.executorEnv``), else the first of Spark's local
    directories, which Spark gives each executor's Python workers as ``SPARK_LOCAL_DIRS`` (and
    deletes with the executor: its stores are then rebuilt from the durable copy)."""
    given = os.environ.get(LOCAL_DIR, "")
    if given:
        return Path(given)
    spark_dirs = [d for d in os.environ.get("SPARK_LOCAL_DIRS", "").split(",") if d]
    if spark_dirs:
        return Path(spark_dirs[0]) / "rescaler"
    raise NoExecutorDir(
        f"no directory for this executor's stores: set {LOCAL_DIR} (the runner passes its own "
        f"to every executor; on a cluster set it per host or pod, to a local disk)"
    )


def local_root(pipeline_dir: str | Path) -> Path:
    """This executor's directory of the pipeline whose (driver-side) directory is
    ``pipeline_dir``; that directory is named after the pipeline."""
    return executor_dir() / Path(pipeline_dir).name


def store_path(root: Path, fragment: str, pu: int) -> Path:
    """A PU's store of one fragment under ``root``, an executor's :func:`local_root`."""
    return Path(root) / "stores" / fragment / f"pu-{pu}"


def pu_store(pipeline_dir: str | Path, fragment: str, pu: int) -> Path:
    """On the executor running it: the PU's store of the fragment."""
    return store_path(local_root(pipeline_dir), fragment, pu)


def prepare_local_root(pipeline_dir: Path, root: Path, *, new: bool) -> None:
    """Local mode, at a start: the executor's directory of the pipeline, ``root``, holds this
    state directory's stores. A ``new`` state directory (no checkpoint yet) has none: whatever
    an earlier one of the same pipeline left there goes (its stores outlive it, unlike in the
    state directory, and would be taken for this one's). Else stores an earlier release kept in
    the state directory move there (:func:`adopt_shared_stores`)."""
    if new:
        shutil.rmtree(root, ignore_errors=True)
    else:
        adopt_shared_stores(pipeline_dir, root)


def adopt_shared_stores(pipeline_dir: Path, root: Path) -> bool:
    """Local mode, once: the stores an earlier release kept in the pipeline's directory
    (``<pipeline_dir>/stores``, and their checksums) move into the executor's ``root``, on the
    same disk. Whether they moved; stores already in ``root`` are left as they are."""
    moved = False
    for name in ("stores", "store-sums"):
        old, new = Path(pipeline_dir) / name, Path(root) / name
        if old.is_dir() and not new.exists():
            new.parent.mkdir(parents=True, exist_ok=True)
            os.replace(old, new)
            moved = True
    return moved


def sink_file(fragment: str, epoch: int, pu: int) -> str:
    """The files sink's file of one epoch's outputs of one PU, relative to its location."""
    return f"sink/{fragment}/epoch={epoch:010d}/pu={pu}.arrow"


def sink_path(state_root: Path, fragment: str, epoch: int, pu: int) -> Path:
    """That file, when the sink's location is the directory ``state_root``."""
    return Path(state_root) / sink_file(fragment, epoch, pu)
