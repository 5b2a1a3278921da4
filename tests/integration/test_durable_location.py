"""The durable location on a directory and on a real S3 API (moto's server): a live step's
export is written by the source PU's task and ingested by the target's, verified, through the
location alone; hold queues are written, read back and cleaned up there; the state directory
holds none of it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from tests.integration.s3service import S3Service, s3_service  # noqa: F401 (a fixture)
from workers.layout import pu_store
from workers.recovery.format import SnapshotError
from workers.recovery.location import RecoveryLocation, snapshot_id
from workers.rescale import transfer
from workers.rescale.exports import ExportTask, export_pu
from workers.state import open_store
from workers.state.base import IngestMismatch, Update, vnode_range
from workers.storage import Location, LocationError, location

pytestmark = pytest.mark.integration


@pytest.fixture(params=["directory", "s3"])
def durable(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Location]:
    if request.param == "directory":
        yield location(tmp_path / "durable" / "pipe")
        return
    s3: S3Service = request.getfixturevalue("s3_service")
    yield location(s3.uri(s3.bucket(), "prefix/pipe"))


def k(vnode: int, key: bytes) -> bytes:
    return vnode_range(vnode)[0] + key


def test_files_are_whole_listed_and_removed(durable: Location) -> None:
    table = pa.table({"vnode": pa.array([1, 2, 2], pa.int64()), "x": ["a", "b", "c"]})
    assert durable.read_table("rescale/holdq/f/pu-1/epoch-0000000003.arrow") is None
    size = durable.write_table("rescale/holdq/f/pu-1/epoch-0000000003.arrow", table)
    assert size > 0
    durable.write_table("rescale/holdq/f/pu-2/epoch-0000000004.arrow", table)
    durable.write_table("rescale/op-9/exports/f/vnode-00001.arrow", table)
    assert durable.read_table("rescale/holdq/f/pu-1/epoch-0000000003.arrow") == table
    assert durable.files("rescale/holdq") == [
        "rescale/holdq/f/pu-1/epoch-0000000003.arrow",
        "rescale/holdq/f/pu-2/epoch-0000000004.arrow",
    ]
    durable.delete("rescale/holdq/f/pu-1/epoch-0000000003.arrow")
    durable.delete("rescale/holdq/f/pu-1/epoch-0000000003.arrow")  # twice: no error
    durable.delete_dir("rescale/op-9/exports")
    durable.delete_dir("rescale/op-9/exports")
    assert durable.files("rescale") == ["rescale/holdq/f/pu-2/epoch-0000000004.arrow"]
    assert durable.files("nothing/here") == []


def test_an_export_crosses_through_the_location_verified(durable: Location, tmp_path: Path) -> None:
    """The source PU's export task writes to the location; the target reads it from there, not
    from any path it shares with the source; a damaged copy is refused whole."""
    source_root, target_root = tmp_path / "host-a", tmp_path / "host-b"
    rows = [(k(3, b"key%04d" % i), b"v%d" % i) for i in range(500)]
    with open_store("lmdb", pu_store(source_root, "count", 0)) as store:
        store.commit_epoch(0, [Update(key, None, value) for key, value in rows])
        store.seal([3])
    out = transfer.export_path("op-1", "count", 3)
    task = ExportTask(str(source_root), "lmdb", "count", 0, ((3, None, out),), durable.uri)
    run = export_pu(task)
    assert run["manifests"][out]["keys"] == 500
    assert durable.files("rescale") == [out]
    with open_store("lmdb", pu_store(target_root, "count", 1)) as target:
        transfer.ingest_export(target, durable, out)
        assert list(target.scan_vnode(3)) == rows
        good = durable.read_table(out)
        assert good is not None
        durable.write_table(out, good.slice(0, 499))  # a row lost on the way
        with pytest.raises(IngestMismatch):
            transfer.ingest_export(target, durable, out)
        assert list(target.scan_vnode(3)) == rows
    assert not (source_root / "rescale").exists() and not (target_root / "rescale").exists()


def test_hold_queues_read_back_by_vnode_in_order(durable: Location) -> None:
    first = pa.table({"vnode": pa.array([5, 6, 5], pa.int64()), "seq": [1, 2, 3]})
    later = pa.table({"vnode": pa.array([6, 5], pa.int64()), "seq": [4, 5]})
    paths = [transfer.hold_path("count", 2, e) for e in (7, 8, 9)]  # epoch 8 held nothing
    transfer.write_hold(durable, paths[0], first)
    transfer.write_hold(durable, paths[2], later)
    held = transfer.read_hold(durable, paths, {5})
    assert held is not None and held.column("seq").to_pylist() == [1, 3, 5]
    assert transfer.read_hold(durable, paths[1:2], {5}) is None
    assert [transfer.hold_epoch(p) for p in paths] == [7, 8, 9]


def test_a_location_inside_another_is_the_same_files(durable: Location) -> None:
    """A stop-start stages its snapshot in a location under the durable location."""
    inner = location(durable.uri_of("rescale/op-3/snapshot"))
    table = pa.table({"x": [1, 2]})
    inner.write_table("pipe/s1/manifest.arrow", table)
    assert durable.files("rescale") == ["rescale/op-3/snapshot/pipe/s1/manifest.arrow"]
    durable.delete_dir("rescale/op-3/snapshot")
    assert inner.files("") == []


def test_a_whole_path_recorded_by_an_earlier_release_names_the_same_file(tmp_path: Path) -> None:
    """Plans recorded before the durable location named their files by whole paths under the
    pipeline's directory, the default location: a rebuild re-running one finds them."""
    root = location(tmp_path / "pipe")
    root.write_table("rescale/holdq/f/pu-1/epoch-0000000003.arrow", pa.table({"x": [1]}))
    recorded = str(tmp_path / "pipe" / "rescale/holdq/f/pu-1/epoch-0000000003.arrow")
    assert root.read_table(recorded) == pa.table({"x": [1]})


def test_a_location_that_cannot_be_opened_says_what_to_give() -> None:
    with pytest.raises(LocationError, match=r"pyarrow\.fs URI"):
        Location("nosuchscheme://bucket/prefix")


def test_a_recovery_location_lists_and_prunes_snapshots_on_it(durable: Location) -> None:
    """Snapshots use the same files (RESCALER_RECOVERY_DIR may be an s3:// URI): complete ones
    are those with a manifest, listed oldest first; pruning keeps the newest."""
    snapshots = RecoveryLocation(durable.uri_of("recovery"))
    ids = [snapshot_id(1_800_000_000 + i, i) for i in range(3)]
    for sid in ids:
        snapshots.write_bytes(f"p/{sid}/counts/part-000/pu-0.arrow", b"segment")
        snapshots.write_bytes(f"p/{sid}/manifest.json", b"{}")
    half = snapshot_id(1_800_000_010, 9)
    snapshots.write_bytes(f"p/{half}/counts/part-000/pu-0.arrow", b"no manifest yet")
    assert snapshots.snapshot_ids("p") == ids
    assert snapshots.incomplete_ids("p") == [half]
    assert snapshots.read_bytes(f"p/{ids[0]}/counts/part-000/pu-0.arrow") == b"segment"
    with pytest.raises(SnapshotError, match="is missing"):
        snapshots.read_bytes("p/nothing")
    assert snapshots.prune("p", keep=1) == ids[:2]
    assert snapshots.snapshot_ids("p") == ids[2:]
