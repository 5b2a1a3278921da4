"""The sink contract: one idempotent write per (fragment, epoch, PU) of the last fragment's outputs.

Exactly-once delivery to an external system rests on two facts of the data plane (docs/data-plane.md,
"Exactly once"): a re-run epoch re-emits exactly the outputs its first attempt recorded (the store
keeps them with the epoch's marker), and the plan of an epoch, so which PU emits which key, is
recorded before the epoch runs. So the pair (epoch, PU) names one immutable table forever, and a
sink is exactly-once when writing the same (fragment, epoch, PU) twice changes nothing the second
time. Each sink here keeps that identity *in the target system, in the same atomic step as the
data* (a bookkeeping row in the same Postgres transaction, an app transaction in the same Delta
commit, a message id the NATS server de-duplicates), because a crash can fall between the sink's
write and Spark's commit of the epoch, and then only the target knows the write happened.

Sinks are built on the driver and pickled to Spark's executors with the task, so they hold only
configuration until their first :meth:`Sink.write`, which opens the connection; pickling drops any
open connection (:meth:`Sink.__getstate__`).
"""

from __future__ import annotations

import abc
import base64
import datetime
import decimal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pyarrow as pa

SUPPORTED_URIS = (
    "files (Arrow files in the state directory, for debugging)",
    "postgres://USER@HOST:PORT/DATABASE?table=NAME[&key=COL,...]",
    "delta:PATH_OR_URI (delta:/data/out, delta:s3://bucket/out)",
    "nats://HOST:PORT/SUBJECT[?stream=NAME&duplicate_window_s=SECONDS&create_stream=false]",
)


@dataclass(frozen=True)
class EpochOutputs:
    """What one PU's task of the last fragment emitted in one epoch: the unit a sink writes once.

    ``table`` has the fragment's output schema (``key``, ``seq``, the operator's fields); within
    it, rows are in the order the operator emitted them, so several rows of one key end with the
    latest.
    """

    fragment: str
    epoch: int
    pu: int
    table: pa.Table

    def __post_init__(self) -> None:
        if not self.fragment:
            raise ValueError("EpochOutputs needs a fragment name")
        if self.epoch < 0 or self.pu < 0:
            raise ValueError(f"epoch and pu must be >= 0, not {self.epoch} and {self.pu}")


class SinkError(RuntimeError):
    """A sink cannot write: its service does not answer, or its target is missing or does not fit
    the outputs. The message names the target and what to do; nothing was written."""


class Sink(abc.ABC):
    """Writes each (fragment, epoch, PU)'s outputs at most once, so a replay after a crash is a no-op.

    Implementations open connections lazily in :meth:`write` and must stay picklable.
    """

    #: whether an epoch with no outputs on a PU is written at all (most targets gain nothing)
    writes_empty = False

    @abc.abstractmethod
    def write(self, outputs: EpochOutputs) -> bool:
        """Write ``outputs``; True when written now, False when this (fragment, epoch, pu) had
        already been written (a replay), in which case nothing changes."""

    def bound(self, state_root: str | Path) -> Sink:
        """This sink for a pipeline whose state is in ``state_root`` (only the files sink
        writes there)."""
        return self

    def last_epoch(self, fragment: str) -> int | None:
        """The newest epoch of ``fragment`` this sink holds (any PU), None when it holds none
        or cannot tell. The runner compares it with its checkpoint at the start: a sink ahead
        of the state means a fresh state directory writing into an old run's target, whose
        epochs would be skipped as replays."""
        return None

    def close(self) -> None:  # noqa: B027 - a sink without connections has nothing to close
        """Release connections; the sink may be used again (it reconnects)."""

    @abc.abstractmethod
    def describe(self) -> str:
        """One line for logs and the console: the target, without credentials."""

    def __getstate__(self) -> dict[str, Any]:
        """Configuration only: connections and clients (attributes starting with ``_``) are
        opened again by the copy's first write."""
        return {k: (None if k.startswith("_") else v) for k, v in self.__dict__.items()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __enter__(self) -> Sink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FunctionSink(Sink):
    """Calls ``fn(table, epoch_id, pu)`` for each (epoch, PU), like Spark's ``foreachBatch``.

    The sink cannot know what ``fn`` did, so **``fn`` must itself be idempotent per (epoch, pu)**:
    after a crash between its call and the epoch's commit, it is called again with the same
    arguments and the same table. Key the target by (epoch, pu) or upsert by key with the epoch,
    as :class:`~workers.sinks.postgres.PostgresSink` does. ``fn`` may return False to report a
    call it recognised as a replay; anything else counts as written. ``fn`` is pickled to the
    executors with the sink (Spark's cloudpickle also takes lambdas and closures).
    """

    def __init__(self, fn: Callable[[pa.Table, int, int], Any], name: str | None = None) -> None:
        if not callable(fn):
            raise TypeError(f"FunctionSink needs a callable, not {type(fn).__name__}")
        self.fn = fn
        self.name = name or getattr(fn, "__qualname__", None) or repr(fn)

    def write(self, outputs: EpochOutputs) -> bool:
        result = self.fn(outputs.table, outputs.epoch, outputs.pu)
        return result is not False

    def describe(self) -> str:
        return f"function {self.name}"


class FanOut(Sink):
    """Several sinks, each written once per (fragment, epoch, PU): a table and a topic, say.

    Each sink keeps its own identity of what it wrote, so a replay after a crash between two of
    the writes writes only to the sinks that had not got it. Written in order; the first error
    fails the epoch (which is then re-run, and the sinks already written skip it)."""

    def __init__(self, sinks: Sequence[Sink]) -> None:
        if len(sinks) < 2:
            raise ValueError("FanOut needs at least two sinks")
        self.sinks = tuple(sinks)
        self.writes_empty = any(s.writes_empty for s in self.sinks)

    def write(self, outputs: EpochOutputs) -> bool:
        written = False
        for sink in self.sinks:
            if outputs.table.num_rows or sink.writes_empty:
                written = sink.write(outputs) or written
        return written

    def bound(self, state_root: str | Path) -> Sink:
        return FanOut([s.bound(state_root) for s in self.sinks])

    def last_epoch(self, fragment: str) -> int | None:
        return max(
            (e for s in self.sinks if (e := s.last_epoch(fragment)) is not None), default=None
        )

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()

    def describe(self) -> str:
        return " + ".join(s.describe() for s in self.sinks)

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__)  # the sinks drop their own connections


def _split_query(query: str) -> dict[str, str]:
    return dict(parse_qsl(query, keep_blank_values=True))


def _flag(value: str, name: str, uri: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"sink URI {uri!r}: {name} must be true or false, not {value!r}")


def _postgres(uri: str) -> Sink:
    from workers.sinks.postgres import PostgresSink

    parts = urlsplit(uri)
    params = _split_query(parts.query)
    table = params.pop("table", "").strip()
    if not table:
        raise ValueError(
            f"sink URI {uri!r} names no table: add ?table=NAME (e.g. {SUPPORTED_URIS[1]})"
        )
    keys = tuple(k.strip() for k in params.pop("key", "key").split(",") if k.strip())
    if not keys:
        raise ValueError(f"sink URI {uri!r}: key= names no column")
    if not parts.path.strip("/"):
        raise ValueError(f"sink URI {uri!r} names no database: postgres://HOST:PORT/DATABASE?...")
    dsn = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(params), ""))
    return PostgresSink(dsn, table, key_columns=keys)


def _delta(uri: str) -> Sink:
    from workers.sinks.delta import DeltaSink

    target = uri[len("delta:") :].strip()
    if not target:
        raise ValueError(f"sink URI {uri!r} names no table location: {SUPPORTED_URIS[2]}")
    return DeltaSink(target)


def _nats(uri: str) -> Sink:
    from workers.natsio import check_stream_name, check_subject
    from workers.sinks.nats import DEFAULT_DUPLICATE_WINDOW_S, NatsSink

    parts = urlsplit(uri)
    subject = parts.path.lstrip("/")
    if not subject:
        raise ValueError(f"sink URI {uri!r} names no subject: {SUPPORTED_URIS[3]}")
    check_subject(subject, wildcards=False)
    params = _split_query(parts.query)
    stream = params.pop("stream", None) or None
    if stream is not None:
        check_stream_name(stream)
    window = params.pop("duplicate_window_s", str(DEFAULT_DUPLICATE_WINDOW_S))
    try:
        duplicate_window_s = float(window)
    except ValueError:
        raise ValueError(
            f"sink URI {uri!r}: duplicate_window_s must be a number of seconds, not {window!r}"
        ) from None
    create = _flag(params.pop("create_stream", "true"), "create_stream", uri)
    if params:
        raise ValueError(
            f"sink URI {uri!r}: unknown option(s) {', '.join(sorted(params))} "
            f"(known: stream, duplicate_window_s, create_stream)"
        )
    url = urlunsplit(("nats", parts.netloc, "", "", ""))
    return NatsSink(
        url, subject, stream, duplicate_window_s=duplicate_window_s, create_stream=create
    )


def sink_from_uri(uri: str, state_root: str | None = None) -> Sink:
    """The sink a URI names (the runner's ``--sink`` and ``RESCALER_SINK``):

    * ``files``: the debugging sink, Arrow files under ``state_root`` (the pipeline's directory);

    * ``postgres://USER@HOST:PORT/DATABASE?table=NAME[&key=COL,...]`` (also ``postgresql://``):
      upsert by the key columns (default ``key``) into ``NAME`` (``schema.name`` allowed); other
      query parameters (``sslmode=...``) go to the connection;
    * ``delta:PATH_OR_URI``: append to the Delta table at a local path or an object-store URI
      (``delta:/data/clicks``, ``delta:s3://bucket/clicks``);
    * ``nats://HOST:PORT/SUBJECT[?stream=NAME&duplicate_window_s=120&create_stream=true]``: one
      JSON message per row on the JetStream subject ``SUBJECT``.

    Several URIs separated by spaces are a :class:`FanOut` to all of them.

    A URI that is none of these, or lacks a required part, is a ValueError saying what to write.
    """
    if not isinstance(uri, str) or not uri.strip():
        raise ValueError("empty sink URI: use one of " + "; ".join(SUPPORTED_URIS))
    uri = uri.strip()
    if len(uri.split()) > 1:  # several URIs, separated by spaces: every sink gets every epoch
        return FanOut([sink_from_uri(part, state_root) for part in uri.split()])
    scheme = uri.split(":", 1)[0].lower() if ":" in uri else ""
    if uri == "files":
        from workers.sinks.files import FileSink

        return FileSink(state_root or "")
    if scheme in ("postgres", "postgresql"):
        return _postgres(uri)
    if scheme == "delta":
        return _delta(uri)
    if scheme == "nats":
        return _nats(uri)
    raise ValueError(
        f"unsupported sink URI {uri!r}: use one of " + "; ".join(SUPPORTED_URIS) + " (or "
        "FunctionSink(fn) in code)"
    )


def json_default(value: Any) -> Any:
    """A value JSON has no form of, as sinks write it: bytes in base64, times in ISO 8601,
    decimals as strings, durations in seconds."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")
