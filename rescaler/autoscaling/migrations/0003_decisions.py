"""The history of the autoscaler's decisions (AutoscalingDecision, issue 47)."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('autoscaling', '0002_roles'),
        ('cluster', '0007_pipeline_archived_at'),
        ('operations', '0013_roles'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='AutoscalingDecision',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('decided_at', models.DateTimeField()),
                ('mode', models.CharField(choices=[('off', 'off'), ('recommend', 'recommend'), ('auto', 'auto')], max_length=16)),
                ('kind', models.CharField(choices=[('scale', 'scale'), ('rebalance', 'rebalance'), ('no_change', 'no_change')], max_length=16)),
                ('reasons', models.JSONField(default=list)),
                ('fragments', models.JSONField(default=list)),
                ('missing_signals', models.JSONField(default=dict)),
                ('request', models.JSONField(blank=True, null=True)),
                ('plan_id', models.CharField(blank=True, max_length=32)),
                ('outcome', models.CharField(choices=[('none', 'None'), ('proposed', 'Proposed'), ('applied', 'Applied'), ('started', 'Started'), ('superseded', 'Superseded'), ('refused', 'Refused')], default='proposed', max_length=16)),
                ('outcome_reason', models.TextField(blank=True)),
                ('error_code', models.CharField(blank=True, max_length=64)),
                ('outcome_at', models.DateTimeField(blank=True, null=True)),
                ('applied_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('operation', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='autoscaling_decisions', to='operations.rescaleoperation')),
                ('pipeline', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='autoscaling_decisions', to='cluster.pipeline')),
            ],
            options={
                'ordering': ['-decided_at', '-id'],
                'indexes': [models.Index(fields=['pipeline', '-decided_at'], name='decision_pipeline_time')],
            },
        ),
    ]
