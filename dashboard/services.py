"""Services of the dashboard that are not about the cluster."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from django.contrib.auth import get_user_model
from django.db import transaction


@transaction.atomic
def admin_user_ensure(*, username: str, password_file: Path) -> str | None:
    """Create the first superuser with a generated password, if there is no superuser yet.

    The password is written to ``password_file`` (readable by its owner only) and returned;
    None means a superuser already existed and nothing changed.
    """
    user_model = get_user_model()
    if user_model.objects.filter(is_superuser=True).exists():
        return None
    password = secrets.token_urlsafe(12)
    user_model.objects.create_superuser(username=username, email="", password=password)
    password_file.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(password_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(password + "\n")
    return password
