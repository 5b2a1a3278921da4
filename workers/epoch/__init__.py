"""One stateful fragment's work for one epoch on one parallel unit: the code inside mapInArrow.

Rows reaching a task carry a ``kind``: ``rec`` rows are this fragment's input records (already
routed here by vnode in Spark SQL); every other kind (``stat`` reports of upstream tasks,
``malformed`` source lines) passes through untouched so that one Spark job per epoch carries
everything back to the driver in a single small collect.

A task opens its PU's store, folds the epoch's records into it and commits the new states, the
epoch's outputs and the applied-epoch marker in one atomic write. If the store has already
applied this epoch (Spark re-ran it after a failure), it changes nothing and re-emits the outputs
it recorded the first time, so downstream fragments and the sink see exactly the same data.

The package, from the bottom up: ``spec`` (what a task is given), ``outputs`` (the rows it
emits), ``apply`` (the per-key fold), ``fold`` (an epoch's fold and its one commit), ``held``
(hold queues and acquires), ``sink`` (the terminal fragment's sink write), ``location`` (where a
task runs) and ``task`` (one PU's slice of one epoch, what ``mapInArrow`` calls).
"""

from workers.epoch.location import task_location
from workers.epoch.outputs import empty_outputs
from workers.epoch.spec import RoutingError, TaskSpec, output_schema
from workers.epoch.task import make_task, run_task

__all__ = [
    "RoutingError",
    "TaskSpec",
    "empty_outputs",
    "make_task",
    "output_schema",
    "run_task",
    "task_location",
]
