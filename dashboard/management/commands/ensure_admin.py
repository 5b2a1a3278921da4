"""``python manage.py ensure_admin``: the first admin user, for scripts/dev."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from dashboard.services import admin_user_ensure


class Command(BaseCommand):
    help = "Create a superuser with a generated password if there is none (idempotent)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="admin")
        parser.add_argument(
            "--password-file", type=Path, default=settings.BASE_DIR / "var" / "admin-password.txt"
        )

    def handle(self, *args: Any, username: str, password_file: Path, **options: Any) -> None:
        password = admin_user_ensure(username=username, password_file=password_file)
        if password is not None:
            self.stdout.write(
                f"Created admin user '{username}'; password saved to {password_file}."
            )
        else:
            self.stdout.write(
                f"An admin user already exists (its password, if scripts/dev made it, is in "
                f"{password_file}; change it with `python manage.py changepassword {username}`)."
            )
