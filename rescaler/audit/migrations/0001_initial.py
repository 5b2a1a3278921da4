"""The audit events move from the operations app to their own: the model only.

The table ``operations_auditevent`` stays where it is, with every row (``db_table``); this
migration adopts it in the migration state and changes nothing in the database but the content
type's app label, so the admin's log entries and any permission granted on audit events follow.
``operations.0006_auditevent_moved`` then drops the model from the operations app's state.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps


def _relabel(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor, old: str, new: str) -> None:
    content_type = apps.get_model("contenttypes", "ContentType")
    types = content_type.objects.using(schema_editor.connection.alias)
    if not types.filter(app_label=new, model="auditevent").exists():
        types.filter(app_label=old, model="auditevent").update(app_label=new)


def forwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    _relabel(apps, schema_editor, "operations", "audit")


def backwards(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    _relabel(apps, schema_editor, "audit", "operations")


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("operations", "0005_operation_plan"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="AuditEvent",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("actor_name", models.CharField(max_length=150)),
                        ("action", models.CharField(max_length=64)),
                        ("object_type", models.CharField(max_length=64)),
                        ("object_id", models.CharField(max_length=64)),
                        ("before", models.JSONField(blank=True, null=True)),
                        ("after", models.JSONField(blank=True, null=True)),
                        ("at", models.DateTimeField(auto_now_add=True, db_index=True)),
                        (
                            "actor",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "db_table": "operations_auditevent",
                        "ordering": ["-at", "-id"],
                        "indexes": [
                            models.Index(
                                fields=["object_type", "object_id"],
                                name="operations__object__6edc99_idx",
                            )
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(forwards, backwards),
    ]
