"""Which source and sink a run uses, and how a wrong choice is refused before Spark starts."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest

from workers.config import ConfigError, RunnerConfig
from workers.layout import sink_path
from workers.pipeline.builtins import wordcount
from workers.pipeline.loading import resolve_sink
from workers.pipeline.model import InvalidPipeline
from workers.sinks import EpochOutputs, FanOut, FunctionSink, Sink, sink_from_uri
from workers.sinks.files import FileSink
from workers.source_order import POSITION_BITS, position_seq


class Recording(Sink):
    """Remembers each (epoch, pu) and reports a second write of one as a replay."""

    def __init__(self, writes_empty: bool = False) -> None:
        self.seen: list[tuple[int, int]] = []
        self.writes_empty = writes_empty

    def write(self, outputs: EpochOutputs) -> bool:
        ident = (outputs.epoch, outputs.pu)
        if ident in self.seen:
            return False
        self.seen.append(ident)
        return True

    def describe(self) -> str:
        return "recording"


def outputs(epoch: int, rows: int) -> EpochOutputs:
    table = pa.table({"key": [f"k{i}" for i in range(rows)], "seq": list(range(rows))})
    return EpochOutputs("frag", epoch, 1, table)


def test_several_uris_fan_out_and_files_is_bound_to_the_state_directory(tmp_path: Path) -> None:
    sink = sink_from_uri(f"files delta:{tmp_path}/t")
    assert isinstance(sink, FanOut)
    assert "Arrow files in the state directory" in sink.describe()
    bound = sink.bound(tmp_path / "p")
    assert isinstance(bound, FanOut) and isinstance(bound.sinks[0], FileSink)
    assert bound.sinks[0].state_root == str(tmp_path / "p")
    with pytest.raises(ValueError, match="unsupported sink URI"):
        sink_from_uri("files kafka://x")


def test_fan_out_writes_each_sink_once_and_empty_tables_only_where_wanted() -> None:
    quiet, loud = Recording(), Recording(writes_empty=True)
    fan = FanOut([quiet, loud])
    assert fan.writes_empty
    assert fan.write(outputs(3, 2)) is True
    assert fan.write(outputs(3, 2)) is False, "a replay changes nothing anywhere"
    fan.write(outputs(4, 0))
    assert quiet.seen == [(3, 1)] and loud.seen == [(3, 1), (4, 1)]
    with pytest.raises(ValueError, match="at least two"):
        FanOut([quiet])


def test_the_file_sink_rewrites_a_replay_and_keeps_a_window(tmp_path: Path) -> None:
    sink = FileSink(tmp_path, retention=2)
    assert sink.write(outputs(1, 2)) is True
    assert sink.write(outputs(1, 2)) is False
    sink.write(outputs(2, 1))
    sink.write(outputs(3, 1))
    assert not sink_path(tmp_path, "frag", 1, 1).exists(), "older than the window: removed"
    assert sink_path(tmp_path, "frag", 3, 1).exists()
    with pytest.raises(ValueError, match="binds it"):
        FileSink().write(outputs(1, 1))


def test_where_outputs_go(tmp_path: Path) -> None:
    builtin = RunnerConfig(pipeline="wordcount", state_dir=tmp_path)
    sink = resolve_sink(builtin, wordcount())
    assert isinstance(sink, FileSink) and sink.state_root == str(tmp_path / "wordcount")

    user = RunnerConfig(pipeline="wordcount", pipeline_ref="mine.module:build", state_dir=tmp_path)
    with pytest.raises(InvalidPipeline, match=r"names no sink.*--sink files"):
        resolve_sink(user, wordcount())
    own = FunctionSink(print, name="mine")
    assert resolve_sink(user, replace(wordcount(), sink=own)) is own
    chosen = resolve_sink(replace(user, sink="files"), replace(wordcount(), sink=own))
    assert isinstance(chosen, FileSink), "--sink replaces the pipeline's own"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"source": "kafka:topic"}, "nats:STREAM"),
        ({"source": "nats:"}, "nats:STREAM"),
        ({"source": "nats:bad.name"}, "not a valid JetStream stream name"),
        ({"sink": "mysql://x"}, "unsupported sink URI"),
        ({"sink": "postgres://h/db"}, "names no table"),
    ],
)
def test_a_wrong_source_or_sink_is_refused_with_what_to_write(
    changes: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        RunnerConfig(**changes)  # type: ignore[arg-type]


def test_the_order_column_must_be_prepared_and_a_bigint() -> None:
    pipeline = replace(wordcount(), order="offset")
    pipeline.validate()
    prepared = {"seq": "bigint", "word": "string", "_malformed": "string", "src": "int"}
    with pytest.raises(InvalidPipeline, match="lack column 'offset'"):
        pipeline.check_prepared(prepared)
    with pytest.raises(InvalidPipeline, match="'offset' is string, not bigint"):
        pipeline.check_prepared({**prepared, "offset": "string"})
    pipeline.check_prepared({**prepared, "offset": "bigint"})
    with pytest.raises(InvalidPipeline, match="order 'vnode'"):
        replace(wordcount(), order="vnode").validate()


def test_without_an_order_column_the_runner_numbers_the_records() -> None:
    """``order=None``: prepare gives no order column, and the seq is the runner's position of
    each record in its epoch (``workers.source_order``), above every earlier epoch's."""
    pipeline = replace(wordcount(), order=None)
    pipeline.validate()
    pipeline.check_prepared({"word": "string", "_malformed": "string", "src": "int"})
    with pytest.raises(InvalidPipeline, match="lack column '_malformed'") as refused:
        pipeline.check_prepared({"word": "string", "src": "int"})
    assert "order=None" not in str(refused.value)
    with pytest.raises(InvalidPipeline, match="or order=None when the source has none"):
        wordcount().check_prepared({"word": "string", "_malformed": "string", "src": "int"})
    expr = position_seq(7, 3)
    assert f"CAST({7 << POSITION_BITS} + " in expr and "* 3 + " in expr
    assert "raise_error" in expr and f">= {1 << POSITION_BITS}" in expr
    assert expr.count("'") == 2, "the message is one SQL string literal, with no quote inside"


def test_a_source_that_is_not_a_function_or_a_sink_that_is_not_a_sink_is_refused() -> None:
    with pytest.raises(InvalidPipeline, match="source must be a function"):
        replace(wordcount(), source="kafka").validate()  # type: ignore[arg-type]
    with pytest.raises(InvalidPipeline, match=r"sink must be a workers\.sinks\.Sink"):
        replace(wordcount(), sink="postgres://x").validate()  # type: ignore[arg-type]
