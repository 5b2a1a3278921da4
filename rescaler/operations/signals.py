"""What the operations app tells the apps above it, without importing them.

``operation_finished`` is sent where every operation reaches its final status
(``rescaler.operations.drive._finalize``), inside the transaction that writes that status, with
``operation`` (the ``RescaleOperation``, final). A receiver's writes commit or roll back with the
status; an exception raised by a receiver rolls back both, and the drive loop retries.
Receivers connect in their app's ``AppConfig.ready`` (the drains of ``rescaler.runner``).

``operation_requested`` is sent where every operation is created
(``rescaler.operations.requests._operation_create``), inside the transaction that creates it and
robustly (a failing receiver is logged; it must do its writes in a savepoint of its own), with
``operation`` (the new ``RescaleOperation``), ``plan_id`` (the binding dry run it starts, or
None) and ``actor_name`` (the component that asked, when no user did). The autoscaler links it
to the decision it carries out.

``operation_progressed`` is sent once per progress report of an operation
(``rescaler.operations.progress.operation_progress_record``), after the transaction that
recorded it, with ``operation`` (the ``RescaleOperation`` as recorded), ``version`` (its new
``progress_version``), ``columns`` (the names of its columns the report changed), ``steps``
(the ``RescaleStep`` rows whose figures changed, by step) and ``events`` (the ``AuditEvent``
rows it appended). The dashboard publishes them as the operation's delta event; it is sent
robustly (a failing receiver is logged, never raised into the runner).
"""

from django.dispatch import Signal

operation_finished = Signal()
operation_requested = Signal()
operation_progressed = Signal()
