"""Who may do what: reading needs a login; starting or cancelling a rescale needs a permission."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

RESCALE_PERMISSION = "operations.rescale"
# an admin's (docs/console.md, "Roles"): in auto mode a policy starts rescales by itself
POLICY_PERMISSION = "autoscaling.change_autoscalingpolicy"


class CanRescale(BasePermission):
    """Unsafe methods (POST) need ``operations.rescale``; reads pass through.

    Used after ``IsAuthenticated``, so an anonymous caller gets 401 before this is asked.
    """

    permission = RESCALE_PERMISSION  # what an unsafe method needs (a subclass names another)
    message = f"starting or cancelling a rescale needs the {RESCALE_PERMISSION} permission"
    code = "permission_denied"

    def has_permission(self, request: Request, view: Any) -> bool:
        if request.method in SAFE_METHODS:
            return True
        return bool(request.user and request.user.has_perm(self.permission))
