"""When the pipeline's epochs last queued an evaluation of the autoscaler (the debounce)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('autoscaling', '0003_decisions'),
    ]

    operations = [
        migrations.AddField(
            model_name='autoscalingpolicy',
            name='evaluation_queued_at',
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
    ]
