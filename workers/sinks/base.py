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

import pyarrow as pa


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
