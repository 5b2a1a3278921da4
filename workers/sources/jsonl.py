"""A directory of JSON-lines files as a replayable stream.

Files are taken in name order as they land (write them under a temporary name starting with ``.``
or ``_`` and rename them into place, so a half-written file is never read). Every file the stream
has seen is appended to a manifest, and an offset is a position in that manifest: a file that
lands later, even with a smaller name, goes to the end, and a replay reads exactly the same files.

A record's sequence number is ``file_index << 32 | line_number``: source order across files.
A malformed line (not JSON, a missing field, a wrong type) becomes a row whose ``_malformed``
column says what was wrong; the runner counts and reports those rows. Nothing is dropped silently.

A pipeline of ``source_kind="json"`` gets each line's JSON object as its text, ``value``, and
its ``prepare`` reads the fields it wants (``from_json(value, "<DDL>")``); only a line that is
not a JSON object is malformed here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa

SUFFIXES = (".jsonl", ".json", ".ndjson")
LINE_BITS = 32

# field name -> Python type each kind of stream requires; "json": any JSON object, handed to the
# pipeline's prepare as its text (``value``), which it parses with Spark's from_json
FIELDS: dict[str, dict[str, type]] = {
    "lines": {"line": str},
    "events": {"user": str, "page": str, "ts": int, "bytes": int},
    "json": {"value": str},
}
ARROW_TYPES = {str: pa.string(), int: pa.int64()}


def schema_for(kind: str) -> pa.Schema:
    fields = [("seq", pa.int64())]
    fields += [(name, ARROW_TYPES[t]) for name, t in FIELDS[kind].items()]
    return pa.schema([*fields, ("_malformed", pa.string())])


class Manifest:
    """The append-only list of files the stream has taken, in the order it took them."""

    def __init__(self, directory: Path, manifest_path: Path) -> None:
        self.directory = Path(directory)
        self.path = Path(manifest_path)

    def files(self) -> list[str]:
        if not self.path.exists():
            return []
        return [line for line in self.path.read_text("utf-8").splitlines() if line]

    def landed(self) -> list[str]:
        """The files in the directory, in the order the stream takes them: those in the
        manifest, then those that landed since (by name). Read only: the manifest is the
        stream's to append to."""
        known = self.files()
        seen = set(known)
        if not self.directory.is_dir():
            return known
        return known + sorted(
            entry.name
            for entry in os.scandir(self.directory)
            if _takes(entry) and entry.name not in seen
        )

    def refresh(self) -> list[str]:
        """Append files that landed since the last look; returns the whole manifest."""
        known = self.files()
        seen = set(known)
        if not self.directory.is_dir():
            raise FileNotFoundError(
                f"source directory {self.directory} does not exist: create it and drop "
                f"JSON-lines files into it"
            )
        new = sorted(
            entry.name
            for entry in os.scandir(self.directory)
            if _takes(entry) and entry.name not in seen
        )
        if new:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write("".join(name + "\n" for name in new))
                fh.flush()
                os.fsync(fh.fileno())
        return known + new


def _takes(entry: os.DirEntry[str]) -> bool:
    """Whether the stream takes this directory entry: a whole JSON-lines file (one being
    written has a name starting with ``.`` or ``_`` until it is renamed into place)."""
    return (
        entry.is_file() and entry.name.endswith(SUFFIXES) and not entry.name.startswith((".", "_"))
    )


class LineCounts:
    """Records (non-blank lines, as :func:`read_file` reads them) per file, each file counted
    once: a file is whole when it lands."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self._counts: dict[str, int] = {}

    def of(self, name: str) -> int:
        if name not in self._counts:
            with open(self.directory / name, "rb") as fh:
                self._counts[name] = sum(1 for line in fh if line.strip())
        return self._counts[name]


def _check(kind: str, record: Any) -> str | None:
    if not isinstance(record, dict):
        return "not a JSON object"
    if kind == "json":
        return None
    for name, typ in FIELDS[kind].items():
        if name not in record:
            return f"missing field {name!r}"
        value = record[name]
        if typ is int and (isinstance(value, bool) or not isinstance(value, int)):
            return f"field {name!r} must be an integer"
        if typ is str and not isinstance(value, str):
            return f"field {name!r} must be a string"
    return None


def parse_line(kind: str, text: str) -> tuple[dict[str, Any] | None, str | None]:
    """(record, None) for a good line, (None, reason) for a malformed one."""
    try:
        record = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"invalid JSON: {exc.msg}"
    except ValueError as exc:  # e.g. a number too large to parse
        return None, f"invalid JSON: {exc}"
    problem = _check(kind, record)
    return (None, problem) if problem else (record, None)


def read_file(kind: str, path: Path, file_index: int) -> pa.RecordBatch:
    """Every non-blank line of one file as a batch of ``schema_for(kind)``."""
    names = list(FIELDS[kind])
    columns: dict[str, list[Any]] = {name: [] for name in names}
    seqs: list[int] = []
    malformed: list[str | None] = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line_no, text in enumerate(fh):
            if not text.strip():
                continue
            record, problem = parse_line(kind, text)
            seqs.append(file_index << LINE_BITS | line_no)
            if problem:
                malformed.append(f"{path.name}:{line_no + 1}: {problem}: {text.strip()[:200]}")
                for name in names:
                    columns[name].append(None)
            else:
                malformed.append(None)
                if kind == "json":  # the record as it is, for the pipeline's prepare
                    columns["value"].append(text.strip())
                    continue
                for name in names:
                    columns[name].append(record[name])  # type: ignore[index]
    arrays = [pa.array(seqs, pa.int64())]
    arrays += [pa.array(columns[n], ARROW_TYPES[FIELDS[kind][n]]) for n in names]
    arrays.append(pa.array(malformed, pa.string()))
    return pa.RecordBatch.from_arrays(arrays, schema=schema_for(kind))
