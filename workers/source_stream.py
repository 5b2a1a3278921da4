"""What a pipeline's epochs read: its own stream of source records (the pipeline's ``source``
function, or the runner's ``--source``: the generator, a directory, a JetStream stream), unioned
with the runner's control stream so that a barrier can be forced on any source."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from workers.config import RunnerConfig
from workers.natsio import redact
from workers.pipeline.model import Pipeline
from workers.sources import jsonl
from workers.sources.control import ControlStream
from workers.sources.jetstream import JETSTREAM, JetStreamStreamReader
from workers.sources.jetstream import register as register_jetstream
from workers.sources.spark import GENERATOR, JSONL, JsonlStreamReader, register

log = logging.getLogger("workers.runner")

# the JSON-lines source's Arrow types, as a JetStream source's Spark schema names them
_SPARK_TYPES = {
    "string": "string",
    "int64": "bigint",
    "double": "double",
    "int32": "int",
    "bool": "boolean",
}


class SourceMissing(Exception):
    """The configured source cannot be read; the message says what to do."""


def jetstream_options(config: RunnerConfig, pipeline: Pipeline) -> dict[str, str]:
    """A ``nats:STREAM`` source's options: the stream's messages are JSON objects of the
    pipeline's source kind (what ``python -m workers.sources.jetstream_feed`` publishes)."""
    if pipeline.source_kind not in ("lines", "events"):
        raise SourceMissing(
            f"pipeline {pipeline.name!r} (source_kind {pipeline.source_kind!r}): --source "
            f"nats:STREAM reads the built-in record shapes only; give the pipeline a source "
            f"function reading your stream, or --source dir:PATH"
        )
    schema = jsonl.schema_for(pipeline.source_kind)
    fields = ", ".join(
        f"`{f.name}` {_SPARK_TYPES[str(f.type)]}"
        for f in schema
        if f.name not in ("seq", "_malformed")
    )
    return {
        "stream": str(config.source_stream_name),
        "url": config.nats_url,
        "schema": fields,
        "max_records_per_epoch": str(config.rows_per_epoch),
        "partitions": str(config.source_partitions),
        # shows the query's progress in `nats consumer info` (read by nothing)
        "consumer": f"rescaler-{pipeline.name}",
    }


def check_source(config: RunnerConfig, pipeline: Pipeline) -> None:
    """Stop the start, before Spark, with the source's own message when it cannot be read (a
    JetStream server or stream missing, a source directory absent) instead of failing the
    query's first epoch."""
    if config.source_stream_name is not None:
        JetStreamStreamReader(jetstream_options(config, pipeline)).initialOffset()
    directory = config.source_dir
    if directory is not None and not directory.is_dir():
        raise SourceMissing(f"source directory {directory} does not exist: create it first")


class SourceStreams:
    """The pipeline's source stream and the query's stream, each built once per runner."""

    def __init__(
        self, spark: Any, config: RunnerConfig, pipeline: Pipeline, control: ControlStream
    ) -> None:
        self.spark = spark
        self.config = config
        self.pipeline = pipeline
        self.control = control
        self._source: Any = None  # the source's streaming DataFrame, analysed once
        self._stream: Any = None  # and unioned with the control stream
        self._backlog: Callable[[dict[str, Any]], int | None] | None = None

    def source_stream(self) -> Any:
        """The pipeline's own stream of source records: the pipeline's ``source`` function, or
        the source the runner was given (``--source``). It knows nothing of barriers.

        Built once: each query start (the first, a restart after a failure, a rebuild's re-runs)
        starts from the same DataFrame, so Spark looks a Python data source up (a Python process
        on the driver) and analyses the user's ``prepare`` once per runner, not at every start."""
        if self._source is None:
            self._source = self._new_source_stream()
        return self._source

    def _new_source_stream(self) -> Any:
        cfg = self.config
        reader = self.spark.readStream
        if not cfg.source and self.pipeline.source is not None:
            stream = self.pipeline.source(self.spark)
            if not getattr(stream, "isStreaming", False):
                raise SourceMissing(
                    f"pipeline {self.pipeline.name!r}: its source function returned "
                    f"{type(stream).__name__}, not a streaming DataFrame (spark.readStream...load())"
                )
            return stream
        if self.pipeline.source_kind == "json" and not cfg.source_dir:
            raise SourceMissing(
                f"pipeline {self.pipeline.name!r} reads JSON records of its own "
                f"(source_kind 'json'): give --source dir:PATH (a directory of JSON-lines files) "
                f"or a source function in the pipeline"
            )
        if cfg.source in ("", "generator"):
            options = {
                "kind": self.pipeline.source_kind,
                "key_space": cfg.key_space,
                "zipf_s": cfg.zipf_s,
                "seed": cfg.seed,
                "pages": cfg.pages,
                "words_per_line": cfg.words_per_line,
                "rows_per_epoch": cfg.rows_per_epoch,
                "partitions": cfg.source_partitions,
            }
            if cfg.source_rows is not None:
                options["max_rows"] = cfg.source_rows
            elif cfg.epochs is not None:
                options["max_rows"] = cfg.epochs * cfg.rows_per_epoch
            register(self.spark)
            return (
                reader.format(GENERATOR).options(**{k: str(v) for k, v in options.items()}).load()
            )
        if cfg.source_stream_name is not None:
            register_jetstream(self.spark)
            return (
                reader.format(JETSTREAM)
                .options(**jetstream_options(self.config, self.pipeline))
                .load()
            )
        directory = cfg.source_dir
        assert directory is not None
        if not directory.is_dir():
            raise SourceMissing(f"source directory {directory} does not exist: create it first")
        register(self.spark)
        return reader.format(JSONL).options(**self._jsonl_options()).load()

    def _jsonl_options(self) -> dict[str, str]:
        cfg = self.config
        return {
            "kind": self.pipeline.source_kind,
            "path": str(cfg.source_dir),
            "manifest": str(cfg.pipeline_dir / "source-manifest.txt"),
            "max_files_per_epoch": str(cfg.max_files_per_epoch),
        }

    def backlog(self, end: dict[str, Any]) -> int | None:
        """The records the source holds past ``end`` (the source's entry of an epoch's offset
        log), asked now on the driver; None when it is not known: a pipeline's own source
        without ``source_backlog``, no offset, or the source not answering (logged)."""
        if not end:
            return None
        try:
            if self._backlog is None:
                self._backlog = self._new_backlog()
            return self._backlog(end)
        except Exception as exc:  # a signal: never the epoch's failure
            log.warning("the source's backlog is not known this epoch: %s", exc)
            return None

    def _new_backlog(self) -> Callable[[dict[str, Any]], int | None]:
        cfg = self.config
        if not cfg.source and self.pipeline.source is not None:
            return self.pipeline.source_backlog or (lambda end: None)
        if cfg.source in ("", "generator"):
            return lambda end: 0  # each epoch's rows are made when it asks: none wait
        if cfg.source_stream_name is not None:
            return JetStreamStreamReader(jetstream_options(cfg, self.pipeline)).backlog
        return JsonlStreamReader(self._jsonl_options()).backlog

    def stream(self) -> Any:
        """What the query reads: the pipeline's stream unioned with the runner's control stream,
        so that the runner can force a barrier on any source (workers/sources/control.py)."""
        if self._stream is None:
            self._stream = self.control.union(self.spark, self.source_stream())
        return self._stream

    def describe_source(self) -> str:
        """One line for the fragment matrix: what the pipeline reads."""
        cfg = self.config
        if not cfg.source and self.pipeline.source is not None:
            fn = self.pipeline.source
            return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
        if cfg.source_stream_name:
            return f"JetStream stream {cfg.source_stream_name} at {redact(cfg.nats_url)}"
        if cfg.source_dir:
            return f"JSON-lines files in {cfg.source_dir}"
        return f"generator, {cfg.rows_per_epoch} rows per epoch"
