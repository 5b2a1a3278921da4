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
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from workers.state.base import VnodeExport

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
def export_path(op_dir: Path, fragment: str, vnode: int) -> Path:
    return Path(op_dir) / "exports" / fragment / f"vnode-{vnode:05d}.arrow"


def write_export(path: Path, export: VnodeExport) -> dict[str, Any]:
    """Write an export and its manifest; returns the manifest (vnode, keys, bytes, checksum)."""
    table = export_table(export)
    write_table(path, table)
    manifest: dict[str, Any] = json.loads(table.schema.metadata[b"manifest"])
    return manifest


def export_table(export: VnodeExport) -> pa.Table:
    """The export as written: its items as two binary columns, the manifest in the metadata.
    The byte count comes from Arrow, not a Python loop over the items (an export of a few hundred
    thousand keys spent most of its write there)."""
    keys = pa.array([k for k, _ in export.items], pa.binary())
    values = pa.array([v for _, v in export.items], pa.binary())
    size = sum(pc.sum(pc.binary_length(a)).as_py() or 0 for a in (keys, values))
    manifest = {
        "vnode": export.vnode,
        "keys": export.keys,
        "bytes": size,
        "checksum": export.checksum,
    }
    table = pa.Table.from_arrays([keys, values], schema=ITEMS_SCHEMA)
    return table.replace_schema_metadata({"manifest": json.dumps(manifest)})


def export_reads_back(path: Path, table: pa.Table) -> bool:
    """Whether the export file holds exactly ``table`` (items and manifest), compared in Arrow:
    what the target will read is what the source exported."""
    written = _read_table(path)
    return bool(written.equals(table, check_metadata=True))


def read_export(path: Path) -> VnodeExport:
    """The export as written, with the count and checksum its writer declared (not recomputed:
    the ingesting store verifies them against the items)."""
    table = _read_table(path)
    manifest = json.loads(table.schema.metadata[b"manifest"])
    items = list(zip(table.column("key").to_pylist(), table.column("value").to_pylist()))
    return VnodeExport(manifest["vnode"], items, manifest["keys"], manifest["checksum"])


# -- hold queues (records of held vnodes, in arrival order) ---------------------------------------
def hold_path(root: Path, fragment: str, pu: int, epoch: int) -> Path:
    return Path(root) / "holdq" / fragment / f"pu-{pu}" / f"epoch-{epoch:010d}.arrow"


def write_hold(path: Path, rows: pa.Table) -> None:
    write_table(path, rows)


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
