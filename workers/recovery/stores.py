"""Whether each PU's store is whole, checked when the runner opens the state directory.

A store that is missing, will not open, does not match the checksum taken when the runner last
stopped, or is not at the epoch Spark committed last, is **lost**: without this check it would
be opened empty (or stale) and the job would go on counting from nothing. A lost store is
rebuilt from the newest snapshot and the epochs after it (:mod:`workers.recovery.rebuild`).

The checksum: when the runner stops cleanly, one task per PU hashes the files of its stores
(BLAKE2b-128, the lock files aside) into ``store-sums/<fragment>/pu-<n>.json``. The next start
compares them before it opens the store (a store that changed while no runner had it open, a bad
copy or a disk error, is caught even where the engine has no page checksums: LMDB), then removes
them: from then on the store changes at every epoch. After a crash there are no sums, and the
check is the engine's own (it opens, its pages read) and the applied-epoch marker.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from workers.layout import local_root, refuse_away_from_home, store_path
from workers.state import open_store

#: files a store's engine rewrites on open, left out of the checksum
_UNSUMMED = ("lock.mdb", "LOCK")
_UNSUMMED_PREFIXES = ("LOG", ".")

OK = "ok"
MISSING = "missing"
CORRUPT = "corrupt"
BEHIND = "behind"


def sums_path(root: Path, fragment: str, pu: int) -> Path:
    """Where a store's checksums wait for the next start, under the executor's ``root``
    (:func:`workers.layout.local_root`; outside ``stores/``, which holds nothing but stores)."""
    return Path(root) / "store-sums" / fragment / f"pu-{pu}.json"


def store_sums(path: Path) -> dict[str, str]:
    """Each file of the store directory and its digest (streamed: a store may be large)."""
    sums: dict[str, str] = {}
    for file in sorted(path.rglob("*")):
        name = file.relative_to(path).as_posix()
        if not file.is_file() or file.name in _UNSUMMED or file.name.startswith(_UNSUMMED_PREFIXES):
            continue
        digest = hashlib.blake2b(digest_size=16)
        with open(file, "rb") as fh:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
        sums[name] = digest.hexdigest()
    return sums


@dataclass(frozen=True)
class StoreState:
    """One (fragment, PU) store as the check found it."""

    fragment: str
    pu: int
    status: str  # ok, missing, corrupt or behind
    detail: str = ""
    applied_epoch: int | None = None

    @property
    def lost(self) -> bool:
        return self.status != OK

    def describe(self) -> str:
        return f"{self.fragment} PU {self.pu}: {self.status}" + (
            f" ({self.detail})" if self.detail else ""
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StoreState:
        return cls(**data)


@dataclass(frozen=True)
class CheckTask:
    """One PU's stores to check against the epoch Spark committed last."""

    state_root: str
    backend: str
    pu: int
    fragments: tuple[str, ...]
    committed: int  # every store must be at this epoch, or the one after (not yet committed)
    home: str = ""  # the id of the PU's home executor, where its stores are


def check_pu(task: CheckTask, here: str = "") -> list[StoreState]:
    """On executor ``here``: the PU's stores, each whole or lost (a task away from the PU's
    home, where the stores are not, refuses rather than call them lost)."""
    return [_check(task, fragment, here) for fragment in task.fragments]


def _check(task: CheckTask, fragment: str, here: str) -> StoreState:
    root = local_root(task.state_root)
    path = store_path(root, fragment, task.pu)
    refuse_away_from_home(task.home, here, path, f"the check of {fragment} PU {task.pu}")
    sums_file = sums_path(root, fragment, task.pu)
    if not path.is_dir() or not any(path.iterdir()):
        return StoreState(fragment, task.pu, MISSING, f"{path} is gone")
    if sums_file.exists():
        recorded = json.loads(sums_file.read_text("utf-8"))["files"]
        found = store_sums(path)
        changed = sorted(
            name for name in set(recorded) | set(found) if recorded.get(name) != found.get(name)
        )
        if changed:
            return StoreState(
                fragment,
                task.pu,
                CORRUPT,
                f"{', '.join(changed)} in {path} differ from the checksums taken when the runner "
                f"stopped",
            )
    try:
        with open_store(task.backend, path, readonly=True) as store:
            applied = store.applied_epoch()
            store.vnode_stats()  # the engine reads its pages: a torn file fails here
    except Exception as exc:  # whatever the engine raises on a broken file
        return StoreState(fragment, task.pu, CORRUPT, f"{path} does not open: {exc}")
    if applied < task.committed or applied > task.committed + 1:
        return StoreState(
            fragment,
            task.pu,
            BEHIND,
            f"it is at epoch {applied}, Spark committed epoch {task.committed}",
            applied,
        )
    sums_file.unlink(missing_ok=True)  # whole: it changes from the next epoch on
    return StoreState(fragment, task.pu, OK, "", applied)


@dataclass(frozen=True)
class SealTask:
    """One PU's stores to checksum when the runner stops cleanly."""

    state_root: str
    backend: str
    pu: int
    fragments: tuple[str, ...]


def seal_pu(task: SealTask) -> int:
    """Write each store's checksums beside it; returns how many stores were sealed."""
    sealed = 0
    root = local_root(task.state_root)
    for fragment in task.fragments:
        path = store_path(root, fragment, task.pu)
        if not path.is_dir():
            continue
        target = sums_path(root, fragment, task.pu)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_text(json.dumps({"files": store_sums(path)}), "utf-8")
        os.replace(tmp, target)
        sealed += 1
    return sealed
