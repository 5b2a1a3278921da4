"""Where the files that outlive a task go: a directory on this machine, or any ``pyarrow.fs``
URI (``s3://bucket/prefix``, ``gs://…``, ``hdfs://…``) that every executor and the driver reach
over the network.

A :class:`Location` is a root and the filesystem behind it; files are named by paths relative
to the root (``rescale/holdq/count/pu-2/epoch-0000000012.arrow``), so the same name means the
same file on every process, whatever the root. Files are written whole: on a local directory
under a temporary name, fsynced and renamed into place; on an object store as one object (a put
is atomic there). A reader sees a whole file or none, and writing the same file twice (a re-run)
is harmless.

S3-compatible stores take their settings in the URI's query, as ``pyarrow.fs`` reads them:
``s3://bucket/prefix?endpoint_override=http://127.0.0.1:9000&scheme=http``; credentials come from
the usual AWS variables (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``) of each process.
"""

from __future__ import annotations

import os
import threading
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs

#: filesystems whose directories are only key prefixes: a file needs no parent made first
OBJECT_STORES = frozenset({"s3", "gcs"})


class LocationError(Exception):
    """A location that cannot be opened, with what to set instead."""


class Location:
    """One root (a directory or a URI) and its filesystem."""

    def __init__(self, root: str | Path) -> None:
        text = str(root)
        if "://" in text:
            try:
                self.fs, path = pafs.FileSystem.from_uri(text)
            except Exception as exc:  # pyarrow raises ArrowInvalid / OSError variants
                raise LocationError(
                    f"location {text!r}: {exc} (give a directory or a pyarrow.fs URI such as "
                    f"s3://bucket/prefix?endpoint_override=http://host:9000&scheme=http)"
                ) from exc
            self.local = self.fs.type_name == "local"
        else:
            self.fs, path = pafs.LocalFileSystem(), str(Path(text).absolute())
            self.local = True
        self.uri = text
        self.root = path.rstrip("/")

    def __repr__(self) -> str:
        return f"Location({self.uri!r})"

    def path(self, *parts: str) -> str:
        """The filesystem's path of the relative path ``parts`` (joined by ``/``). A whole path
        already under a local root is taken as it is: the plans an earlier release recorded
        (``replay/<epoch>.json``, re-run by a rebuild) name their hold queues and exports so."""
        if len(parts) == 1 and self.local and parts[0].startswith(f"{self.root}/"):
            return parts[0]
        return "/".join([self.root, *(p.strip("/") for p in parts)])

    def uri_of(self, relpath: str) -> str:
        """The root of another location, ``relpath`` under this one (a URI keeps its query:
        the endpoint and the settings)."""
        base, mark, query = self.uri.partition("?")
        if "://" not in base:
            base = self.root
        return f"{base.rstrip('/')}/{relpath.strip('/')}{mark}{query}"

    # -- writing -------------------------------------------------------------------------------
    def write_table(self, relpath: str, table: pa.Table) -> int:
        """``table`` as one Arrow IPC file at ``relpath``, visible only once whole; returns its
        size in bytes."""
        if not self.local:
            sink = pa.BufferOutputStream()
            with pa.ipc.new_file(sink, table.schema) as writer:
                writer.write_table(table)
            data = sink.getvalue()
            self.write_bytes(relpath, data)
            return int(data.size)
        target, tmp = self._staged(relpath)
        with pa.OSFile(tmp, "wb") as fh, pa.ipc.new_file(fh, table.schema) as writer:
            writer.write_table(table)
        return self._publish(tmp, target)

    def write_bytes(self, relpath: str, data: bytes | memoryview | pa.Buffer) -> None:
        """A whole file at ``relpath``, visible only once complete."""
        if not self.local:
            target = self.path(relpath)
            if self.fs.type_name not in OBJECT_STORES:  # an object store has no directories
                self.fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
            with self.fs.open_output_stream(target) as out:
                out.write(data)
            return
        target, tmp = self._staged(relpath)
        with open(tmp, "wb") as fh:
            fh.write(data)
        self._publish(tmp, target)

    def _staged(self, relpath: str) -> tuple[str, str]:
        """(the file's path, a temporary name beside it, hidden from :meth:`files`)."""
        target = self.path(relpath)
        parent, name = target.rsplit("/", 1)
        self.fs.create_dir(parent, recursive=True)
        return target, f"{parent}/.{name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"

    @staticmethod
    def _publish(tmp: str, target: str) -> int:
        """Flush the written temporary file to disk and rename it into place; its size."""
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, target)
        return os.stat(target).st_size

    # -- reading -------------------------------------------------------------------------------
    def read_bytes(self, relpath: str) -> bytes | None:
        """The file at ``relpath``, or None when there is none."""
        try:
            with self.fs.open_input_file(self.path(relpath)) as fh:
                data: bytes = fh.read()
                return data
        except FileNotFoundError:
            return None

    def read_table(self, relpath: str) -> pa.Table | None:
        """The Arrow IPC file at ``relpath``, or None when there is none."""
        target = self.path(relpath)
        try:
            if self.local:
                with pa.memory_map(target) as source:
                    return pa.ipc.open_file(source).read_all()
            with self.fs.open_input_file(target) as source:
                return pa.ipc.open_file(source).read_all()
        except FileNotFoundError:
            return None

    def exists(self, relpath: str) -> bool:
        info = self.fs.get_file_info(self.path(relpath))
        return bool(info.type == pafs.FileType.File)

    def files(self, relpath: str) -> list[str]:
        """The files under ``relpath``, recursively, as paths relative to the root, sorted."""
        selector = pafs.FileSelector(self.path(relpath), allow_not_found=True, recursive=True)
        prefix = len(self.root) + 1
        return sorted(
            info.path[prefix:]
            for info in self.fs.get_file_info(selector)
            if info.type == pafs.FileType.File and not info.base_name.startswith(".")
        )

    # -- removing ------------------------------------------------------------------------------
    def delete(self, relpath: str) -> None:
        """Remove one file (an absent one is no error)."""
        try:
            self.fs.delete_file(self.path(relpath))
        except FileNotFoundError:
            pass

    def delete_empty_dir(self, relpath: str) -> None:
        """Remove the directory ``relpath`` if nothing is left in it (an object store has no
        directories to remove)."""
        if self.local:
            try:
                os.rmdir(self.path(relpath))
            except OSError:  # not empty, or gone
                pass

    def delete_dir(self, relpath: str) -> None:
        """Remove everything under ``relpath`` (an absent directory is no error)."""
        target = self.path(relpath)
        self.fs.delete_dir_contents(target, missing_dir_ok=True)
        if self.fs.get_file_info(target).type == pafs.FileType.Directory:
            self.fs.delete_dir(target)


_OPENED: dict[str, Location] = {}
_LOCK = threading.Lock()


def location(root: str | Path) -> Location:
    """The :class:`Location` of ``root``, opened once per process (an object store's client is
    made once, then reused by every task a Python worker runs)."""
    key = str(root)
    with _LOCK:
        found = _OPENED.get(key)
        if found is None:
            found = _OPENED[key] = Location(key)
        return found
