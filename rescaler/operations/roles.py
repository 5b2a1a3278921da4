"""The console's roles, shipped as Django groups (docs/console.md, "Roles"): what each may do,
said once here, created by ``migrations/0013_roles.py`` and kept by ``roles_ensure``.

- ``viewer`` reads: every page and every ``GET`` of the API (those need only a sign-in), and
  the control plane's models in the admin site (their ``view_`` permissions; the admin shows
  them read-only to everyone, ``rescaler/audit/admin.py``).
- ``operator`` is a viewer who also acts: a rescale (a dry run included), a cancel, a
  snapshot, a worker's add, cordon, uncordon, drain and notice, a pipeline's archive. Each asks
  for the one permission ``operations.rescale`` (``RESCALE_PERMISSION``).
- ``admin`` is an operator who also manages users, their groups and their API tokens in the
  admin site (which needs the user's staff status too: ``role_grant`` sets it), and changes
  a pipeline's autoscaling policy (``autoscaling.change_autoscalingpolicy``: in ``auto`` mode a
  policy starts rescales by itself); ``autoscaling/migrations/0002_roles.py`` grants it.

A role holds every permission of the roles before it; the groups' other permissions (given by
hand in the admin) are kept.
"""

from __future__ import annotations

from typing import Any

from django.apps import apps as global_apps
from django.contrib.auth.management import create_permissions
from django.contrib.auth.models import Group
from django.db import DEFAULT_DB_ALIAS
from django.db.models import Q

VIEWER = "viewer"
OPERATOR = "operator"
ADMIN = "admin"
ROLES = (VIEWER, OPERATOR, ADMIN)

# the apps of the control plane's models, whose view permissions a viewer has
CONTROL_PLANE_APPS = ("audit", "autoscaling", "cluster", "operations")
# what each role adds to the one before it: ("app_label", "codename"); a codename "view_*"
# (any model's view permission of the app), "*" every permission of the app
GRANTS: dict[str, tuple[tuple[str, str], ...]] = {
    VIEWER: tuple((app, "view_*") for app in CONTROL_PLANE_APPS),
    OPERATOR: (("operations", "rescale"),),
    ADMIN: (("auth", "*"), ("authtoken", "*"), ("autoscaling", "change_autoscalingpolicy")),
}


def role_permissions(role: str) -> tuple[tuple[str, str], ...]:
    """The grants of ``role`` and of every role before it."""
    upto = ROLES[: ROLES.index(role) + 1]
    return tuple(grant for r in upto for grant in GRANTS[r])


def _matching(grants: tuple[tuple[str, str], ...]) -> Q:
    q = Q(pk__in=[])
    for app, codename in grants:
        if codename == "*":
            q |= Q(content_type__app_label=app)
        elif codename.endswith("*"):
            q |= Q(content_type__app_label=app, codename__startswith=codename[:-1])
        else:
            q |= Q(content_type__app_label=app, codename=codename)
    return q


def roles_ensure(apps: Any = global_apps, using: str = DEFAULT_DB_ALIAS) -> dict[str, Any]:
    """The three groups with (at least) their permissions; idempotent. ``apps``: a migration's
    state of the models, else the project's. The permissions are made first where they do not
    exist yet: in a migration, Django makes them only once every migration has run."""
    apps_named = {app for role in ROLES for app, _ in GRANTS[role]}
    for app_config in global_apps.get_app_configs():
        if app_config.label in apps_named:
            create_permissions(app_config, verbosity=0, using=using, apps=apps)
    group_model = apps.get_model("auth", "Group")
    permission_model = apps.get_model("auth", "Permission")
    groups = {}
    for role in ROLES:
        group, _ = group_model.objects.using(using).get_or_create(name=role)
        wanted = permission_model.objects.using(using).filter(_matching(role_permissions(role)))
        group.permissions.add(*wanted)
        groups[role] = group
    return groups


def role_grant(*, user: Any, role: str) -> None:
    """Give ``user`` the role: its group, and for an admin the staff status the admin site
    asks for. The user's other groups are kept."""
    if role not in ROLES:
        raise ValueError(f"no role {role!r}: one of {', '.join(ROLES)}")
    group = Group.objects.filter(name=role).first() or roles_ensure()[role]
    user.groups.add(group)
    if role == ADMIN and not user.is_staff:
        user.is_staff = True
        user.save(update_fields=["is_staff"])
