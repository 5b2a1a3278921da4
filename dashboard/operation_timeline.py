"""The operation page's timeline: the operation's milestones and its last other audit events,
for the page and for a live delta's new events."""

from __future__ import annotations

from dataclasses import dataclass

from dashboard.api.selectors.operations import operation_events
from rescaler.audit.models import AuditEvent
from rescaler.operations.models import RescaleOperation

# the timeline shows the operation's milestones (requested, started, cancel requested, its end)
# and its last other events: a 16,384-step operation records about 82,000 (each step's phases,
# each step command), which no page can show nor any reader follow; every one is in the
# operation document (``events``) and the audit log
TIMELINE_SHOWN = 100
MILESTONE = "operation."  # the action's prefix of an operation's own events


def is_milestone(event: AuditEvent) -> bool:
    return event.action.startswith(MILESTONE)


@dataclass(frozen=True)
class Timeline:
    """The events a page's timeline shows (oldest first) and whether earlier ones exist."""

    events: list[AuditEvent]
    earlier: bool


def timeline(op: RescaleOperation) -> Timeline:
    """The operation's milestones and its last ``TIMELINE_SHOWN`` other events, oldest first."""
    events = operation_events(operation=op)
    milestones = list(events.filter(action__startswith=MILESTONE))
    last = list(events.exclude(action__startswith=MILESTONE).reverse()[: TIMELINE_SHOWN + 1])
    shown = sorted([*milestones, *last[:TIMELINE_SHOWN]], key=lambda e: (e.at, e.pk))
    return Timeline(shown, earlier=len(last) > TIMELINE_SHOWN)


def timeline_tail(events: list[AuditEvent]) -> list[AuditEvent]:
    """Of a delta's new events (oldest first), those the timeline shows: its milestones and its
    last ``TIMELINE_SHOWN`` others; the page keeps as many in view (app.css)."""
    others = [e for e in events if not is_milestone(e)][-TIMELINE_SHOWN:]
    kept = {id(e) for e in others}
    return [e for e in events if is_milestone(e) or id(e) in kept]
