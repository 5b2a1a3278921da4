"""The backend-neutral commit: an epoch's updates reduced to what a backend writes, the seal
checks a commit makes, and the side data both backends encode the same way (the applied-epoch
marker, the outputs' keys)."""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from workers.columnar import binary_parts
from workers.hashing import key_range_of
from workers.state.base import ColumnUpdates, Update
from workers.state.errors import VnodeSealed
from workers.state.key_ranges import decode_range_seals
from workers.state.keys import VNODE_PREFIX

# Encodings shared by both backends, so that a store's side data reads the same everywhere.
APPLIED_EPOCH_KEY = b"applied_epoch"
EPOCH = struct.Struct(">q")  # the applied-epoch marker (-1 is representable)
OUTPUT_KEY = struct.Struct(">Q")  # outputs are keyed by epoch; big-endian so they sort by epoch


def outputs_kept_from(epoch: int, outputs_from: int | None) -> int:
    """The oldest epoch whose outputs a store keeps once ``epoch`` is committed: the epoch before
    it (a re-run of either re-emits them), or ``outputs_from`` when older (the epochs a rebuild
    would re-run since the newest snapshot, workers/recovery/rebuild.py)."""
    keep = max(epoch - 1, 0)
    return keep if outputs_from is None else max(min(keep, outputs_from), 0)


def fsync_enabled() -> bool:
    """Whether commits are flushed to disk (RESCALER_STATE_FSYNC, default on).

    Off, a commit still survives the death of the process (it is in the OS page cache), which is
    the failure the protocol must survive; only a crash of the host can lose the last commits.
    """
    return os.environ.get("RESCALER_STATE_FSYNC", "1").strip().lower() not in ("0", "false", "no")


@dataclass
class CommitPlan:
    """An epoch's updates reduced to what a backend writes: one final operation per key."""

    puts: list[tuple[bytes, bytes]] = field(default_factory=list)
    deletes: list[bytes] = field(default_factory=list)
    stats_delta: dict[int, tuple[int, int]] = field(default_factory=dict)  # vnode -> (keys, bytes)

    @property
    def vnodes(self) -> set[int]:
        return set(self.stats_delta)


def plan_commit(updates: Iterable[Update], *, ordered: bool = True) -> CommitPlan:
    """Collapse updates (last one per key wins) and sum their effect on per-vnode stats.

    Stats trust ``Update.old``: the operator read it from this store in the same task, and reading
    every key again here would double the epoch's reads. A key updated twice in one epoch counts
    correctly as long as each update's ``old`` is the previous one's ``new``.

    ``ordered`` sorts puts and deletes by key: a B-tree (LMDB) then touches each page once, in
    order; an LSM memtable (RocksDB) gains nothing from it.
    """
    final: dict[bytes, bytes | None] = {}
    delta: dict[bytes, list[int]] = {}  # keyed by the 2-byte prefix: cheaper than an int here
    for update in updates:
        key = update.key
        prefix = key[:2]
        d = delta.get(prefix)
        if d is None:
            if len(prefix) < VNODE_PREFIX.size:
                raise ValueError(f"store key {key!r} lacks its 2-byte vnode prefix")
            d = delta[prefix] = [0, 0]
        old, new = update.old, update.new
        if old is not None:
            d[0] -= 1
            d[1] -= len(key) + len(old)
        if new is not None:
            d[0] += 1
            d[1] += len(key) + len(new)
        final[key] = new
    keys = sorted(final) if ordered else final
    puts = [(k, v) for k in keys if (v := final[k]) is not None]
    deletes = [k for k in keys if final[k] is None]
    stats_delta = {VNODE_PREFIX.unpack(p)[0]: (d[0], d[1]) for p, d in delta.items()}
    return CommitPlan(puts, deletes, stats_delta)


def plan_columns(updates: ColumnUpdates, *, ordered: bool = True) -> CommitPlan:
    """:func:`plan_commit` for columns, computed on arrays: no Python step per key.

    Keys must be distinct (a task reads and writes each key once), so there is nothing to
    collapse; stats trust ``old`` exactly as :func:`plan_commit` trusts ``Update.old``.
    """
    keys, old, new = updates.keys, updates.old, updates.new
    n = len(keys)
    if len(old) != n or len(new) != n:
        raise ValueError(
            f"update columns differ in length: {n} keys, {len(old)} old, {len(new)} new"
        )
    if n == 0:
        return CommitPlan()
    if keys.null_count:
        raise ValueError("a store key is null")
    offsets, data = binary_parts(keys)
    key_len = np.diff(offsets)
    if int(key_len.min()) < VNODE_PREFIX.size:
        raise ValueError("a store key lacks its 2-byte vnode prefix")
    if pc.count_distinct(keys).as_py() != n:
        raise ValueError("a store key repeats in one epoch's update columns")
    starts = offsets[:-1]
    vnodes = data[starts].astype(np.int64) * 256 + data[starts + 1]
    old_in = np.asarray(old.is_valid(), bool)
    new_in = np.asarray(new.is_valid(), bool)
    old_len = np.diff(binary_parts(old)[0])
    new_len = np.diff(binary_parts(new)[0])
    deltas = pa.table(
        {
            "vnode": vnodes,
            "keys": new_in.astype(np.int64) - old_in,
            "bytes": np.where(new_in, key_len + new_len, 0)
            - np.where(old_in, key_len + old_len, 0),
        }
    )
    per_vnode = deltas.group_by("vnode", use_threads=False).aggregate(
        [("keys", "sum"), ("bytes", "sum")]
    )
    stats_delta = {
        v: (k, b)
        for v, k, b in zip(
            per_vnode["vnode"].to_pylist(),
            per_vnode["keys_sum"].to_pylist(),
            per_vnode["bytes_sum"].to_pylist(),
            strict=True,
        )
    }
    if ordered:
        order = pc.sort_indices(keys)
        keys, new = keys.take(order), new.take(order)
        new_in = np.asarray(new.is_valid(), bool)
    put_rows = pa.array(np.flatnonzero(new_in))
    puts = list(zip(keys.take(put_rows).to_pylist(), new.take(put_rows).to_pylist(), strict=True))
    deletes = keys.take(pa.array(np.flatnonzero(~new_in))).to_pylist()
    return CommitPlan(puts, deletes, stats_delta)


def refuse_sealed(
    epoch: int,
    plan: CommitPlan,
    sealed: Iterable[int],
    range_seals: bytes | None,
    where: object,
) -> None:
    """Raise VnodeSealed when a commit's plan writes a sealed vnode (``sealed``: those of its
    vnodes the backend found sealed) or a key in a sealed key range (``range_seals``: the record
    of them, one point read per commit). Only a vnode the record names has its written keys'
    ranges computed, so a commit touching no cut vnode pays nothing per key."""
    touched = sorted(sealed)
    if touched:
        raise VnodeSealed(f"epoch {epoch} writes sealed vnodes {touched} of {where}")
    if range_seals is None:
        return
    cut = {
        VNODE_PREFIX.pack(vnode): ranges
        for vnode, ranges in decode_range_seals(range_seals).items()
        if vnode in plan.stats_delta
    }
    if not cut:
        return
    hit: set[tuple[int, str]] = set()
    for key in [k for k, _ in plan.puts] + plan.deletes:
        ranges = cut.get(key[: VNODE_PREFIX.size])
        for r in ranges or ():
            if key_range_of(key[VNODE_PREFIX.size :], r.count) == r.index:
                hit.add((VNODE_PREFIX.unpack_from(key)[0], str(r)))
    if hit:
        ranges_hit = ", ".join(f"vnode {v} range {r}" for v, r in sorted(hit))
        raise VnodeSealed(f"epoch {epoch} writes sealed key ranges ({ranges_hit}) of {where}")


def check_epoch(epoch: int) -> None:
    if epoch < 0:
        raise ValueError(f"epoch {epoch} is negative")
