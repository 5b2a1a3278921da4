"""State stores: ``open_store``, the backends' names and limits, and the package's public names.

The modules: ``base`` (the interface), below it ``keys`` (the key layout, the tables, a vnode's
stats), ``errors``, ``columns`` (binary columns as buffers), ``exports`` (a vnode's export and
its verification) and ``key_ranges`` (an atomic write and the key-range steps in it), ``commit``
(the backend-neutral commit logic) and the backends, ``lmdb_store`` (on ``lmdb_env``) and
``rocksdb_store`` (on ``rocksdb_db``), which import those and never this package. The backends
are imported lazily so that a process using one never loads the other's native library.
"""

from __future__ import annotations

from pathlib import Path

from workers.state.base import ColumnUpdates, StateStore, Update
from workers.state.columns import binary_array
from workers.state.commit import (
    CommitPlan,
    fsync_enabled,
    outputs_kept_from,
    plan_columns,
    plan_commit,
    refuse_sealed,
)
from workers.state.errors import IngestMismatch, StateStoreError, VnodeSealed
from workers.state.exports import VnodeExport, checksum_items, verify_export
from workers.state.key_ranges import StoreWrite, forget_range_seals
from workers.state.keys import (
    ENTRIES,
    MAX_VNODES,
    RANGE_SEALS_KEY,
    SEALED,
    STATS,
    STATS_TABLE,
    VNODE_PREFIX,
    VnodeStats,
    apply_stats_delta,
    check_vnodes,
    decode_key,
    encode_key,
    vnode_range,
)

__all__ = [
    "BACKENDS",
    "DEFAULT_BACKEND",
    "ENTRIES",
    "MAX_STORE_KEY_BYTES",
    "MAX_VNODES",
    "RANGE_SEALS_KEY",
    "SEALED",
    "STATS",
    "STATS_TABLE",
    "VNODE_PREFIX",
    "ColumnUpdates",
    "CommitPlan",
    "IngestMismatch",
    "StateStore",
    "StateStoreError",
    "StoreWrite",
    "Update",
    "VnodeExport",
    "VnodeSealed",
    "VnodeStats",
    "apply_stats_delta",
    "binary_array",
    "check_vnodes",
    "checksum_items",
    "decode_key",
    "encode_key",
    "forget_range_seals",
    "fsync_enabled",
    "max_user_key_bytes",
    "open_store",
    "outputs_kept_from",
    "plan_columns",
    "plan_commit",
    "refuse_sealed",
    "verify_export",
    "vnode_range",
]

BACKENDS: tuple[str, ...] = ("lmdb", "rocksdb")
# Chosen by bench/state_store.py; see docs/state-stores.md for the numbers.
DEFAULT_BACKEND = "lmdb"
# The longest store key each backend accepts: LMDB's compiled-in MDB_MAXKEYSIZE (what
# ``lmdb.Environment.max_key_size()`` answers; longer keys fail the commit); RocksDB has no limit.
MAX_STORE_KEY_BYTES: dict[str, int | None] = {"lmdb": 511, "rocksdb": None}


def open_store(backend: str, path: Path, *, readonly: bool = False) -> StateStore:
    """Open (creating it unless ``readonly``) the store of ``backend`` in directory ``path``."""
    if backend == "lmdb":
        from workers.state.lmdb_store import LmdbStore

        return LmdbStore(path, readonly=readonly)
    if backend == "rocksdb":
        from workers.state.rocksdb_store import RocksStore

        return RocksStore(path, readonly=readonly)
    raise ValueError(f"unknown state store backend {backend!r}; expected one of {BACKENDS}")


def max_user_key_bytes(backend: str) -> int | None:
    """The longest user key a store of ``backend`` can hold (its store key is the vnode prefix
    and the user key), so a reader can refuse a longer one without opening a store; None when
    the backend sets no limit."""
    limit = MAX_STORE_KEY_BYTES.get(backend)
    return None if limit is None else limit - VNODE_PREFIX.size
