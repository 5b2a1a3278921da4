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

import re
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from rescaler.events import CLUSTER_GROUP, operation_group
from rescaler.operations.selectors import operation_exists
from workers.rescale.protocol import Event

# Application close codes (4000-4999), shown to the client.
CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404
OPERATION_ID = re.compile(r"[0-9A-Za-z_-]{1,32}")


def _forwarder(event_type: Event) -> Any:
    async def forward(self: EventConsumer, event: dict[str, Any]) -> None:
        await self.send_json({"type": event_type.value, **event.get("payload", {})})

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


class OperationConsumer(EventConsumer):
    """``/ws/operations/<operation_id>/``: one operation's progress, phase by phase."""

    async def group_name(self) -> str | None:
        operation_id = str(self.scope["url_route"]["kwargs"].get("operation_id", ""))
        if not OPERATION_ID.fullmatch(operation_id):
            return None
        if not await database_sync_to_async(operation_exists)(operation_id):
            return None
        return operation_group(operation_id)


class NotFoundConsumer(AsyncJsonWebsocketConsumer):
    """Any other websocket path: refused at the handshake (HTTP 403), not a 500."""

    async def connect(self) -> None:
        await self.close(code=CLOSE_NOT_FOUND)
