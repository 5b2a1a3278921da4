"""One name per concept (docs/api.md, "Changes in this release"): the renames of the protocol's
vocabulary, kept as renames so that a database's rows survive them."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("operations", "0001_initial"),
    ]

    operations = [
        migrations.RenameField("rescaleoperation", "uid", "operation_id"),
        migrations.RenameField("rescalestep", "number", "step"),
    ]
