"""The admin role's autoscaling permission (``rescaler/operations/roles.py``): changing a
policy, which in ``auto`` mode starts rescales by itself; the viewer role's view of policies.
The roles' own migration ran before this app's models existed."""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

from rescaler.operations.roles import roles_ensure


def forwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    roles_ensure(apps, using=schema_editor.connection.alias)


class Migration(migrations.Migration):
    dependencies = [
        ("autoscaling", "0001_initial"),
        ("operations", "0013_roles"),
    ]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
