"""What the operations app tells the apps above it, without importing them.

``operation_finished`` is sent where every operation reaches its final status
(``rescaler.operations.drive._finalize``), inside the transaction that writes that status, with
``operation`` (the ``RescaleOperation``, final). A receiver's writes commit or roll back with the
status; an exception raised by a receiver rolls back both, and the drive loop retries.
Receivers connect in their app's ``AppConfig.ready`` (the drains of ``rescaler.runner``).
"""

from django.dispatch import Signal

operation_finished = Signal()
