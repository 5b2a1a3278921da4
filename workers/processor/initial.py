"""A processor's initial state (Spark's ``initialState``) on the driver: checked at start-up,
and added to the pipeline's first epoch as rows routed by key, as records are.

Spark hands the initial state to ``handleInitialState`` in the query's first batch only, and
never again (not after a restart from its checkpoint). Rescaler's epoch is Spark's batch id, so
the rows go into epoch 0 only: its tasks fold them into the stores before that epoch's records,
and from then on they are state like any other, which a rescale moves and a snapshot keeps.
A re-run of epoch 0 (a task retried, a lost store rebuilt) reads them again; the store's
atomic commit keeps the fold exactly once.
"""

from __future__ import annotations

from typing import Any

from workers.processor.layout import INITIAL_KIND, initial_column
from workers.processor.operator import ProcessorOperator, processors_of
from workers.processor.schema import UnsupportedProcessor


def _key_of(op: ProcessorOperator, frame: Any, fragment_key: str) -> str:
    key = op.initial_state_key or fragment_key
    if key not in frame.columns:
        raise UnsupportedProcessor(
            f"the initial state has no column {key!r} to group it by (its columns: "
            f"{', '.join(frame.columns)}); name it with initial_state_key="
        )
    return key


def check_initial_states(spark: Any, fragment: Any, key_type: str) -> None:
    """At start-up: each initial state is a DataFrame with the key column, of the fragment key's
    type (Spark's analysis only: nothing is read)."""
    for op in processors_of(fragment.operator):
        if op.initial_state is None:
            continue
        frame = op.initial_state_frame(spark)
        key = _key_of(op, frame, fragment.key)
        found = dict(frame.dtypes)[key]
        if found != key_type:
            raise UnsupportedProcessor(
                f"{fragment.name}: the initial state's key {key!r} is {found}, the fragment's "
                f"key {fragment.key!r} is {key_type}; Spark requires the same type (cast it in "
                f"initial_state)"
            )


def with_initial_states(spark: Any, stream: Any, fragment: Any, key_col: str) -> Any:
    """``stream`` with every initial-state row of the fragment's processors added, of kind
    ``init``: the key in ``key_col`` (routed as a record's), and operator ``i``'s own columns
    as one struct in ``initial_column(i)``."""
    from pyspark.sql import functions as F

    key_type = dict(stream.dtypes)[key_col]
    for i, op in enumerate(processors_of(fragment.operator)):
        if op.initial_state is None:
            continue
        frame = op.initial_state_frame(spark)
        key = _key_of(op, frame, fragment.key)
        rows = frame.select(
            F.lit(INITIAL_KIND).alias("kind"),
            F.col(f"`{key}`").cast(key_type).alias(key_col),
            F.struct(*(F.col(f"`{c}`") for c in frame.columns)).alias(initial_column(i)),
        )
        stream = stream.unionByName(rows, allowMissingColumns=True)
    return stream


def has_initial_state(fragment: Any) -> bool:
    return any(op.initial_state is not None for op in processors_of(fragment.operator))
