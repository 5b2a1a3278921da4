"""Files that carry state and records between PUs: vnode exports and hold queues (recovery
partitions are :mod:`workers.recovery`).

They live in the pipeline's **durable location** (:class:`workers.storage.Location`): by default
the pipeline's state directory, or any ``pyarrow.fs`` URI (``RESCALER_DURABLE_LOCATION``), so
that a vnode's state and its held records cross from one executor to another over the network
rather than through a path both share. Files are named relative to that location and written
whole (a reader sees a whole file or none; writing one twice, a re-run, is harmless).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
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
from workers.storage import Location

ITEMS_SCHEMA = pa.schema([("key", pa.binary()), ("value", pa.binary())])
#: where a pipeline's transfer files are, under its durable location
RESCALE = "rescale"


def operation_prefix(operation_id: str) -> str:
    """An operation's files (its exports) under the durable location."""
    return f"{RESCALE}/op-{operation_id}"


# -- vnode exports (Collect → Acquire) -------------------------------------------------------
def export_path(
    operation_id: str, fragment: str, vnode: int, key_range: KeyRange | None = None
) -> str:
    """A vnode's (or a key range's) export, relative to the durable location."""
    name = f"vnode-{vnode:05d}"
    if key_range is not None:
        name += f"-range-{key_range.index}-of-{key_range.count}"
    return f"{operation_prefix(operation_id)}/exports/{fragment}/{name}.arrow"


def write_export(
    at: Location,
    path: str,
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
    at.write_table(path, table.replace_schema_metadata({"manifest": json.dumps(manifest)}))
    written = read_export(at, path)
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


def read_export(at: Location, path: str) -> ExportFile:
    table = at.read_table(path)
    if table is None:
        raise IngestMismatch(f"export {at.path(path)} is missing")
    manifest = json.loads(table.schema.metadata[b"manifest"])
    keys, values = (table.column(c).combine_chunks() for c in ("key", "value"))
    return ExportFile(manifest, keys, values)


def ingest_export(store: StateStore, at: Location, path: str) -> None:
    """Verify an export (keys in the vnode's range and in order, count, checksum) and ingest it,
    replacing what the vnode held: all or nothing (IngestMismatch changes nothing). An export of
    an earlier release (an item checksum, not a columnar one) is verified item by item."""
    export = read_export(at, path)
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
def hold_path(fragment: str, pu: int, epoch: int) -> str:
    """One epoch's held rows for one target PU, relative to the durable location."""
    return f"{RESCALE}/holdq/{fragment}/pu-{pu}/epoch-{epoch:010d}.arrow"


def hold_epoch(path: str) -> int:
    """The epoch of a :func:`hold_path`."""
    return int(path.rsplit("/", 1)[1].removeprefix("epoch-").removesuffix(".arrow"))


def write_hold(at: Location, path: str, rows: pa.Table) -> int:
    """Write one epoch's held rows for one target PU; returns the file's size in bytes."""
    return at.write_table(path, rows)


def read_hold(at: Location, paths: Iterable[str], vnodes: set[int]) -> pa.Table | None:
    """Held rows of the given vnodes from the given files (missing file: that epoch held none)."""
    tables = []
    for path in paths:
        table = at.read_table(path)
        if table is None:
            continue
        mask = pc.is_in(
            table.column("vnode"),
            value_set=pa.array(sorted(vnodes), table.schema.field("vnode").type),
        )
        tables.append(table.filter(mask))
    if not tables:
        return None
    return pa.concat_tables(tables, promote_options="default")
