"""Several operators on one key in one fragment: a keyed region (seed 000's multi-operator case,
ICADD's ``add_state``/``take``).

The records are shuffled to their key's PU once; there the first operator folds them, and each
next operator folds the previous one's outputs, which keep the same key, so no second exchange
is needed. Each operator's state lives under its own prefix inside the key's vnode range
(:func:`workers.processor.section_of`), so one vnode export carries every operator's section and
an acquire gives each its own back, with nothing to coordinate between operators.
"""

from __future__ import annotations

import itertools
from typing import Any

from workers.operators.base import KeyedOperator, Output
from workers.processor import ProcessorOperator, UnsupportedProcessor, section_of, user_name
from workers.processor.operator import sink_columns


class Region(KeyedOperator):
    """A chain of StatefulProcessors on one key. ``Region(a, b)``: ``a`` reads the fragment's
    records, ``b`` reads ``a``'s outputs (their ``output_key`` column is the key)."""

    name = "region"
    order_sensitive = True

    def __init__(self, *operators: ProcessorOperator) -> None:
        if len(operators) < 2:
            raise UnsupportedProcessor("a keyed region chains at least two operators")
        self.operators = tuple(operators)
        self.columns = operators[0].columns  # type: ignore[misc]
        self.output_fields = operators[-1].output_fields  # type: ignore[misc]
        self.output_key = operators[-1].output_key
        for before, after in itertools.pairwise(operators):
            both = isinstance(before, ProcessorOperator) and isinstance(after, ProcessorOperator)
            if both and after.key_column is None:
                after.key_column = before.output_key
        self._key_column: str | None = None

    @property
    def key_column(self) -> str | None:
        return self._key_column

    @key_column.setter
    def key_column(self, column: str | None) -> None:
        """The fragment's key column: the first operator's rows carry it."""
        self._key_column = column
        first = self.operators[0]
        if isinstance(first, ProcessorOperator) and first.key_column is None:
            first.key_column = column

    @property
    def time_mode(self) -> str:
        modes = {getattr(op, "time_mode", "none") for op in self.operators}
        return next((m for m in ("eventtime", "processingtime") if m in modes), "none")

    @property
    def labels(self) -> list[str]:
        """One name per operator, as the key finder shows its state: the processor's class."""
        names = [type(getattr(op, "processor", op)).__name__ for op in self.operators]
        return [n if names.count(n) == 1 else f"{i}:{n}" for i, n in enumerate(names)]

    def sections(self) -> list[bytes]:
        return [section_of(i) for i in range(len(self.operators))]

    def inspect(self) -> None:
        for i, op in enumerate(self.operators):
            label = self.labels[i]
            if not isinstance(op, ProcessorOperator):
                raise UnsupportedProcessor(
                    f"region operator {label}: a keyed region chains ProcessorOperators "
                    f"(StatefulProcessors), not {type(op).__name__}"
                )
            try:
                op.inspect()
            except UnsupportedProcessor as exc:
                raise UnsupportedProcessor(f"region operator {label}: {exc}") from exc
            if i:
                before = self.operators[i - 1]
                available = {user_name(wire) for wire, _ in before.output_fields}
                missing = [c for c in op.columns if c not in available]
                if missing:
                    raise UnsupportedProcessor(
                        f"region operator {label} reads {missing}, which operator "
                        f"{self.labels[i - 1]} does not output ({sorted(available)})"
                    )
                if op.time_mode == "eventtime":
                    raise UnsupportedProcessor(
                        f"region operator {label}: only a region's first operator may run in "
                        f"EventTime (it sees the source's event time)"
                    )

    def describe(self) -> str:
        return " → ".join(op.describe() for op in self.operators)

    def sink_table(self, outputs: Any) -> Any:
        """The last operator's outputs, by their own names (``ProcessorOperator.sink_table``)."""
        return sink_columns(outputs, self.output_fields)

    def update(self, key: str, state: Any, records: Any) -> tuple[Any, list[Output]]:
        raise NotImplementedError("a region folds through workers.epoch's processor path")
