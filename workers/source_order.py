"""The source order of a pipeline whose records carry none: the runner's position of each record.

Every record needs a ``seq``: a bigint, increasing in the order the source gave the records, by
which each key's records are folded, held rows replayed with an epoch's own, and outputs carried
to the next fragment (``workers.operators.sort_by_seq``: global and increasing). Rescaler's own
sources and Kafka's offsets give one; a pipeline whose source has none (Spark's JSON, CSV or text
file source, a socket, a Python data source) sets ``Pipeline(order=None)`` and the runner makes it:

    seq = epoch * 2**32 + row * partitions + partition

``row`` is the record's position in the epoch's Spark partition it is read in (the low bits of
``monotonically_increasing_id()``) and ``partitions`` the epoch's number of them. So every seq of
an epoch is above every seq of the epochs before, and within an epoch one partition's records keep
the order the partition read them in: a file's lines, in the file's order (a file source reads a
split of a file, or a small file whole, in one partition). Records of one key read in two
partitions of the same epoch (two files in one micro-batch) have no order between them, as in
Spark, whose grouped rows come in whatever order its shuffle gives; ``maxFilesPerTrigger=1``
makes one file one epoch. The same epoch read again (a re-run after a crash, a rebuild) gives the
same seqs when the source reads it again in the same partitions and order, as Spark's file source
and Kafka do, and ``prepare`` does not shuffle (no join, aggregation or repartition before the
fragments). An epoch of more positions than 2**32 fails, saying so, before anything is folded.
"""

from __future__ import annotations

from typing import Any

#: the bits of a seq below the epoch's: positions within one epoch
POSITION_BITS = 32
_ID = "__rescaler_read_id"  # the column the read id is taken into, dropped by the selectExpr
_ROW_BITS = 33  # monotonically_increasing_id(): partition index << 33 | row in the partition


def with_read_ids(prepared: Any) -> Any:
    """``prepared`` with each record's ``monotonically_increasing_id()`` taken once, before the
    epoch's expressions read it (two calls of it are two counters)."""
    from pyspark.sql import functions as F

    return prepared.withColumn(_ID, F.monotonically_increasing_id())


def position_seq(epoch: int, partitions: int) -> str:
    """The Spark SQL expression of a record's seq in ``epoch`` of ``partitions`` partitions,
    over :func:`with_read_ids`'s column."""
    row = f"({_ID} & {(1 << _ROW_BITS) - 1})"
    partition = f"shiftright({_ID}, {_ROW_BITS})"
    position = f"({row} * {max(partitions, 1)} + {partition})"
    too_many = (
        f"epoch {epoch} reads more than 2^{POSITION_BITS} records: the source order the runner "
        "makes (Pipeline.order None) cannot number them; take fewer per epoch "
        "(maxFilesPerTrigger, maxOffsetsPerTrigger) or give prepare an order column"
    )  # no quote in it: it is a SQL string literal
    return (
        f"CASE WHEN {position} >= {1 << POSITION_BITS} THEN raise_error('{too_many}') "
        f"ELSE CAST({epoch << POSITION_BITS} + {position} AS BIGINT) END"
    )


def read_partitions(prepared: Any) -> int:
    """The number of Spark partitions the epoch's records are read in (planned, not run)."""
    return int(prepared.rdd.getNumPartitions())
