"""The models and the migrations agree: a model change without its migration fails here, not at
a user's first ``migrate``."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_every_model_change_has_its_migration() -> None:
    out = StringIO()
    try:
        call_command("makemigrations", "--check", "--dry-run", stdout=out, stderr=out)
    except SystemExit:  # --check exits 1 when a migration is missing
        pytest.fail(
            f"a model change has no migration (manage.py makemigrations):\n{out.getvalue()}"
        )
