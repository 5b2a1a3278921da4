"""Reading state out of a pipeline's stores: every key of a fragment, or one key.

Each store is on its executor (:mod:`workers.layout`); it is found where its last epoch task
said it is (:mod:`workers.store_homes`), which a reader on that host can open. Stores are opened
read-only, so this works while the runner writes (LMDB readers never block the writer; RocksDB
is opened read-only).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from workers.hashing import SECTION_MARK, TIMER_MARK, key_range_index, stable_hash64, vnode_of
from workers.pipeline.loading import registered
from workers.pipeline.model import Fragment
from workers.pipeline.placement import PlacementStore, VnodeMapping
from workers.region import Region
from workers.state import open_store
from workers.state.base import decode_key, encode_key
from workers.store_homes import StoreHomes


class ReadoutError(Exception):
    """State cannot be read: the message says why and what to do."""


@dataclass(frozen=True)
class KeyState:
    key: str
    fragment: str
    vnode: int
    pu: int
    exists: bool
    value: Any
    mapping_version: int
    # how fresh the answer is: the last epoch the owner's store had committed when it was read
    # (None: the store holds no epoch yet, or there is none)
    as_of_epoch: int | None = None


def _placement(pipeline_dir: Path, fragment: str) -> VnodeMapping:
    placements = PlacementStore(pipeline_dir).load()
    if placements is None:
        raise ReadoutError(
            f"no pipeline state in {pipeline_dir}: start the runner first "
            f"(python -m workers run --pipeline ...) or check STATE_DIR"
        )
    if fragment not in placements:
        raise ReadoutError(
            f"fragment {fragment!r} is not in {pipeline_dir}; it has: {', '.join(sorted(placements))}"
        )
    return placements[fragment]


def _stores(pipeline_dir: Path, fragment: str) -> list[tuple[int, Path]]:
    """The fragment's stores as (PU, path), each where its last epoch task ran; one on another
    host cannot be read from here. A PU that neither runs the fragment nor owns a vnode holds
    nothing: its store is read when it is here (a copy left behind would show), and skipped
    when it went with its executor's disk."""
    placement = _placement(pipeline_dir, fragment)
    in_use = {*placement.parallel_units, *placement.mapping}
    found = []
    homes = StoreHomes(pipeline_dir)  # the record read once, for every PU
    for pu in homes.of_fragment(fragment):
        try:
            path = _store(homes, fragment, pu)
        except ReadoutError:
            if pu in in_use:
                raise
            continue
        if path is not None:
            found.append((pu, path))
    return found


def _store(homes: StoreHomes, fragment: str, pu: int) -> Path | None:
    """The PU's store, where its last epoch task ran (None: no task of it has run yet)."""
    home = homes.load().get((fragment, pu))
    if home is None:
        return None
    path = home.path(fragment, pu)
    if not path.is_dir():
        raise ReadoutError(
            f"{fragment} PU {pu}'s store is on executor {home.executor} ({home.host}), in "
            f"{path}, which is not readable here: read it on that host"
        )
    return path


def iter_state(
    state_dir: Path, pipeline: str, fragment: str, *, backend: str = "lmdb"
) -> Iterator[dict[str, Any]]:
    """Every key of the fragment: ``{"key", "vnode", "pu", "value"}``, store by store."""
    pipeline_dir = Path(state_dir) / pipeline
    frag: Fragment = registered(state_dir, pipeline).fragment(fragment)
    if isinstance(frag.operator, Region):
        yield from _iter_region(pipeline_dir, frag, frag.operator, backend)
        return
    for pu, path in _stores(pipeline_dir, fragment):
        with open_store(backend, path, readonly=True) as store:
            for store_key, value in store.scan():
                vnode, key = decode_key(store_key)
                if key.startswith(TIMER_MARK):  # a processor's timer index: shown in its key
                    continue
                yield {
                    "key": key.decode("utf-8"),
                    "vnode": vnode,
                    "pu": pu,
                    "value": frag.operator.to_json(frag.operator.decode(value)),
                }


def _iter_region(
    pipeline_dir: Path, frag: Fragment, region: Region, backend: str
) -> Iterator[dict[str, Any]]:
    """A keyed region's keys: every operator's section of a key, shown together by operator."""
    labels = region.labels
    for pu, path in _stores(pipeline_dir, frag.name):
        with open_store(backend, path, readonly=True) as store:
            for vnode in sorted(store.vnode_stats()):
                keys: dict[str, dict[str, Any]] = {}
                for store_key, value in store.scan_vnode(vnode):
                    user_key = decode_key(store_key)[1]
                    if not user_key.startswith(SECTION_MARK):
                        continue  # a timer-index entry: each key shows its own timers
                    op = region.operators[user_key[1]]
                    key = user_key[2:].decode("utf-8")
                    keys.setdefault(key, {})[labels[user_key[1]]] = op.to_json(op.decode(value))
                for key, by_operator in keys.items():
                    yield {"key": key, "vnode": vnode, "pu": pu, "value": by_operator}


def export_state(
    state_dir: Path, pipeline: str, fragment: str, out: TextIO, *, backend: str = "lmdb"
) -> int:
    """Write every key's state as JSON lines; returns the number of keys."""
    count = 0
    for row in iter_state(state_dir, pipeline, fragment, backend=backend):
        out.write(json.dumps(row, sort_keys=True) + "\n")
        count += 1
    return count


def read_key(
    state_dir: Path, pipeline: str, fragment: str, key: str, *, backend: str = "lmdb"
) -> KeyState:
    """One key's vnode, owner PU (by the current mapping, or, for a hot vnode moving key range
    by key range, by the last epoch's routing of its range) and value (None if it has none)."""
    pipeline_dir = Path(state_dir) / pipeline
    frag = registered(state_dir, pipeline).fragment(fragment)
    placement = _placement(pipeline_dir, fragment)
    vnode = vnode_of(key, placement.vnodes)
    owner = placement.mapping[vnode]
    last = PlacementStore(pipeline_dir).last_plan()
    cut = last.fragment_actions(fragment).cut.get(vnode) if last is not None else None
    if cut is not None and key_range_index(stable_hash64(key), cut.count) in cut.moved:
        owner = cut.target
    raw = None
    as_of: int | None = None
    path = _store(StoreHomes(pipeline_dir), fragment, owner)
    operator = frag.operator
    if isinstance(operator, Region):
        found: dict[str, Any] = {}
        if path is not None and path.exists():
            with open_store(backend, path, readonly=True) as store:
                as_of = _as_of(store.applied_epoch())
                for label, op, section in zip(
                    operator.labels, operator.operators, operator.sections(), strict=True
                ):
                    raw = store.get(encode_key(vnode, section + key.encode("utf-8")))
                    if raw is not None:
                        found[label] = op.to_json(op.decode(raw))
        return KeyState(
            key, fragment, vnode, owner, bool(found), found or None, placement.version, as_of
        )
    if path is not None and path.exists():
        with open_store(backend, path, readonly=True) as store:
            as_of = _as_of(store.applied_epoch())
            raw = store.get(encode_key(vnode, key.encode("utf-8")))
    value = operator.to_json(operator.decode(raw)) if raw is not None else None
    return KeyState(key, fragment, vnode, owner, raw is not None, value, placement.version, as_of)


def _as_of(applied_epoch: int) -> int | None:
    return applied_epoch if applied_epoch >= 0 else None
