"""The vectorised epoch: a built-in operator applied to a PU's whole slice on arrays.

The per-key path (``workers.epoch.apply.apply_records``) calls ``KeyedOperator.update`` once per key
with Python tuples, and decodes and encodes every state with msgpack: per key and per record
Python work that dominates an epoch. Here the slice is grouped with Arrow, the states of all its
keys are read in one ``StateStore.get_column`` and decoded from their buffers with numpy (the
built-in encodings are laid out for that, see ``workers.operators``), the operator is applied on
arrays, and the new states and the outputs come back as Arrow columns for one
``StateStore.commit_columns``.

The results are those of the per-key path, bit for bit: the same states, the same outputs in the
same order (``tests/unit/workers/test_vectorised.py`` checks it property by property). Only the
built-in classes themselves are vectorised (a subclass may change ``update``, so it keeps the
per-key path), and a batch whose column types or value ranges the array code would treat
differently from Python (nulls, non-integer counts, int64 overflow) also takes the per-key path.
Stored values in an older encoding are decoded one by one (and rewritten in the current one).

The kernels: ``numeric`` (Count, Sum, Min, Max, Mean, PageStats) and ``activity``
(UserActivity); ``batch`` holds what they take and give.
"""

from __future__ import annotations

import pyarrow as pa

from workers.operators.base import KeyedOperator
from workers.vectorised import activity, numeric
from workers.vectorised.batch import BatchResult, Kernel, Reader

__all__ = ["BatchResult", "Reader", "apply_batch"]

# Exact classes only: a subclass may override update() and must keep the per-key path.
_KERNELS: dict[type[KeyedOperator], Kernel] = {**numeric.KERNELS, **activity.KERNELS}


def apply_batch(operator: KeyedOperator, records: pa.Table, read: Reader) -> BatchResult | None:
    """Fold ``records`` (key, seq, vnode, the operator's columns; or partial rows,
    ``workers.partials``) on arrays; nothing is written.

    Returns None when this operator or this batch must take the per-key path.
    """
    kernel = _KERNELS.get(type(operator))
    if kernel is None or records.num_rows == 0:
        return None
    return kernel(operator, records, read)
