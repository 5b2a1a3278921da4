"""The source's backlog (the autoscaler's signal), as the runner asks it on the driver after
each epoch: the directory's unread records, none for the generator, a pipeline's own function
for its own source, and unknown (never an epoch's failure) when the source cannot tell. The
JetStream source's is in tests/integration/sources/test_jetstream.py (a real server)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from workers.config import RunnerConfig
from workers.pipeline.builtins import wordcount
from workers.pipeline.model import InvalidPipeline
from workers.source_stream import SourceStreams
from workers.sources.spark import GeneratorStreamReader, JsonlStreamReader


def _lines(path: Path, n: int, blank: int = 0) -> None:
    path.write_text("".join(f'{{"line": "w{i}"}}\n' for i in range(n)) + "\n" * blank)


def test_the_directory_backlog_is_the_records_of_the_files_not_read_yet(tmp_path: Path) -> None:
    source = tmp_path / "in"
    source.mkdir()
    _lines(source / "a.jsonl", 3)
    _lines(source / "b.jsonl", 5, blank=2)  # a blank line is no record (read_file skips it)
    (source / ".c.jsonl").write_text('{"line": "half"}\n')  # being written: not taken yet
    reader = JsonlStreamReader(
        {"kind": "lines", "path": str(source), "manifest": str(tmp_path / "manifest.txt")}
    )
    assert reader.backlog({"files": 0}) == 8
    end = reader.latestOffset({"files": 0}, None)  # the stream takes both (its manifest)
    assert end == {"files": 2} and reader.backlog(end) == 0
    assert reader.backlog({"files": 1}) == 5
    (source / ".c.jsonl").rename(source / "c.jsonl")  # landed: waiting until an epoch takes it
    assert reader.backlog(end) == 1
    assert (tmp_path / "manifest.txt").read_text().split() == ["a.jsonl", "b.jsonl"]


def test_the_generator_never_has_a_backlog() -> None:
    reader = GeneratorStreamReader({"kind": "lines", "rows_per_epoch": "100", "max_rows": "1000"})
    assert reader.backlog({"offset": 200}) == 0


def _streams(tmp_path: Path, **changes: Any) -> SourceStreams:
    config = RunnerConfig(pipeline="wordcount", state_dir=tmp_path, **changes)
    return SourceStreams(None, config, wordcount(), control=None)  # type: ignore[arg-type]


def test_the_runner_asks_the_source_it_reads(tmp_path: Path) -> None:
    assert _streams(tmp_path).backlog({"offset": 10}) == 0  # the generator
    source = tmp_path / "in"
    source.mkdir()
    _lines(source / "a.jsonl", 4)
    assert _streams(tmp_path, source=f"dir:{source}").backlog({"files": 0}) == 4
    assert _streams(tmp_path).backlog({}) is None  # no offset logged for the epoch


def test_a_pipeline_source_reports_through_its_own_function_or_not_at_all(
    tmp_path: Path,
) -> None:
    config = RunnerConfig(pipeline="wordcount", state_dir=tmp_path)
    asked: list[dict[str, Any]] = []

    def lag(end: dict[str, Any]) -> int:
        asked.append(end)
        return 42

    own = replace(wordcount(), source=lambda spark: None, source_backlog=lag)
    streams = SourceStreams(None, config, own, control=None)  # type: ignore[arg-type]
    assert streams.backlog({"topic": {"0": 7}}) == 42 and asked == [{"topic": {"0": 7}}]
    silent = replace(own, source_backlog=None)
    assert SourceStreams(None, config, silent, None).backlog({"topic": {}}) is None  # type: ignore[arg-type]


def test_a_source_that_cannot_answer_leaves_the_backlog_unknown(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = RunnerConfig(pipeline="wordcount", state_dir=tmp_path)

    def down(end: dict[str, Any]) -> int:
        raise ConnectionError("the broker is restarting")

    own = replace(wordcount(), source=lambda spark: None, source_backlog=down)
    assert SourceStreams(None, config, own, None).backlog({"x": 1}) is None  # type: ignore[arg-type]
    assert "broker is restarting" in caplog.text


def test_a_source_backlog_that_is_not_a_function_is_refused() -> None:
    with pytest.raises(InvalidPipeline, match="source_backlog must be a function"):
        replace(wordcount(), source_backlog=5).validate()  # type: ignore[arg-type]
