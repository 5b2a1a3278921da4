"""Websocket consumers: they only move events from channel-layer groups to browsers.

Every event type is one of ``workers.rescale.protocol.Event`` (the one list) and every consumer
handles all of them: Channels closes a socket whose consumer lacks the handler of an event it
receives, so a missing one would drop every open page at each rescale. An event goes out as
``{"type": "<event>", **payload}``; ``rescaler.events.publish`` adds ``published_at`` (unix time)
so a page can tell how late it learns things.

Connection policy: the dashboard needs a login, and so do its websockets. An anonymous
connection is refused at the handshake (the close before accept becomes HTTP 403), so the
cluster's live figures are never shown to a visitor who has not signed in. A path that names
nothing is refused the same way, with its own close code, never with a server error: an
operation's socket only for an operation that exists, so a signed-in client cannot listen on
groups of ids it guesses before they are used.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.utils.html import format_html

from dashboard.delta_counts import keep_planned_placements
from dashboard.live import PAGE_CHANGES, StepRanges, operation_page_delta, parse_step_ranges
from rescaler.events import CLUSTER_GROUP, operation_group
from rescaler.operations.models import RescaleOperation
from rescaler.operations.selectors import operation_exists
from workers.rescale.protocol import Event

# Application close codes (4000-4999), shown to the client.
CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404
OPERATION_ID = re.compile(r"[0-9A-Za-z_-]{1,32}")


def _forwarder(event_type: Event) -> Any:
    async def forward(self: EventConsumer, event: dict[str, Any]) -> None:
        payload = {k: v for k, v in event.get("payload", {}).items() if k != PAGE_CHANGES}
        await self.send_json({"type": event_type.value, **payload})

    forward.__doc__ = f"``{event_type.value}``: forwarded to the browser as it is."
    return forward


class EventConsumer(AsyncJsonWebsocketConsumer):
    """Joins the group ``group_name()`` names once the user is signed in; forwards every event."""

    joined: str | None = None

    async def group_name(self) -> str | None:
        """The group to join; None refuses the connection as not found."""
        raise NotImplementedError

    async def connect(self) -> None:
        self.joined = None
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        group = await self.group_name()
        if group is None:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        await self.channel_layer.group_add(group, self.channel_name)
        self.joined = group
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if self.joined:
            await self.channel_layer.group_discard(self.joined, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        """Clients only listen; anything they send is ignored."""


# one handler per event type, named the way Channels looks it up ("a.b" -> "a_b")
for _event in Event:
    setattr(EventConsumer, _event.value.replace(".", "_"), _forwarder(_event))


class ClusterConsumer(EventConsumer):
    """``/ws/cluster/``: the whole cluster's events (epochs, operations' requests and ends)."""

    async def group_name(self) -> str | None:
        return CLUSTER_GROUP


# what the operation page's socket sends: the state of the connection, and the order to re-read
# the page's live part (an element swapped in by id, whose load makes htmx GET the page again)
LIVE = '<span id="live-state" class="live" hx-swap-oob="true">live</span>'
RESYNC = (
    '<div id="live-resync" hx-swap-oob="true" hx-get="" hx-trigger="load" '
    'hx-target="#operation-live" hx-swap="outerHTML" hidden></div>'
)


class ClusterPageConsumer(ClusterConsumer):
    """``/ws/cluster/page/``: the cluster page's socket (htmx's websocket extension). It says the
    page is live, then each event as one hidden element swapped in by id (``#cluster-event``),
    after which the page re-reads its live part and the charts add an epoch; JSON clients use
    ``/ws/cluster/``."""

    async def connect(self) -> None:
        await super().connect()
        if self.joined:
            await self.send(text_data=LIVE)

    async def as_element(self, event: dict[str, Any]) -> None:
        await self.send(
            text_data=format_html(
                '<div id="cluster-event" hx-swap-oob="true" hidden data-type="{}" '
                'data-payload="{}"></div>',
                event.get("type", ""),
                json.dumps(event.get("payload", {}), default=str),
            )
        )


for _event in Event:
    setattr(ClusterPageConsumer, _event.value.replace(".", "_"), ClusterPageConsumer.as_element)


class OperationConsumer(EventConsumer):
    """``/ws/operations/<operation_id>/``: one operation's progress, phase by phase."""

    async def group_name(self) -> str | None:
        operation_id = str(self.scope["url_route"]["kwargs"].get("operation_id", ""))
        if not OPERATION_ID.fullmatch(operation_id):
            return None
        if not await database_sync_to_async(operation_exists)(operation_id):
            return None
        return operation_group(operation_id)


@database_sync_to_async
def _progress_version(operation_id: str) -> int | None:
    return (
        RescaleOperation.objects.filter(operation_id=operation_id)
        .values_list("progress_version", flat=True)
        .first()
    )


_page_delta = database_sync_to_async(operation_page_delta)
_keep_placements = database_sync_to_async(keep_planned_placements)


class OperationPageConsumer(OperationConsumer):
    """``/ws/operations/<operation_id>/page/?version=N&steps=1-100``: the operation page's
    socket (htmx's websocket extension). Each progress event goes out as the rows it changed,
    rendered here (``dashboard.live.operation_page_delta``: once per version in this process,
    and of the step rows only those the page shows, ``steps``), to be swapped in by id. The
    consumer holds the version the page has: the next one is sent as it is; after a gap (an
    event lost on the channel layer, or a page rendered before an event the socket did not
    carry), or any other event of the operation, it tells the page to re-read its live part.
    So a page that misses a version re-reads the document, and is never left holding a delta
    applied to the wrong version."""

    version = 0
    shown: StepRanges | None = None

    async def connect(self) -> None:
        await super().connect()
        if not self.joined:
            return
        query = parse_qs(self.scope.get("query_string", b"").decode())
        try:
            self.version = int(query.get("version", ["-1"])[0])
        except ValueError:
            self.version = -1
        self.shown = parse_step_ranges(query.get("steps", [""])[0])
        operation_id = str(self.scope["url_route"]["kwargs"]["operation_id"])
        now = await _progress_version(operation_id)
        stale = now is None or now != self.version
        self.version = now or 0
        await self.send(text_data=LIVE + (RESYNC if stale else ""))
        # the page's first delta then finds its plan's placements read already
        await _keep_placements(operation_id)

    async def resync(self, event: dict[str, Any]) -> None:
        """Any event but progress (requested, cancelling, finished): re-read the page."""
        await self.send(text_data=RESYNC)

    async def operation_progress(self, event: dict[str, Any]) -> None:
        payload = event.get("payload", {})
        version = payload.get("progress_version")
        if not isinstance(version, int) or version <= self.version:
            return  # the page already holds it (it re-read the document after it)
        html = None
        if version == self.version + 1:
            operation_id = str(self.scope["url_route"]["kwargs"]["operation_id"])
            html = await _page_delta(operation_id=operation_id, payload=payload, shown=self.shown)
        self.version = version
        if html is None:
            await self.send(text_data=RESYNC)
            return
        for part in html:
            await self.send(text_data=part)


for _event in Event:
    if _event != Event.OPERATION_PROGRESS:
        setattr(OperationPageConsumer, _event.value.replace(".", "_"), OperationPageConsumer.resync)


class NotFoundConsumer(AsyncJsonWebsocketConsumer):
    """Any other websocket path: refused at the handshake (HTTP 403), not a 500."""

    async def connect(self) -> None:
        await self.close(code=CLOSE_NOT_FOUND)
