"""The cluster websocket over the real Redis channel layer, through the whole ASGI stack."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.test import Client

from dashboard.consumers import CLOSE_UNAUTHENTICATED
from rescaler.asgi import application
from rescaler.events import publish

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

ORIGIN = (b"origin", b"http://localhost")


def _session_cookie() -> bytes:
    # Run through database_sync_to_async, which closes the thread's connection afterwards: a
    # connection left open in a worker thread would stop pytest-django dropping the test database.
    user = get_user_model().objects.create_user(username="viewer", password="unused")
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


async def _communicator(*headers: tuple[bytes, bytes]) -> WebsocketCommunicator:
    return WebsocketCommunicator(application, "/ws/cluster/", headers=list(headers))


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_signed_in_client_receives_epoch_committed(redis_service: str) -> None:
    cookie = await database_sync_to_async(_session_cookie)()
    communicator = await _communicator(ORIGIN, (b"cookie", cookie))
    connected, _ = await communicator.connect(timeout=10)
    assert connected
    try:
        payload: dict[str, Any] = {"pipeline": "clickstream", "epoch": 42, "rows": 200_000}
        # publish() is the synchronous helper the runner and Celery tasks call.
        await sync_to_async(publish)("cluster", "epoch.committed", payload)

        message = await communicator.receive_json_from(timeout=10)

        assert message == {"type": "epoch.committed", **payload}

        progress = {"operation": 7, "moved_vnodes": 12, "total_vnodes": 64}
        await sync_to_async(publish)("cluster", "rescale.progress", progress)
        assert await communicator.receive_json_from(timeout=10) == {
            "type": "rescale.progress",
            **progress,
        }
        assert await communicator.receive_nothing(timeout=0.2)
    finally:
        await communicator.disconnect()


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_anonymous_client_is_refused_at_the_handshake(redis_service: str) -> None:
    communicator = await _communicator(ORIGIN)

    connected, code = await communicator.connect(timeout=10)

    assert not connected
    assert code == CLOSE_UNAUTHENTICATED


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_another_sites_page_cannot_open_the_socket(redis_service: str) -> None:
    cookie = await database_sync_to_async(_session_cookie)()
    communicator = await _communicator((b"origin", b"http://evil.example"), (b"cookie", cookie))

    connected, _ = await communicator.connect(timeout=10)

    assert not connected


def test_publish_never_raises_when_redis_is_down(settings: Any, caplog: Any) -> None:
    from channels.layers import channel_layers

    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": ["redis://127.0.0.1:1/0"]},  # nothing listens on port 1
        }
    }
    channel_layers.backends.clear()  # forget the layer built from the real settings
    try:
        publish("cluster", "epoch.committed", {"epoch": 1})
    finally:
        channel_layers.backends.clear()
    assert "Could not publish epoch.committed" in caplog.text
