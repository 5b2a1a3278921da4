"""The vnode → PU list is ``mapping`` everywhere (docs/glossary.md)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("cluster", "0001_initial"),
    ]

    operations = [
        migrations.RenameField("vnodemapping", "pus", "mapping"),
    ]
