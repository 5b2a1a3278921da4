"""Keyed stateful operators: previous state + the key's records → new state + outputs.

An operator sees, per epoch and per key, the key's records of that epoch in source order (or, if
it defines :meth:`KeyedOperator.combine` or declares ``aggregates``, one pre-aggregated row per
key; declared aggregates can also be folded in Spark, ``workers.partials``), and
returns the key's new state and the rows it emits downstream. State is serialized as one version
byte followed by msgpack, so it is compact and a future encoding can read an old one.

The built-in operators also run vectorised (``workers.vectorised``: a whole epoch slice on
arrays), so their encodings are laid out for arrays: the numeric ones write msgpack's fixed-width
forms (:class:`FixedForm`, still version 1: any msgpack reader reads them), ``UserActivity``
writes a columnar layout (version 2; version 1 values are read and rewritten on their next update).

This package is the public import path; its modules are

* ``base``: the contract (:class:`KeyedOperator`, records and outputs, the errors) and the
  encodings (:class:`FixedForm`);
* ``aggregates``: the decomposable built-ins (``Count``, ``Sum``, ``Min``, ``Max``, ``Mean``,
  ``PageStats``);
* ``ordered``: the order-sensitive built-ins (``TumblingWindowCount``, ``UserActivity``).

Writing your own operator::

    class LastPage(KeyedOperator):
        name = "last_page"
        columns = ("page",)
        output_fields = (("page", "string"),)

        def update(self, key, state, records):
            last = records[-1][0]           # records: tuples of `columns`, in source order
            return last, [(key, last)]      # new state, outputs (key, *output_fields)

        def to_json(self, state):
            return {"page": state}

State must be msgpack-serializable (None, bool, int, float, str, bytes, list, dict).
"""

from workers.operators.aggregates import Count, Max, Mean, Min, PageStats, Sum, canonical_nan
from workers.operators.base import (
    ARROW_TYPES,
    FixedForm,
    KeyedOperator,
    OperatorError,
    Output,
    Record,
    StateVersionError,
    arrow_type,
    sort_by_seq,
)
from workers.operators.ordered import TumblingWindowCount, UserActivity

__all__ = [
    "ARROW_TYPES",
    "Count",
    "FixedForm",
    "KeyedOperator",
    "Max",
    "Mean",
    "Min",
    "OperatorError",
    "Output",
    "PageStats",
    "Record",
    "StateVersionError",
    "Sum",
    "TumblingWindowCount",
    "UserActivity",
    "arrow_type",
    "canonical_nan",
    "sort_by_seq",
]
