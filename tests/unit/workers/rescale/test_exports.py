"""The transfer path of a live step without Spark: an export task reads a source PU's vnodes as
columns and writes them with a columnar checksum; the target ingests them verified, all or nothing.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pyarrow as pa
import pytest

from workers.layout import pu_store
from workers.rescale import transfer
from workers.rescale.exports import ExportTask, export_pu
from workers.state import open_store
from workers.state.base import (
    COLUMNAR,
    IngestMismatch,
    StateStoreError,
    Update,
    VnodeExport,
    checksum_items,
    vnode_range,
)
from workers.storage import Location, location


def k(vnode: int, key: bytes) -> bytes:
    return vnode_range(vnode)[0] + key


def _source(root: Path, backend: str) -> dict[int, list[tuple[bytes, bytes]]]:
    """A source PU store holding vnodes 1, 2 (empty after a delete) and 7; its rows by vnode."""
    rows = {
        1: [(k(1, b"a%05d" % i), b"v" * (i % 13)) for i in range(2_000)],
        7: [(k(7, b"z%03d" % i), bytes([i % 256]) * 40) for i in range(300)],
    }
    with open_store(backend, pu_store(root, "count", 0)) as store:
        store.commit_epoch(
            0, [Update(key, None, value) for items in rows.values() for key, value in items]
        )
        store.commit_epoch(1, [Update(k(2, b"gone"), None, b"x")])
        store.commit_epoch(2, [Update(k(2, b"gone"), b"x", None)])
        store.seal([1, 2, 7])
    return {**rows, 2: []}


def _task(root: Path, backend: str, vnodes: tuple[int, ...]) -> ExportTask:
    return ExportTask(
        str(root),
        backend,
        "count",
        0,
        tuple((v, None, transfer.export_path("1", "count", v)) for v in vnodes),
    )


def _at(root: Path) -> Location:
    return location(root)


def test_exported_vnodes_ingest_into_another_store_as_they_were(
    backend: str, tmp_path: Path
) -> None:
    rows = _source(tmp_path, backend)
    task = _task(tmp_path, backend, (1, 2, 7))
    run = export_pu(task)
    assert run["fragment"] == "count" and run["pu"] == 0 and run["executor"]
    manifests = {m["vnode"]: m for m in run["manifests"].values()}
    for vnode, items in rows.items():
        manifest = manifests[vnode]
        assert manifest["keys"] == len(items)
        assert manifest["bytes"] == sum(len(a) + len(b) for a, b in items)
        assert manifest["checksum"].startswith(COLUMNAR)
    with open_store(backend, pu_store(tmp_path, "count", 1)) as target:
        target.commit_epoch(0, [Update(k(1, b"stale"), None, b"s"), Update(k(3, b"n"), None, b"n")])
        for _, _, path in task.exports:
            transfer.ingest_export(target, _at(tmp_path), path)
            # a re-run epoch ingests again: harmless
            transfer.ingest_export(target, _at(tmp_path), path)
        for vnode, items in rows.items():
            assert list(target.scan_vnode(vnode)) == items  # the stale key is replaced
        assert list(target.scan_vnode(3)) == [(k(3, b"n"), b"n")]
        stats = target.vnode_stats()
        assert {v: (s.keys, s.bytes) for v, s in stats.items() if v != 3} == {
            v: (m["keys"], m["bytes"]) for v, m in manifests.items() if m["keys"]
        }


def test_a_damaged_export_is_refused_and_the_target_keeps_what_it_had(
    backend: str, tmp_path: Path
) -> None:
    _source(tmp_path, backend)
    task = _task(tmp_path, backend, (1,))
    export_pu(task)
    path = task.exports[0][2]
    good = transfer.read_export(_at(tmp_path), path)
    values = good.values.to_pylist()
    values[17] = b"changed"
    damaged = [
        (good.keys, pa.array(values, pa.binary()), good.manifest),  # a value changed
        (good.keys[:-1], good.values[:-1], good.manifest),  # a row lost
        (good.keys, good.values, {**good.manifest, "vnode": 2}),  # another vnode's range
    ]
    with open_store(backend, pu_store(tmp_path, "count", 1)) as target:
        target.commit_epoch(0, [Update(k(1, b"mine"), None, b"m")])
        for keys, vals, manifest in damaged:
            table = pa.Table.from_arrays([keys, vals], schema=transfer.ITEMS_SCHEMA)
            _at(tmp_path).write_table(
                path, table.replace_schema_metadata({"manifest": json.dumps(manifest)})
            )
            with pytest.raises(IngestMismatch):
                transfer.ingest_export(target, _at(tmp_path), path)
            assert list(target.scan()) == [(k(1, b"mine"), b"m")]


def test_an_export_whose_store_disagrees_with_its_stats_fails_the_task(tmp_path: Path) -> None:
    """The task reads exactly the keys the vnode's stats count: a store holding more is not
    exported short (the step stays held and the export is retried)."""
    _source(tmp_path, "lmdb")
    with open_store("lmdb", pu_store(tmp_path, "count", 0)) as store:
        # a key written behind the stats' back (as a damaged store would hold)
        env = store._writable()
        with env.txn(write=True, db=env.dbs["entries"]) as txn:
            txn.put(k(1, b"zz-extra"), b"e")
    with pytest.raises(StateStoreError, match="vnode 1"):
        export_pu(_task(tmp_path, "lmdb", (1,)))


def test_an_export_of_a_store_that_is_not_the_sealed_one_fails_the_task(tmp_path: Path) -> None:
    """The source's store lost with its disk: where its PU's tasks now run there is no store,
    or an empty one a failed epoch made. Exported, either would move no key, verified; the task
    fails instead, and the export is retried once the store is rebuilt."""
    with pytest.raises(StateStoreError, match=r"no store at .* lost with its disk"):
        export_pu(_task(tmp_path, "lmdb", (1,)))
    with open_store("lmdb", pu_store(tmp_path, "count", 0)):
        pass  # made again, empty
    sealed_at_3 = dataclasses.replace(_task(tmp_path, "lmdb", (1,)), applied=2)
    with pytest.raises(StateStoreError, match="applied epoch -1, but the sealed vnodes were final"):
        export_pu(sealed_at_3)
    _source(tmp_path / "whole", "lmdb")  # the store the step sealed: at epoch 2
    export_pu(dataclasses.replace(sealed_at_3, pipeline_dir=str(tmp_path / "whole")))


def test_an_export_written_by_an_earlier_release_still_ingests(
    backend: str, tmp_path: Path
) -> None:
    """An operation in flight across an upgrade: its exports carry an item checksum."""
    items = [(k(5, b"k%02d" % i), b"%d" % i) for i in range(40)]
    path = "vnode-00005.arrow"
    manifest = {"vnode": 5, "keys": 40, "bytes": 0, "checksum": checksum_items(items)}
    keys, values = (pa.array([r[i] for r in items], pa.binary()) for i in (0, 1))
    table = pa.Table.from_arrays([keys, values], schema=transfer.ITEMS_SCHEMA)
    _at(tmp_path).write_table(
        path, table.replace_schema_metadata({"manifest": json.dumps(manifest)})
    )
    with open_store(backend, tmp_path / "target") as target:
        transfer.ingest_export(target, _at(tmp_path), path)
        assert list(target.scan_vnode(5)) == items
        bad = VnodeExport(5, items, 40, "0" * 32)
        with pytest.raises(IngestMismatch):
            target.ingest(bad)
