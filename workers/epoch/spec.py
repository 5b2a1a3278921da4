"""What an epoch task is given: its spec, pickled to the executors, and the columns it reads."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pyarrow as pa

from workers import partials
from workers.operators.base import KeyedOperator, arrow_type
from workers.pipeline.placement import EpochClock, SlotActions
from workers.processor import ProcessorOperator
from workers.processor.schema import wire_name
from workers.region import Region
from workers.sinks.base import Sink

#: the clock columns a processor's held rows carry, so their replay runs at their own epoch's time
CLOCK_COLUMNS = ("_batch_ms", "_watermark_ms", "_late_ms")


class RoutingError(Exception):
    """A record reached a PU that does not own its vnode: routing and placement disagree."""


#: what a :class:`StoreLost` failure says, for the runner to tell it from a transient failure
STORE_LOST = "store lost"


class StoreLost(Exception):
    """A PU's store is behind what the PU already committed (its directory was deleted or
    replaced, its disk lost): the task refuses to apply an epoch on it, which would count from
    nothing; the runner rebuilds the store from the newest snapshot (docs/recovery.md)."""


def output_schema(operator: KeyedOperator) -> pa.Schema:
    """The schema every task of a fragment emits: kind, key, seq, the operator's fields, info."""
    fields = [("kind", pa.string()), ("key", pa.string()), ("seq", pa.int64())]
    fields += [(name, arrow_type(typ)) for name, typ in operator.output_fields]
    return pa.schema([*fields, ("info", pa.string())])


@dataclass(frozen=True)
class TaskSpec:
    """Everything a task needs, pickled to the executors with the function."""

    fragment: str
    operator: KeyedOperator
    epoch: int
    parallel_units: tuple[int, ...]  # Spark partition i runs PU parallel_units[i]
    owned: tuple[
        tuple[int, ...], ...
    ]  # owned[i]: the vnodes PU parallel_units[i] applies records of
    state_root: str
    backend: str
    terminal: bool  # the last fragment writes the sink instead of emitting outputs
    actions: tuple[SlotActions, ...] = ()  # actions[i]: the rescale actions of PU parallel_units[i]
    sink: Sink | None = None  # where the terminal fragment's outputs go; None: FileSink
    sink_retention: int = 50  # epochs the FileSink keeps
    # the durable location's root: exports and hold queues (workers.storage); "": state_root
    durable: str = ""
    # expected[i]: the last epoch PU parallel_units[i] reported committed in this runner (-1:
    # none): a store behind it was lost (StoreLost); () in a rebuild, which re-runs epochs
    expected: tuple[int, ...] = ()
    vectorised: bool = True  # False: every operator takes the per-key path (tests, benchmarks)
    clock: EpochClock = dataclasses.field(
        default_factory=EpochClock
    )  # the epoch's processing time and watermark (processors)
    event_time: str | None = None  # the column giving event time, when the pipeline has one
    # the event time is an upstream processor's output (its event_time_column): the watermark
    # stays the source's, so this fragment's event times do not move it (as in Spark)
    chained_event_time: bool = False
    # a snapshot taken at this epoch: after its commit, the task copies its store for it
    snapshot: str | None = None
    # outputs of epochs from this one on are kept (what a rebuild re-emits); None: the last two
    outputs_from: int | None = None
    # a re-run for a rebuild of lost stores (workers/recovery/rebuild.py): the sink already
    # holds the epoch, and a whole store whose outputs of it are gone re-emits none
    rebuilding: bool = False
    # homes[i]: the id of the executor PU parallel_units[i]'s store is on ("" or (): any, as in
    # local mode); a task that Spark ran elsewhere, where the store is not, refuses (AwayFromHome)
    homes: tuple[str, ...] = ()

    def slot_actions(self, slot: int) -> SlotActions:
        return self.actions[slot] if self.actions else SlotActions()

    def home_of(self, slot: int) -> str:
        return self.homes[slot] if self.homes else ""

    def expected_epoch(self, slot: int) -> int:
        """The epoch the slot's store must have committed at least (-1: none known)."""
        return self.expected[slot] if self.expected else -1


def unique_columns(*names: str) -> list[str]:
    """Column names without repeats (an operator may read ``seq`` itself)."""
    return list(dict.fromkeys(names))


def held_columns(spec: TaskSpec, held: pa.Table) -> list[str]:
    if partials.is_partial(held):
        return partials.partial_columns(partials.aggregates_of(spec.operator))
    return unique_columns("key", "seq", "vnode", "src", *read_columns(spec))


def read_columns(spec: TaskSpec) -> tuple[str, ...]:
    """The record columns the operator reads (its key arrives as ``key``), event time included;
    a processor's by their names in the task's tables (``wire_name``: its columns are the
    user's, a built-in operator's are Rescaler's own, ``seq`` included)."""
    key = getattr(spec.operator, "key_column", None)
    named = wire_name if is_processor(spec) else str
    wanted = (*(named(c) for c in spec.operator.columns if c != key), *event_column(spec))
    return tuple(dict.fromkeys(wanted))


def event_column(spec: TaskSpec) -> tuple[str, ...]:
    return (spec.event_time,) if spec.event_time and is_processor(spec) else ()


def is_processor(spec: TaskSpec) -> bool:
    """A StatefulProcessor, or a keyed region of them: folded with the epoch's clock."""
    return isinstance(spec.operator, ProcessorOperator | Region)
