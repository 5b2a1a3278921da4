"""Recording a change: every mutation appends one event naming its actor."""

from __future__ import annotations

from typing import Any

from rescaler.audit.models import AuditEvent
from rescaler.bulk import rows_insert


def _event(
    *,
    actor: Any = None,
    actor_name: str = "",
    action: str,
    obj: tuple[str, str],
    before: Any = None,
    after: Any = None,
) -> AuditEvent:
    name = actor_name or (actor.get_username() if actor is not None else "system")
    return AuditEvent(
        actor=actor if actor is not None and actor.is_authenticated else None,
        actor_name=name,
        action=action,
        object_type=obj[0],
        object_id=obj[1],
        before=before,
        after=after,
    )


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
    event = _event(
        actor=actor, actor_name=actor_name, action=action, obj=obj, before=before, after=after
    )
    event.save()
    return event


def audit_record_many(changes: list[dict[str, Any]]) -> list[AuditEvent]:
    """Append several events in one INSERT, in order; each of ``changes`` holds the arguments
    of ``audit_record``. For a writer of many changes at once (a barrier where hundreds of
    steps change phase), where one INSERT per event is most of its time."""
    return rows_insert([_event(**change) for change in changes])
