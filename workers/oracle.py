"""An independent computation of the expected keyed state, in plain Python.

It shares only the *input* with the pipeline (the generator's records, or the directory's files
in manifest order): no Spark, no operators, no stores, no routing. Tests compare every key of
every stateful fragment that the runner exported against what this module computes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workers.sources import jsonl
from workers.sources.generator import GeneratorConfig, generate

SESSION_GAP_S = 1800


@dataclass
class OracleResult:
    state: dict[str, dict[str, Any]]  # fragment -> key -> value as export_state shows it
    records: int = 0
    malformed: int = 0
    malformed_samples: list[str] = field(default_factory=list)


def generator_records(config: GeneratorConfig, end: int) -> Iterator[dict[str, Any]]:
    """The generator's first ``end`` records, in order, as dicts."""
    for batch in generate(config, 0, end):
        yield from batch.to_pylist()


def directory_records(kind: str, directory: Path, files: list[str]) -> Iterator[dict[str, Any]]:
    """The records of ``files`` (manifest order), with ``_malformed`` set on bad lines."""
    for index, name in enumerate(files):
        yield from jsonl.read_file(kind, Path(directory) / name, index).to_pylist()


def wordcount(records: Iterator[dict[str, Any]]) -> OracleResult:
    counts: dict[str, int] = {}
    result = OracleResult(state={"word_count": counts})
    for record in records:
        if record.get("_malformed"):
            result.malformed += 1
            result.malformed_samples.append(record["_malformed"])
            continue
        result.records += 1
        for word in record["line"].split(" "):
            if word:
                counts[word] = counts.get(word, 0) + 1
    return result


def clickstream(records: Iterator[dict[str, Any]]) -> OracleResult:
    users: dict[str, dict[str, Any]] = {}
    pages: dict[str, dict[str, int]] = {}
    result = OracleResult(state={})
    for record in sorted(records, key=lambda r: r["seq"]):
        if record.get("_malformed"):
            result.malformed += 1
            result.malformed_samples.append(record["_malformed"])
            continue
        result.records += 1
        user, page, ts = record["user"], record["page"], record["ts"]
        u = users.setdefault(
            user, {"events": 0, "bytes": 0, "sessions": 0, "last_ts": None, "seen": set()}
        )
        u["events"] += 1
        u["bytes"] += record["bytes"]
        if u["last_ts"] is None or ts - u["last_ts"] > SESSION_GAP_S:
            u["sessions"] += 1
        u["last_ts"] = ts if u["last_ts"] is None else max(u["last_ts"], ts)
        p = pages.setdefault(page, {"views": 0, "unique_users": 0})
        p["views"] += 1
        if page not in u["seen"]:
            u["seen"].add(page)
            p["unique_users"] += 1
    result.state["user_activity"] = {
        user: {
            "events": u["events"],
            "bytes": u["bytes"],
            "sessions": u["sessions"],
            "last_ts": u["last_ts"],
            "pages": len(u["seen"]),
        }
        for user, u in users.items()
    }
    result.state["page_stats"] = pages
    return result


PIPELINES = {"wordcount": ("lines", wordcount), "clickstream": ("events", clickstream)}


def expected_from_generator(pipeline: str, config: GeneratorConfig, end: int) -> OracleResult:
    kind, compute = PIPELINES[pipeline]
    if config.kind != kind:
        raise ValueError(f"{pipeline} reads {kind!r} records, the generator makes {config.kind!r}")
    return compute(generator_records(config, end))


def expected_from_directory(pipeline: str, directory: Path, files: list[str]) -> OracleResult:
    kind, compute = PIPELINES[pipeline]
    return compute(directory_records(kind, directory, files))


def compare(expected: dict[str, Any], actual: dict[str, Any], *, limit: int = 10) -> list[str]:
    """Differences between two key → value maps, as readable lines (empty when equal)."""
    problems: list[str] = []
    missing = expected.keys() - actual.keys()
    extra = actual.keys() - expected.keys()
    problems += [f"missing key {k!r}: expected {expected[k]!r}" for k in sorted(missing)[:limit]]
    problems += [f"unexpected key {k!r} = {actual[k]!r}" for k in sorted(extra)[:limit]]
    wrong = [k for k in expected.keys() & actual.keys() if expected[k] != actual[k]]
    problems += [
        f"key {k!r}: expected {expected[k]!r}, got {actual[k]!r}" for k in sorted(wrong)[:limit]
    ]
    if len(missing) + len(extra) + len(wrong) > 3 * limit:
        problems.append(
            f"... {len(missing)} missing, {len(extra)} unexpected, {len(wrong)} wrong in all"
        )
    return problems
