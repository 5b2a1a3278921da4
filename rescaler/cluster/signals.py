"""What the cluster app tells the apps above it, without importing them.

``epoch_recorded`` is sent once per epoch report of the runner
(``rescaler.cluster.services.epoch_record``), after the transaction that stored it, with
``pipeline`` (the ``Pipeline``) and ``epoch``. It is sent robustly: a failing receiver is
logged, never raised into the runner, whose epochs must not wait for the apps above. The
autoscaler queues its evaluation of the pipeline from it.
"""

from django.dispatch import Signal

epoch_recorded = Signal()
