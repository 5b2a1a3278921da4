"""Recording a change: every mutation appends one event naming its actor."""

from __future__ import annotations

from typing import Any

from rescaler.audit.models import AuditEvent


def audit_record(
    *,
    actor: Any = None,
    actor_name: str = "",
    action: str,
    obj: tuple[str, str],
    before: Any = None,
    after: Any = None,
) -> AuditEvent:
    """Append one event; ``actor`` is a user, else ``actor_name`` says which component acted."""
    name = actor_name or (actor.get_username() if actor is not None else "system")
    return AuditEvent.objects.create(
        actor=actor if actor is not None and actor.is_authenticated else None,
        actor_name=name,
        action=action,
        object_type=obj[0],
        object_id=obj[1],
        before=before,
        after=after,
    )
