"""The rescale protocol's data-side: requests, plans, steps, and their execution at epoch barriers.

* :mod:`request` — the reschedule request and its validation (every refusal names its reason);
* :mod:`planner` — which vnodes move where (as few as possible, every PU within one of the mean);
* :mod:`operation` — an operation's durable state: steps and their phases;
* :mod:`executor` — the runner's side: epoch-aligned ICADD and stop-start;
* :mod:`orchestrator` — issuing steps paced by the granularity, cancel, time-outs.
"""
