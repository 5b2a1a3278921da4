"""The models and their migrations agree: a model changed without its migration fails here,
not on a deployment's ``migrate``."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_no_model_change_lacks_its_migration() -> None:
    out = io.StringIO()
    try:
        call_command("makemigrations", "--check", "--dry-run", stdout=out, stderr=out)
    except SystemExit:  # --check exits 1 when a migration is missing
        pytest.fail(f"models changed without a migration:\n{out.getvalue()}")
