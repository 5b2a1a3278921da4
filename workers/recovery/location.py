"""Where snapshots live: a directory here, any ``pyarrow.fs`` URI (``s3://``, ``gs://``,
``hdfs://``) in production. Separate from ``STATE_DIR``, so losing the state directory (or the
machine) does not lose the snapshots.

Files are written whole (:class:`workers.storage.Location`): on a local directory under a
temporary name and renamed, on an object store as one object. A snapshot is complete once its manifest exists; listing ignores the rest.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

from workers.recovery.format import MANIFEST, SnapshotError, SnapshotManifest
from workers.storage import Location, LocationError

#: snapshot ids sort in the order they were taken: s<UTC time>-e<epoch>
SNAPSHOT_ID = re.compile(r"^s\d{8}T\d{6}\d{3}Z-e\d+$")


def snapshot_id(taken_at: float, epoch: int) -> str:
    import datetime as dt

    when = dt.datetime.fromtimestamp(taken_at, dt.UTC)
    return f"s{when:%Y%m%dT%H%M%S}{when.microsecond // 1000:03d}Z-e{epoch}"


class RecoveryLocation(Location):
    """One recovery location (a directory or a URI); snapshots are under ``<pipeline>/<id>``."""

    def __init__(self, uri: str | Path) -> None:
        try:
            super().__init__(uri)
        except LocationError as exc:
            raise SnapshotError(
                f"recovery location {str(uri)!r}: {exc.__cause__} (RESCALER_RECOVERY_DIR takes a "
                f"directory or a pyarrow.fs URI such as s3://bucket/prefix)"
            ) from exc

    def __repr__(self) -> str:
        return f"RecoveryLocation({self.uri!r})"

    # -- writing -------------------------------------------------------------------------------
    def commit(self, manifest: SnapshotManifest) -> None:
        """Write the manifest, last: from now on the snapshot exists."""
        data = json.dumps(manifest.to_json(), indent=1, sort_keys=True).encode("utf-8")
        self.write_bytes(f"{manifest.pipeline}/{manifest.snapshot_id}/{MANIFEST}", data)

    # -- reading -------------------------------------------------------------------------------
    def read_bytes(self, relpath: str) -> bytes:
        data = super().read_bytes(relpath)
        if data is None:
            raise SnapshotError(f"{self.path(relpath)} is missing")
        return data

    def _children(self, relpath: str) -> list[str]:
        selector = pafs.FileSelector(self.path(relpath), allow_not_found=True)
        return sorted(
            info.base_name
            for info in self.fs.get_file_info(selector)
            if info.type == pafs.FileType.Directory
        )

    def snapshot_ids(self, pipeline: str) -> list[str]:
        """Complete snapshots of ``pipeline``, oldest first."""
        ids = [i for i in self._children(pipeline) if SNAPSHOT_ID.match(i)]
        infos = self.fs.get_file_info([self.path(pipeline, i, MANIFEST) for i in ids])
        return [i for i, info in zip(ids, infos) if info.type == pafs.FileType.File]

    def incomplete_ids(self, pipeline: str, complete: list[str] | None = None) -> list[str]:
        """Snapshots whose writing stopped before the manifest (a crash): pruned at next write.
        ``complete``: the complete ones, when the caller has just listed them."""
        done = set(self.snapshot_ids(pipeline) if complete is None else complete)
        return [i for i in self._children(pipeline) if SNAPSHOT_ID.match(i) and i not in done]

    def manifest(self, pipeline: str, snapshot: str) -> SnapshotManifest:
        """The manifest of ``snapshot`` (an id or ``latest``)."""
        ids = self.snapshot_ids(pipeline)
        if snapshot == "latest":
            if not ids:
                raise SnapshotError(
                    f"no snapshot of pipeline {pipeline!r} in {self.uri}: take one first "
                    f"(RESCALER_SNAPSHOT_EVERY, or 'Snapshot now')"
                )
            snapshot = ids[-1]
        elif snapshot not in ids:
            known = ", ".join(ids[-5:]) or "none"
            raise SnapshotError(
                f"no complete snapshot {snapshot!r} of pipeline {pipeline!r} in {self.uri} "
                f"(the latest: {known})"
            )
        raw = self.read_bytes(f"{pipeline}/{snapshot}/{MANIFEST}")
        try:
            data: dict[str, Any] = json.loads(raw)
        except ValueError as exc:
            raise SnapshotError(f"snapshot {snapshot}: its manifest is not JSON: {exc}") from exc
        return SnapshotManifest.from_json(data)

    def previous(self, pipeline: str, snapshot: str) -> str | None:
        """The complete snapshot taken before ``snapshot`` (what to offer when it is corrupt)."""
        ids = self.snapshot_ids(pipeline)
        older = [i for i in ids if i < snapshot]
        return older[-1] if older else None

    # -- pruning -------------------------------------------------------------------------------
    def delete_snapshot(self, pipeline: str, snapshot: str) -> None:
        self.delete_dir(f"{pipeline}/{snapshot}")

    def prune(self, pipeline: str, keep: int) -> list[str]:
        """Keep the last ``keep`` complete snapshots; delete older ones and incomplete ones
        older than the newest complete one. Returns the ids deleted."""
        ids = self.snapshot_ids(pipeline)
        doomed = ids[: max(len(ids) - keep, 0)]
        newest = ids[-1] if ids else ""
        doomed += [i for i in self.incomplete_ids(pipeline, ids) if i < newest]
        for i in doomed:
            self.delete_snapshot(pipeline, i)
        return doomed
