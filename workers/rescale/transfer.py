"""Files that carry state and records between PUs: vnode exports and hold queues (recovery
partitions are :mod:`workers.recovery`).

Every file is written under a temporary name, fsynced and renamed into place, so a reader sees a
whole file or none, and writing the same file twice (a re-run) is harmless. They live under the
pipeline's state directory, which all executors share (a volume in production).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from workers.hashing import KeyRange
from workers.state.base import (
    COLUMNAR,
    IngestMismatch,
    StateStore,
    VnodeExport,
    columnar_checksum,
)

ITEMS_SCHEMA = pa.schema([("key", pa.binary()), ("value", pa.binary())])


def write_table(path: Path, table: pa.Table) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with pa.OSFile(str(tmp), "wb") as fh, pa.ipc.new_file(fh, table.schema) as writer:
        writer.write_table(table)
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _read_table(path: Path) -> pa.Table:
    with pa.memory_map(str(path)) as source:
        return pa.ipc.open_file(source).read_all()


# -- vnode exports (Collect → Acquire) -------------------------------------------------------
def export_path(op_dir: Path, fragment: str, vnode: int, key_range: KeyRange | None = None) -> Path:
    name = f"vnode-{vnode:05d}"
    if key_range is not None:
        name += f"-range-{key_range.index}-of-{key_range.count}"
    return Path(op_dir) / "exports" / fragment / f"{name}.arrow"


def write_export(
    path: Path,
    vnode: int,
    keys: pa.Array,
    values: pa.Array,
    key_range: KeyRange | None = None,
) -> dict[str, Any]:
    """Write a sealed vnode's rows, or a sealed key range's (in key order, as two columns), as
    its export, and return the manifest (vnode, key range if any, keys, bytes, checksum) kept in
    the file's metadata.

    The checksum is a :func:`~workers.state.base.columnar_checksum`, computed on the buffers;
    the written file is read back (memory-mapped) and checked against it before the manifest is
    returned, so a step is only marked exported once what the target will read is intact. No step
    per key runs in Python on either side.
    """
    checksum = columnar_checksum(keys, values)
    size = sum(pc.sum(pc.binary_length(a)).as_py() or 0 for a in (keys, values))
    manifest: dict[str, Any] = {
        "vnode": vnode,
        "keys": len(keys),
        "bytes": int(size),
        "checksum": checksum,
    }
    if key_range is not None:
        manifest["key_range"] = key_range.to_json()
    table = pa.Table.from_arrays([keys, values], schema=ITEMS_SCHEMA)
    write_table(path, table.replace_schema_metadata({"manifest": json.dumps(manifest)}))
    written = read_export(path)
    found = columnar_checksum(written.keys, written.values)
    if written.manifest != manifest or found != checksum:
        raise IngestMismatch(f"export of vnode {vnode} does not read back intact ({path})")
    return manifest


@dataclass(frozen=True)
class ExportFile:
    """An export as written: its rows as columns and the manifest its writer declared (not
    recomputed: the ingesting store verifies the rows against it)."""

    manifest: dict[str, Any]
    keys: pa.Array
    values: pa.Array

    @property
    def vnode(self) -> int:
        return int(self.manifest["vnode"])

    @property
    def checksum(self) -> str:
        return str(self.manifest["checksum"])

    @property
    def key_range(self) -> KeyRange | None:
        raw = self.manifest.get("key_range")
        return None if raw is None else KeyRange.from_json(raw)


def read_export(path: Path) -> ExportFile:
    table = _read_table(Path(path))
    manifest = json.loads(table.schema.metadata[b"manifest"])
    keys, values = (table.column(c).combine_chunks() for c in ("key", "value"))
    return ExportFile(manifest, keys, values)


def ingest_export(store: StateStore, path: Path) -> None:
    """Verify an export (keys in the vnode's range and in order, count, checksum) and ingest it,
    replacing what the vnode held: all or nothing (IngestMismatch changes nothing). An export of
    an earlier release (an item checksum, not a columnar one) is verified item by item."""
    export = read_export(path)
    if len(export.keys) != int(export.manifest["keys"]):
        raise IngestMismatch(
            f"export of vnode {export.vnode} holds {len(export.keys)} keys, its manifest says "
            f"{export.manifest['keys']} ({path})"
        )
    if export.key_range is not None:  # one key range of the vnode: the others stay as they are
        store.ingest_key_range(
            export.vnode, export.key_range, export.keys, export.values, export.checksum
        )
        return
    if export.checksum.startswith(COLUMNAR):
        store.ingest_columns(export.vnode, export.keys, export.values, export.checksum)
        return
    items = list(zip(export.keys.to_pylist(), export.values.to_pylist(), strict=True))
    store.ingest(VnodeExport(export.vnode, items, int(export.manifest["keys"]), export.checksum))


# -- hold queues (records of held vnodes, in arrival order) ---------------------------------------
def hold_path(root: Path, fragment: str, pu: int, epoch: int) -> Path:
    return Path(root) / "holdq" / fragment / f"pu-{pu}" / f"epoch-{epoch:010d}.arrow"


def write_hold(path: Path, rows: pa.Table) -> int:
    """Write one epoch's held rows for one target PU; returns the file's size in bytes."""
    write_table(path, rows)
    return path.stat().st_size


def read_hold(paths: Iterable[Path], vnodes: set[int]) -> pa.Table | None:
    """Held rows of the given vnodes from the given files (missing file: that epoch held none)."""
    tables = []
    for path in paths:
        if not Path(path).exists():
            continue
        table = _read_table(Path(path))
        mask = pc.is_in(
            table.column("vnode"),
            value_set=pa.array(sorted(vnodes), table.schema.field("vnode").type),
        )
        tables.append(table.filter(mask))
    if not tables:
        return None
    return pa.concat_tables(tables, promote_options="default")
