"""An operation's ``progress`` keeps the runner's report without its steps: the steps are the
``RescaleStep`` rows, which every report already updated. Reports stored before carry their
steps a second time; they are dropped here (the rows stay as they are)."""

from typing import Any

from django.db import migrations


def drop_steps(apps: Any, schema_editor: Any) -> None:
    RescaleOperation = apps.get_model("operations", "RescaleOperation")
    stored = RescaleOperation.objects.filter(progress__has_key="steps")
    for op in stored.only("pk", "progress").iterator(chunk_size=100):
        progress = {k: v for k, v in op.progress.items() if k != "steps"}
        RescaleOperation.objects.filter(pk=op.pk).update(progress=progress)


class Migration(migrations.Migration):
    dependencies = [
        ("operations", "0006_auditevent_moved"),
    ]

    # backwards: nothing to put back (a report is rebuilt from the rows when read)
    operations = [migrations.RunPython(drop_steps, migrations.RunPython.noop)]
