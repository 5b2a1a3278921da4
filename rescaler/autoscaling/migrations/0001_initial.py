"""The autoscaling policy of each pipeline (issue 47)."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("cluster", "0007_pipeline_archived_at"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="AutoscalingPolicy",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "mode",
                    models.CharField(
                        choices=[("off", "off"), ("recommend", "recommend"), ("auto", "auto")],
                        default="off",
                        max_length=16,
                    ),
                ),
                ("target_utilisation", models.FloatField(default=0.7)),
                ("min_parallel_units", models.PositiveIntegerField(default=1)),
                ("max_parallel_units", models.PositiveIntegerField(default=64)),
                ("max_step", models.PositiveIntegerField(default=8)),
                ("stabilisation_s", models.FloatField(default=120.0)),
                ("cooldown_s", models.FloatField(default=300.0)),
                ("catch_up_s", models.FloatField(default=300.0)),
                ("scale_in_blackout_hours", models.JSONField(blank=True, default=list)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "pipeline",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="autoscaling_policy",
                        to="cluster.pipeline",
                    ),
                ),
                (
                    "updated_by",
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
                "verbose_name_plural": "autoscaling policies",
            },
        ),
    ]
