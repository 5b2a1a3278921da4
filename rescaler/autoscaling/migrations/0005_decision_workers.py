"""A decision's ask of the worker provider (how many workers, when), the workers its scale-in
released, and the outcomes awaiting_workers and failed."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('autoscaling', '0004_policy_evaluation_queued_at'),
    ]

    operations = [
        migrations.AddField(
            model_name='autoscalingdecision',
            name='workers_released',
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AddField(
            model_name='autoscalingdecision',
            name='workers_requested',
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='autoscalingdecision',
            name='workers_requested_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name='autoscalingdecision',
            name='outcome',
            field=models.CharField(choices=[('none', 'None'), ('proposed', 'Proposed'), ('applied', 'Applied'), ('started', 'Started'), ('superseded', 'Superseded'), ('refused', 'Refused'), ('awaiting_workers', 'Awaiting Workers'), ('failed', 'Failed')], default='proposed', max_length=16),
        ),
    ]
