"""The one way to push an event to websocket clients.

Groups: ``cluster`` (the whole cluster), ``operation_<operation_id>`` (one operation). Every
event type is a ``workers.rescale.protocol.Event`` (the one list). The event type uses dots
(``epoch.committed``); Channels calls the consumer method with dots replaced by underscores
(``epoch_committed``). Each payload carries ``published_at`` (unix time) so a page can measure
how late an event reaches it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from workers.rescale.protocol import Event

logger = logging.getLogger(__name__)

# Events are notifications: the database is the source of truth. A slow or absent Redis may
# delay a dashboard update, but must never hold up an epoch or a Celery task.
PUBLISH_TIMEOUT_S = 2.0
CLUSTER_GROUP = "cluster"


def operation_group(operation_id: str) -> str:
    """The group of one operation's events (joined by ``/ws/operations/<operation_id>/``)."""
    return f"operation_{operation_id}"


def publish(group: str, event_type: Event, payload: dict[str, Any]) -> None:
    """Send ``{"type": event_type, "payload": payload}`` to every consumer in ``group``.

    Call it from synchronous code (the runner, Celery tasks, services). It never raises on a
    channel-layer failure: the failure is logged and the event dropped.
    """
    layer = get_channel_layer()
    if layer is None:
        logger.warning("No channel layer configured; dropped %s for %s", event_type, group)
        return
    message = {"type": str(event_type), "payload": {**payload, "published_at": time.time()}}

    async def send() -> None:
        await asyncio.wait_for(layer.group_send(group, message), timeout=PUBLISH_TIMEOUT_S)

    try:
        async_to_sync(send)()
    except Exception:
        logger.warning("Could not publish %s to group %s", event_type, group, exc_info=True)
