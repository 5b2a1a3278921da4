from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("cluster", "0006_pipeline_start")]

    operations = [
        migrations.AddField(
            model_name="pipeline",
            name="archived_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
