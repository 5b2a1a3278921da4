"""The control stream: an internal source unioned with the pipeline's own, so that the runner can
make Spark run an epoch on any source.

Structured Streaming starts a micro-batch only when one of the query's sources reports an offset
beyond its last committed one. A stream that receives nothing therefore reaches no barrier, and
everything applied at barriers (a rescale's steps, a cancel, a stop-start, a worker joining)
would wait for the next record (docs/rescale.md, "Idle streams"). The runner cannot rely on the
user's source for that: a Kafka topic or a JetStream stream knows nothing of the runner.

So the runner unions the user's stream with this one. Its offset advances on the runner's
*barrier tick* (:class:`workers.idle.BarrierTicks`), and it never yields a record: Spark's own
file source over a directory of the pipeline's (``barrier-ticks.d``), where each tick is one new
empty file, projected to the user's columns (all null). When control work waits, the runner
ticks; the next trigger lists a new file, so the control stream has a new offset and Spark runs
a micro-batch in which the user's source may have no new data: an *empty epoch*, with its own
epoch number, offset-log entry and recorded plan. A tick never selects a record of the user's
stream, so the user's source stays exactly what it was: its offsets, its replay after a crash,
its order.

It is a JVM source, not a Python one: a Python data source costs the runner's start a Python
process for Spark's lookup of Python sources, another for the source's own, and one that lives
as long as the query: on two cores, a plain query of Spark's rate source reached its first
batch 4 to 5 s later with the Python source unioned in, and 0.3 to 1 s later with this one.

Checkpoints written before it hold the offsets of the Python source it replaces
(``rescaler_control``, ``{"tick": N}``, a counter in the file ``barrier-ticks``); Spark's file
source cannot read them, so such a checkpoint is resumed with that source
(:meth:`ControlStream.of` decides which).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TICKS_DIR = "barrier-ticks.d"  # one empty file per tick, read by Spark's file source
LEGACY_TICKS_FILE = "barrier-ticks"  # the Python source's counter


@dataclass(frozen=True)
class ControlStream:
    """One pipeline's control stream: where a tick goes and how Spark reads it."""

    pipeline_dir: Path
    legacy: bool = False  # the Python source and its counter file (an older checkpoint)

    @classmethod
    def of(cls, pipeline_dir: Path) -> ControlStream:
        """The control stream the pipeline's checkpoint was written with: the file stream, unless
        its offset log holds the Python source's ``{"tick": N}`` (the query's last source)."""
        return cls(Path(pipeline_dir), legacy=_logged_by_python_source(pipeline_dir / "checkpoint"))

    @property
    def path(self) -> Path:
        return self.pipeline_dir / (LEGACY_TICKS_FILE if self.legacy else TICKS_DIR)

    def ticks(self) -> int:
        """How many ticks there have been."""
        if self.legacy:
            from workers.sources.control_legacy import read_ticks

            return read_ticks(self.path)
        try:
            return sum(1 for p in self.path.iterdir() if p.name.startswith("tick-"))
        except OSError:
            return 0

    def tick(self) -> int:
        """One more tick, durably; returns how many there have been."""
        value = self.ticks() + 1
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.legacy:  # the counter, replaced atomically
            tmp = self.path.with_name(f".{self.path.name}.tmp")
            tmp.write_text(str(value), "ascii")
            os.replace(tmp, self.path)
            return value
        self.path.mkdir(exist_ok=True)
        # named by the clock, never by the count: Spark's file source remembers every path it
        # listed (its log in the checkpoint), and a name it saw once would never start an epoch
        # again (after a restore into a new directory, say, which starts with no tick file)
        stamp = time.time_ns()
        while True:  # an empty file needs no atomic rename: Spark lists it whole or not at all
            try:
                (self.path / f"tick-{stamp:020d}").touch(exist_ok=False)
                return value
            except FileExistsError:
                stamp += 1

    def union(self, spark: Any, stream: Any) -> Any:
        """``stream`` unioned with the control stream: the same records, plus epochs on demand."""
        if self.legacy:
            from workers.sources.control_legacy import CONTROL, ControlSource

            spark.dataSource.register(ControlSource)
            control = (
                spark.readStream.format(CONTROL)
                .schema(stream.schema)
                .option("barrier_ticks", str(self.path))
                .load()
            )
            return stream.unionByName(control)
        from pyspark.sql import functions as F

        self.path.mkdir(parents=True, exist_ok=True)
        files = spark.readStream.format("text").load(str(self.path))
        control = files.select(*(F.lit(None).cast(f.dataType).alias(f.name) for f in stream.schema))
        return stream.unionByName(control)


#: the control stream's offset in a restored checkpoint: its file source starts with no log
RESTORED_OFFSET = '{"logOffset":-1}'


def restored_offsets(entry: str) -> str:
    """An offset-log entry of a snapshot, as a restore writes it into a new checkpoint: Spark's
    file source resumes from its own log of listed files, which the snapshot does not carry, so
    the control stream's offset (the entry's last line) starts again from none. The Python
    source's counter (``{"tick": N}``) travels with the snapshot and is kept."""
    lines = entry.splitlines()
    try:
        offset = json.loads(lines[-1])
    except (ValueError, IndexError):
        return entry
    if not (isinstance(offset, dict) and "logOffset" in offset):
        return entry
    return "\n".join([*lines[:-1], RESTORED_OFFSET])


def _logged_by_python_source(checkpoint: Path) -> bool:
    """Whether the newest entry of the query's offset log ends with the Python control source's
    offset (the control stream is the query's last source)."""
    offsets = checkpoint / "offsets"
    try:
        batches = [int(p.name) for p in offsets.iterdir() if p.name.isdigit()]
    except OSError:
        return False
    if not batches:
        return False
    try:
        last = (offsets / str(max(batches))).read_text("utf-8").splitlines()[-1]
        offset = json.loads(last)
    except (OSError, ValueError, IndexError):
        return False
    return isinstance(offset, dict) and "tick" in offset
