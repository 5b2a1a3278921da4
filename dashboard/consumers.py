"""Websocket consumers: they only move messages from channel-layer groups to browsers.

Connection policy: the dashboard needs a login, and so do its websockets. An anonymous
connection is refused at the handshake (the close before accept becomes HTTP 403), so the
cluster's live figures are never shown to a visitor who has not signed in.
"""

from __future__ import annotations

from typing import Any

from channels.generic.websocket import AsyncJsonWebsocketConsumer

CLUSTER_GROUP = "cluster"
# Application close code (4000-4999) for "not authenticated", shown to the client.
CLOSE_UNAUTHENTICATED = 4401


class ClusterConsumer(AsyncJsonWebsocketConsumer):
    """Joins group ``cluster``; forwards ``epoch.committed`` events to the browser."""

    async def connect(self) -> None:
        self.joined = False
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        await self.channel_layer.group_add(CLUSTER_GROUP, self.channel_name)
        self.joined = True
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if getattr(self, "joined", False):
            await self.channel_layer.group_discard(CLUSTER_GROUP, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        """Clients only listen; anything they send is ignored."""

    async def epoch_committed(self, event: dict[str, Any]) -> None:
        """``epoch.committed`` from rescaler.events.publish: one epoch of the pipeline is durable."""
        await self.send_json({"type": "epoch.committed", **event.get("payload", {})})

    async def rescale_progress(self, event: dict[str, Any]) -> None:
        """``rescale.progress``: a summary of a running rescale operation's progress."""
        await self.send_json({"type": "rescale.progress", **event.get("payload", {})})
