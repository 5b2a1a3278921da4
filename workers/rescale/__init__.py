"""The rescale protocol's data-side: requests, plans, steps, and their execution at epoch barriers.

* :mod:`protocol` — the vocabulary: phases, statuses, strategies, command kinds as enums, and
  the request, plan, step, begin payload and progress as typed records;
* :mod:`request` — validation of a request against the cluster (every refusal names its reason);
* :mod:`planner` — which vnodes move where (as few as possible, every PU within one of the mean);
* :mod:`operation` — an operation's durable state: steps and their phases;
* :mod:`executor` — the runner's side, composing :mod:`ledger` (the operations, their lock and
  progress), :mod:`commands`, :mod:`live` (epoch-aligned ICADD at the barrier), :mod:`exports`
  and :mod:`stop_start`;
* :mod:`orchestrator` — issuing steps paced by the granularity, cancel, time-outs.
"""
