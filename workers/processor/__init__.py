"""Spark's own ``StatefulProcessor`` as a Rescaler operator: the same class runs under Spark's
``transformWithState`` and under Rescaler, unchanged.

Rescaler gives the processor a handle of its own (:class:`ProcessorHandle`) whose state lives in
the PU's store under the key's vnode, so every state variable and timer of a key moves with its
vnode in a live rescale, is exported by a stop-start and is committed atomically with the epoch:

* **one entry per key**: every value, list and map state variable of the key, with each value's
  TTL expiry, and the key's timers, in one msgpack value (``KeyState``);
* **one timer-index entry per timer** (``vnode | 0xff | expiry | key``): a key's user part never
  starts with 0xff (UTF-8 has no such byte), and the index sorts by expiry inside the vnode's
  range, so the due timers of a vnode are one short range scan and move with the vnode.

Time follows Spark's rules, from the epoch's :class:`EpochClock` (recorded in the epoch plan, so a
re-run sees the same times):

* processing time is the epoch's batch timestamp; a processing-time timer fires once the batch
  timestamp reaches it, after the epoch's input rows;
* event time: the watermark of an epoch is the largest event time of all earlier epochs minus
  the pipeline's delay (never going back); rows at or below the previous epoch's watermark are
  late and dropped (Spark's watermark for late events); event-time timers up to the watermark
  fire after the epoch's rows, as in a Spark batch (an empty epoch is Spark's no-data batch);
* a TTL counts in processing time: a value updated at batch time *t* is gone at ``t + ttl``.

State and output values are Spark's: every type, read and kept as Spark's Python client and
JVM keep them (``values``), converted in and out as Spark's workers convert them (``run``). What
Spark offers and Rescaler does not is refused when the pipeline starts (:func:`inspect`), never
ignored (docs/pipelines.md, "Compatibility with transformWithState", lists every part of the API
and what Rescaler does with it).
"""

from workers.operators.base import Record
from workers.pipeline.placement import EpochClock
from workers.processor.layout import parse_timer_key, section_of, timer_key, timer_range
from workers.processor.operator import ProcessorOperator
from workers.processor.run import ProcessorRun, Segment, max_event_ms
from workers.processor.schema import UnsupportedProcessor, user_name, wire_name
from workers.processor.state import ProcessorHandle

__all__ = [
    "EpochClock",
    "ProcessorHandle",
    "ProcessorOperator",
    "ProcessorRun",
    "Record",
    "Segment",
    "UnsupportedProcessor",
    "max_event_ms",
    "parse_timer_key",
    "section_of",
    "timer_key",
    "timer_range",
    "user_name",
    "wire_name",
]
