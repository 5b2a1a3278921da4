"""Where snapshots live: a directory here, any ``pyarrow.fs`` URI (``s3://``, ``gs://``,
``hdfs://``) in production. Separate from ``STATE_DIR``, so losing the state directory (or the
machine) does not lose the snapshots.

Files are written whole: on a local directory under a temporary name and renamed, on an object
store as one object. A snapshot is complete once its manifest exists; listing ignores the rest.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

from workers.recovery.format import MANIFEST, SnapshotError, SnapshotManifest

#: snapshot ids sort in the order they were taken: s<UTC time>-e<epoch>
SNAPSHOT_ID = re.compile(r"^s\d{8}T\d{6}\d{3}Z-e\d+$")


def snapshot_id(taken_at: float, epoch: int) -> str:
    import datetime as dt

    when = dt.datetime.fromtimestamp(taken_at, dt.UTC)
    return f"s{when:%Y%m%dT%H%M%S}{when.microsecond // 1000:03d}Z-e{epoch}"


class RecoveryLocation:
    """One recovery location (a directory or a URI); snapshots are under ``<pipeline>/<id>``."""

    def __init__(self, uri: str | Path) -> None:
        text = str(uri)
        if "://" in text:
            try:
                self.fs, self.root = pafs.FileSystem.from_uri(text)
            except Exception as exc:  # pyarrow raises ArrowInvalid / OSError variants
                raise SnapshotError(
                    f"recovery location {text!r}: {exc} (RESCALER_RECOVERY_DIR takes a directory "
                    f"or a pyarrow.fs URI such as s3://bucket/prefix)"
                ) from exc
            self.local = self.fs.type_name == "local"
        else:
            self.fs, self.root = pafs.LocalFileSystem(), str(Path(text).absolute())
            self.local = True
        self.uri = text
        self.root = self.root.rstrip("/")

    def __repr__(self) -> str:
        return f"RecoveryLocation({self.uri!r})"

    def path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    # -- writing -------------------------------------------------------------------------------
    def write_bytes(self, relpath: str, data: bytes | memoryview) -> None:
        """A whole file at ``relpath`` (under the root), visible only once complete."""
        target = self.path(relpath)
        parent = target.rsplit("/", 1)[0]
        self.fs.create_dir(parent, recursive=True)
        if not self.local:
            with self.fs.open_output_stream(target) as out:
                out.write(data)
            return
        tmp = f"{parent}/.{target.rsplit('/', 1)[1]}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)

    def commit(self, manifest: SnapshotManifest) -> None:
        """Write the manifest, last: from now on the snapshot exists."""
        data = json.dumps(manifest.to_json(), indent=1, sort_keys=True).encode("utf-8")
        self.write_bytes(f"{manifest.pipeline}/{manifest.snapshot_id}/{MANIFEST}", data)

    # -- reading -------------------------------------------------------------------------------
    def read_bytes(self, relpath: str) -> bytes:
        try:
            with self.fs.open_input_file(self.path(relpath)) as fh:
                data: bytes = fh.read()
                return data
        except FileNotFoundError as exc:
            raise SnapshotError(f"{self.path(relpath)} is missing") from exc

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
    def delete(self, pipeline: str, snapshot: str) -> None:
        self.fs.delete_dir_contents(self.path(pipeline, snapshot), missing_dir_ok=True)
        self.fs.delete_dir(self.path(pipeline, snapshot))

    def prune(self, pipeline: str, keep: int) -> list[str]:
        """Keep the last ``keep`` complete snapshots; delete older ones and incomplete ones
        older than the newest complete one. Returns the ids deleted."""
        ids = self.snapshot_ids(pipeline)
        doomed = ids[: max(len(ids) - keep, 0)]
        newest = ids[-1] if ids else ""
        doomed += [i for i in self.incomplete_ids(pipeline, ids) if i < newest]
        for i in doomed:
            self.delete(pipeline, i)
        return doomed
