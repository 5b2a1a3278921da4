"""``python manage.py role_grant <username> <role>``: a user becomes a viewer, an operator or
an admin (docs/console.md, "Roles")."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from rescaler.operations.roles import ADMIN, ROLES, role_grant


class Command(BaseCommand):
    help = "Add a user to the group of a role (an admin also gets the staff status)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("role", choices=ROLES)

    def handle(self, *args: Any, username: str, role: str, **options: Any) -> None:
        try:
            user = get_user_model().objects.get_by_natural_key(username)
        except get_user_model().DoesNotExist:
            raise CommandError(f"no user named {username!r}") from None
        role_grant(user=user, role=role)
        staff = " (and staff, for the admin site)" if role == ADMIN else ""
        self.stdout.write(f"{username} is now in the group {role!r}{staff}.")
