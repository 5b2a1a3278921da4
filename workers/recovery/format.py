"""The snapshot format: segment files and the manifest that makes a snapshot exist.

Layout under the recovery location (``<root>/<pipeline>/<snapshot id>/``)::

    manifest.json                          written last: a snapshot without one does not exist
    <fragment>/part-<p>/pu-<pu>.arrow      one sorted segment per (fragment, partition, source PU)

A recovery partition ``p`` of a fragment holds the vnodes ``v`` with ``v % P == p``; ``P`` is fixed
when the pipeline's state is created, independent of PUs and vnode counts. Each source PU writes
the part of every partition it owns as one Arrow IPC file of (store key, value), in key order; as
a vnode lives on one PU, the segments of a partition hold disjoint vnodes. The manifest records,
per segment, its file's checksum and, per vnode, the row range, key count and item checksum that
the restoring store verifies when it ingests the vnode.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from workers.pipeline.placement import VnodeMapping

FORMAT_VERSION = 1
MANIFEST = "manifest.json"


class SnapshotError(Exception):
    """A snapshot cannot be taken, found or read; the message says what to do."""


class SnapshotCorrupt(SnapshotError):
    """A snapshot's file differs from what its manifest recorded."""


def recovery_partition(vnode: int, partitions: int) -> int:
    """The recovery partition of a vnode (vnodes are hash-spread, so partitions are even)."""
    return vnode % partitions


def file_checksum(data: bytes | memoryview) -> str:
    """The digest of a whole segment file, checked before a restore parses it."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def segment_path(fragment: str, partition: int, pu: int) -> str:
    """A segment's path inside its snapshot."""
    return f"{fragment}/part-{partition:03d}/pu-{pu}.arrow"


@dataclass(frozen=True)
class VnodeRun:
    """One vnode's rows in a segment: [start, start + keys), with its items' checksum."""

    start: int
    keys: int
    bytes: int
    checksum: str

    def to_json(self) -> list[Any]:
        return [self.start, self.keys, self.bytes, self.checksum]

    @classmethod
    def from_json(cls, data: list[Any]) -> VnodeRun:
        return cls(int(data[0]), int(data[1]), int(data[2]), str(data[3]))


@dataclass(frozen=True)
class Segment:
    """What one source PU wrote of one recovery partition of one fragment."""

    fragment: str
    partition: int
    pu: int
    path: str  # relative to the snapshot
    checksum: str  # of the whole file
    vnodes: dict[int, VnodeRun]

    @property
    def keys(self) -> int:
        return sum(r.keys for r in self.vnodes.values())

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.vnodes.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "fragment": self.fragment,
            "partition": self.partition,
            "pu": self.pu,
            "path": self.path,
            "checksum": self.checksum,
            "vnodes": {str(v): r.to_json() for v, r in sorted(self.vnodes.items())},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Segment:
        return cls(
            str(data["fragment"]),
            int(data["partition"]),
            int(data["pu"]),
            str(data["path"]),
            str(data["checksum"]),
            {int(v): VnodeRun.from_json(r) for v, r in data["vnodes"].items()},
        )


@dataclass(frozen=True)
class TaskRun:
    """Where one snapshot or restore task ran and what it did (the operation's record)."""

    pu: int
    executor: str
    host: str
    keys: int
    bytes: int
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {
            "pu": self.pu,
            "executor": self.executor,
            "host": self.host,
            "keys": self.keys,
            "bytes": self.bytes,
            "seconds": self.seconds,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaskRun:
        return cls(
            int(data["pu"]),
            str(data["executor"]),
            str(data["host"]),
            int(data["keys"]),
            int(data["bytes"]),
            float(data["seconds"]),
        )


@dataclass(frozen=True)
class FragmentSnapshot:
    """One fragment in a snapshot: its placement when taken, and its segments."""

    vnodes: int
    mapping_version: int
    parallel_units: tuple[int, ...]
    segments: tuple[Segment, ...]

    @classmethod
    def of(cls, placement: VnodeMapping, segments: Iterable[Segment]) -> FragmentSnapshot:
        """The fragment's placement when taken, with its own segments out of a snapshot's."""
        return cls(
            placement.vnodes,
            placement.version,
            placement.parallel_units,
            tuple(s for s in segments if s.fragment == placement.fragment),
        )

    @property
    def keys(self) -> int:
        return sum(s.keys for s in self.segments)

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.segments)

    def to_json(self) -> dict[str, Any]:
        return {
            "vnodes": self.vnodes,
            "mapping_version": self.mapping_version,
            "parallel_units": list(self.parallel_units),
            "keys": self.keys,
            "bytes": self.bytes,
            "segments": [s.to_json() for s in self.segments],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FragmentSnapshot:
        return cls(
            int(data["vnodes"]),
            int(data["mapping_version"]),
            tuple(int(p) for p in data["parallel_units"]),
            tuple(Segment.from_json(s) for s in data["segments"]),
        )


@dataclass(frozen=True)
class SnapshotManifest:
    """Everything a restore needs besides the segments: the epoch the state is at, the source's
    offsets after it (Spark's offset and commit log entries, verbatim), the watermark, and the
    pipeline's own files that go with the offsets."""

    snapshot_id: str
    pipeline: str
    epoch: int
    partitions: int
    backend: str
    taken_at: float  # epoch seconds, when the barrier copied the stores
    duration_s: float  # from the barrier to the manifest
    trigger: str  # "periodic", "rescale", "manual" or "stop-start"
    requested_by: str
    source_offset: dict[str, Any]
    checkpoint: dict[str, str]  # "metadata", "offsets", "commits": the files' text
    files: dict[str, str]  # pipeline-directory files restored as they were (watermark...)
    fragments: dict[str, FragmentSnapshot]
    tasks: tuple[TaskRun, ...] = ()
    format: int = FORMAT_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def keys(self) -> int:
        return sum(f.keys for f in self.fragments.values())

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.fragments.values())

    def summary(self) -> dict[str, Any]:
        """What a listing shows of a snapshot (no segments)."""
        return {
            "snapshot_id": self.snapshot_id,
            "pipeline": self.pipeline,
            "epoch": self.epoch,
            "taken_at": self.taken_at,
            "duration_s": self.duration_s,
            "trigger": self.trigger,
            "requested_by": self.requested_by,
            "partitions": self.partitions,
            "keys": self.keys,
            "bytes": self.bytes,
            "fragments": sorted(self.fragments),
            "executors": sorted({t.executor for t in self.tasks}),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "snapshot_id": self.snapshot_id,
            "pipeline": self.pipeline,
            "epoch": self.epoch,
            "partitions": self.partitions,
            "backend": self.backend,
            "taken_at": self.taken_at,
            "duration_s": self.duration_s,
            "trigger": self.trigger,
            "requested_by": self.requested_by,
            "source_offset": self.source_offset,
            "checkpoint": self.checkpoint,
            "files": self.files,
            "fragments": {n: f.to_json() for n, f in self.fragments.items()},
            "tasks": [t.to_json() for t in self.tasks],
            "keys": self.keys,
            "bytes": self.bytes,
            "extra": self.extra,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SnapshotManifest:
        if int(data.get("format", 0)) != FORMAT_VERSION:
            raise SnapshotError(
                f"snapshot {data.get('snapshot_id')!r} has format {data.get('format')}; this "
                f"version of Rescaler reads format {FORMAT_VERSION}"
            )
        return cls(
            snapshot_id=str(data["snapshot_id"]),
            pipeline=str(data["pipeline"]),
            epoch=int(data["epoch"]),
            partitions=int(data["partitions"]),
            backend=str(data["backend"]),
            taken_at=float(data["taken_at"]),
            duration_s=float(data["duration_s"]),
            trigger=str(data["trigger"]),
            requested_by=str(data.get("requested_by", "")),
            source_offset=dict(data.get("source_offset") or {}),
            checkpoint={str(k): str(v) for k, v in data["checkpoint"].items()},
            files={str(k): str(v) for k, v in data.get("files", {}).items()},
            fragments={n: FragmentSnapshot.from_json(f) for n, f in data["fragments"].items()},
            tasks=tuple(TaskRun.from_json(t) for t in data.get("tasks", ())),
            extra=dict(data.get("extra") or {}),
        )
