"""Elastic workers (docs/elastic-workers.md): a worker's status and executor, its PUs' status and
where their tasks really ran (the locality counters)."""

from django.db import migrations, models

WORKER_STATUSES = [
    ("active", "active"),
    ("cordoned", "cordoned"),
    ("draining", "draining"),
    ("decommissioning", "decommissioning"),
    ("removed", "removed"),
    ("lost", "lost"),
]


class Migration(migrations.Migration):
    dependencies = [
        ("cluster", "0002_vnodemapping_mapping"),
    ]

    operations = [
        migrations.AddField(
            model_name="worker",
            name="status",
            field=models.CharField(choices=WORKER_STATUSES, default="active", max_length=16),
        ),
        migrations.AddField(
            model_name="worker",
            name="status_reason",
            field=models.CharField(blank=True, max_length=600),
        ),
        migrations.AddField(
            model_name="worker",
            name="executor_id",
            field=models.CharField(blank=True, max_length=64),
        ),
        migrations.AddField(
            model_name="worker",
            name="host",
            field=models.CharField(blank=True, max_length=255),
        ),
        migrations.AddField(
            model_name="worker",
            name="cores",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="worker",
            name="bootstrapped_epoch",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="worker",
            name="joined_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="worker",
            name="left_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="worker",
            name="drain_operation_id",
            field=models.CharField(blank=True, max_length=32),
        ),
        migrations.AddIndex(
            model_name="worker",
            index=models.Index(fields=["pipeline", "status"], name="worker_pipeline_status"),
        ),
        migrations.AddField(
            model_name="parallelunit",
            name="status",
            field=models.CharField(
                choices=[("active", "Active"), ("lost", "Lost"), ("removed", "Removed")],
                default="active",
                max_length=16,
            ),
        ),
        migrations.AddField(
            model_name="parallelunit",
            name="last_executor",
            field=models.CharField(blank=True, max_length=64),
        ),
        migrations.AddField(
            model_name="parallelunit",
            name="last_host",
            field=models.CharField(blank=True, max_length=255),
        ),
        migrations.AddField(
            model_name="parallelunit",
            name="tasks_total",
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="parallelunit",
            name="tasks_home",
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="parallelunit",
            name="counted_epoch",
            field=models.BigIntegerField(default=-1),
        ),
    ]
