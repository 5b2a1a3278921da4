"""The terminal fragment's outputs to the pipeline's sink."""

from __future__ import annotations

import pyarrow as pa

from workers import faults
from workers.epoch.spec import TaskSpec
from workers.sinks.base import EpochOutputs, Sink
from workers.sinks.files import FileSink

#: sinks opened in this (reused) Python worker, so a sink's connection outlives one task
_OPEN_SINKS: dict[tuple[type, str], Sink] = {}


def write_sink(spec: TaskSpec, pu: int, outputs: pa.Table) -> None:
    """The epoch's outputs of this PU to the pipeline's sink, once per (fragment, epoch, PU): the
    store committed them first, so a replay after a crash between the two writes the same table
    again and the sink recognises it (workers/sinks/base.py)."""
    if spec.sink is not None:
        sink = spec.sink
    else:  # the debugging files, in the durable location
        sink = FileSink(spec.durable or spec.state_root, spec.sink_retention)
    if not outputs.num_rows and not sink.writes_empty:
        return
    ident = (type(sink), sink.describe())
    live = _OPEN_SINKS.setdefault(ident, sink)
    live.write(EpochOutputs(spec.fragment, spec.epoch, pu, spec.operator.sink_table(outputs)))
    faults.after_sink_write(spec.state_root, spec.epoch, outputs.num_rows)
