"""The console's roles as groups: viewer, operator and admin, with their permissions
(``rescaler/operations/roles.py`` says what each may do). Idempotent: a group that exists is
given what it lacks and keeps the rest. Backwards, the three groups go (their users stay)."""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

from rescaler.operations.roles import ROLES, roles_ensure


def forwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    roles_ensure(apps, using=schema_editor.connection.alias)


def backwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    group = apps.get_model("auth", "Group")
    group.objects.using(schema_editor.connection.alias).filter(name__in=ROLES).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("authtoken", "0004_alter_tokenproxy_options"),
        ("audit", "0001_initial"),
        ("cluster", "0007_pipeline_archived_at"),
        ("operations", "0012_step_key_range"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
