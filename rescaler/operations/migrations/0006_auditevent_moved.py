"""The audit events now belong to the audit app (``audit.0001_initial``): the model leaves this
app's state only; its table, ``operations_auditevent``, and its rows stay."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("operations", "0005_operation_plan"),
        ("audit", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="AuditEvent")],
            database_operations=[],
        ),
    ]
