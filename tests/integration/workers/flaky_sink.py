"""``wordcount`` whose sink fails once for PU 0 at each of epochs 3 to 8: six transient failures,
each followed by progress. Local mode gives a task one attempt, so each fails the streaming
query, and the runner must restart it every time (more than its three failures in a row).
``FLAKY_SINK_DIR`` is where the failures and the writes are marked."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from workers.pipeline import Pipeline
from workers.pipeline.builtins import wordcount
from workers.sinks import FunctionSink

FAIL_EPOCHS = range(3, 9)


def write(table: Any, epoch: int, pu: int) -> bool:
    marks = Path(os.environ["FLAKY_SINK_DIR"])
    if pu == 0 and epoch in FAIL_EPOCHS:
        try:
            os.close(os.open(marks / f"failed-{epoch}", os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            pass  # failed once already: this is Spark's re-run of the epoch
        else:
            raise RuntimeError(f"a transient sink failure at epoch {epoch} (flaky_sink)")
    (marks / f"wrote-{epoch}-{pu}").touch()
    return True


def build() -> Pipeline:
    return dataclasses.replace(wordcount(), sink=FunctionSink(write, name="flaky"))
