"""The cluster websocket over the real Redis channel layer, through the whole ASGI stack."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.test import Client

from dashboard.consumers import CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED
from rescaler.asgi import application
from rescaler.events import CLUSTER_GROUP, operation_group, publish
from workers.rescale.protocol import Event

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

ORIGIN = (b"origin", b"http://localhost")


def _session_cookie() -> bytes:
    # Run through database_sync_to_async, which closes the thread's connection afterwards: a
    # connection left open in a worker thread would stop pytest-django dropping the test database.
    user = get_user_model().objects.create_user(username="viewer", password="unused")
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


async def _communicator(
    *headers: tuple[bytes, bytes], path: str = "/ws/cluster/"
) -> WebsocketCommunicator:
    return WebsocketCommunicator(application, path, headers=list(headers))


def _without_time(message: dict[str, Any]) -> dict[str, Any]:
    """The message as published, less the publish time every event carries."""
    assert isinstance(message.pop("published_at"), float)
    return message


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
        await sync_to_async(publish)(CLUSTER_GROUP, Event.EPOCH_COMMITTED, payload)

        message = await communicator.receive_json_from(timeout=10)

        assert _without_time(message) == {"type": "epoch.committed", **payload}
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


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("origin", "host", "accepted"),
    [
        (b"http://evil.example", b"rescaler.local:8000", False),
        (b"http://rescaler.local:8000", b"rescaler.local:8000", True),
        (b"http://rescaler.local:9000", b"rescaler.local:8000", False),
        (b"", b"rescaler.local:8000", False),  # not a browser: no Origin, no socket
    ],
)
async def test_the_origin_must_be_the_host_itself_even_with_any_host_allowed(
    redis_service: str, settings: Any, origin: bytes, host: bytes, accepted: bool
) -> None:
    settings.ALLOWED_HOSTS = ["*"]  # the local settings: Channels' own check lets anything in
    cookie = await database_sync_to_async(_session_cookie)()
    headers = [(b"host", host), (b"cookie", cookie)] + ([(b"origin", origin)] if origin else [])
    communicator = await _communicator(*headers)
    connected, _ = await communicator.connect(timeout=10)
    assert connected is accepted
    if connected:
        await communicator.disconnect()


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_an_operation_that_does_not_exist_cannot_be_followed(redis_service: str) -> None:
    """Only the groups of real operations: a signed-in client cannot sit on the group of an id
    it guesses and receive that operation's events once it is requested."""
    cookie = await database_sync_to_async(_session_cookie)()
    communicator = await _communicator(ORIGIN, (b"cookie", cookie), path="/ws/operations/abc123/")
    connected, code = await communicator.connect(timeout=10)
    assert not connected and code == CLOSE_NOT_FOUND


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_an_unknown_path_is_refused_cleanly(redis_service: str) -> None:
    cookie = await database_sync_to_async(_session_cookie)()
    for path in ("/ws/nowhere/", "/ws/operations/../../x/", "/"):
        communicator = await _communicator(ORIGIN, (b"cookie", cookie), path=path)
        connected, code = await communicator.connect(timeout=10)
        assert not connected and code == CLOSE_NOT_FOUND, path


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("page", ["cluster", "operation"])
async def test_every_event_type_reaches_the_page_and_the_socket_stays_open(
    redis_service: str, monkeypatch: pytest.MonkeyPatch, page: str
) -> None:
    """A consumer without the handler of an event it receives closes its socket: each type."""

    monkeypatch.setattr(
        "rescaler.operations.enqueue.operation_drive_enqueue", lambda pk: None
    )  # no Celery
    operation_id, _ = await database_sync_to_async(_operation_with_two_reports)()
    path = "/ws/cluster/" if page == "cluster" else f"/ws/operations/{operation_id}/"
    cookie = await database_sync_to_async(_session_cookie)()
    communicator = await _communicator(ORIGIN, (b"cookie", cookie), path=path)
    connected, _ = await communicator.connect(timeout=10)
    assert connected
    group = CLUSTER_GROUP if page == "cluster" else operation_group(operation_id)
    try:
        for event in Event:
            payload = {"operation_id": operation_id, "event": event.value}
            await sync_to_async(publish)(group, event, payload)
            message = await communicator.receive_json_from(timeout=10)
            assert _without_time(message) == {"type": event.value, **payload}
        assert await communicator.receive_nothing(timeout=0.2)
    finally:
        await communicator.disconnect()


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
        publish(CLUSTER_GROUP, Event.EPOCH_COMMITTED, {"epoch": 1})
    finally:
        channel_layers.backends.clear()
    assert "Could not publish epoch.committed" in caplog.text


def _operation_with_two_reports() -> tuple[str, Callable[[int], None]]:
    """A pending scale-out of word_count (4 steps) and a function that sends the runner's
    report at a barrier where the first ``n`` steps are collecting."""
    from rescaler.operations import requests as operation_requests
    from rescaler.operations.models import RescaleOperation
    from rescaler.operations.progress import operation_progress_record
    from tests.unit.api.fixtures import PIPELINE, make_user, register_cluster, request_body
    from workers.rescale.protocol import (
        OperationProgress,
        OperationStatus,
        StepPhase,
        StepProgress,
        StopStartPhase,
        Strategy,
    )

    register_cluster()
    op = operation_requests.operation_request(
        user=make_user("operator", rescale=True), body=request_body(added_parallel_units=[2, 3])
    )
    assert isinstance(op, RescaleOperation)
    specs = [s.spec() for s in op.steps.order_by("step")]

    def report(collecting: int) -> None:
        steps = tuple(
            StepProgress(
                step=n,
                fragment=s.fragment,
                source_pu=s.source_pu,
                target_pu=s.target_pu,
                vnodes=s.vnodes,
                phase=StepPhase.COLLECTING if n <= collecting else StepPhase.PENDING,
            )
            for n, s in enumerate(specs, start=1)
        )
        progress = OperationProgress(
            operation_id=op.operation_id,
            strategy=Strategy(op.strategy),
            fragments=tuple(op.fragments),
            status=OperationStatus.RUNNING,
            phase=StopStartPhase.BEGUN,
            steps=steps,
        ).to_json()
        operation_progress_record(pipeline=PIPELINE, progress=progress)

    return op.operation_id, report


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_an_operations_page_receives_its_progress_as_versioned_deltas(
    redis_service: str, monkeypatch: pytest.MonkeyPatch
) -> None:

    monkeypatch.setattr(
        "rescaler.operations.enqueue.operation_drive_enqueue", lambda pk: None
    )  # no Celery
    operation_id, report = await database_sync_to_async(_operation_with_two_reports)()
    cookie = await database_sync_to_async(_session_cookie)()
    path = f"/ws/operations/{operation_id}/"
    communicator = await _communicator(ORIGIN, (b"cookie", cookie), path=path)
    connected, _ = await communicator.connect(timeout=10)
    assert connected
    try:
        await database_sync_to_async(report)(1)
        first = await communicator.receive_json_from(timeout=10)
        await database_sync_to_async(report)(2)
        second = await communicator.receive_json_from(timeout=10)
        assert (first["type"], first["progress_version"]) == ("operation.progress", 1)
        assert [s["step"] for s in first["steps"]] == [1, 2, 3, 4]
        # through Redis and the consumer, the next report is only what changed, one version on
        assert second["progress_version"] == 2
        assert [(s["step"], s["phase"]) for s in second["steps"]] == [(2, "collecting")]
        assert {v["step"] for v in second["vnodes"]} == {2}
        assert await communicator.receive_nothing(timeout=0.2)
    finally:
        await communicator.disconnect()


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_the_operation_page_receives_rendered_rows_and_rereads_after_a_gap(
    redis_service: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The console's socket: each next version as the HTML rows it changed, rendered by the
    consumer (htmx swaps them in by id), of the step rows only those the page shows; a version
    the page did not hold before, or a gap, as the order to re-read."""
    from dashboard.consumers import RESYNC
    from dashboard.live import PAGE_CHANGES

    monkeypatch.setattr(
        "rescaler.operations.enqueue.operation_drive_enqueue", lambda pk: None
    )  # no Celery
    operation_id, report = await database_sync_to_async(_operation_with_two_reports)()
    cookie = await database_sync_to_async(_session_cookie)()

    async def page(version: int, steps: str = "") -> WebsocketCommunicator:
        path = f"/ws/operations/{operation_id}/page/?version={version}&steps={steps}"
        communicator = await _communicator(ORIGIN, (b"cookie", cookie), path=path)
        connected, _ = await communicator.connect(timeout=10)
        assert connected
        return communicator

    current = await page(0)
    stale = await page(7)  # a version the operation never had: re-read at once
    second_page = await page(0, steps="3-4")  # a page of the steps table showing steps 3 and 4
    json_client = await _communicator(
        ORIGIN, (b"cookie", cookie), path=f"/ws/operations/{operation_id}/"
    )
    assert (await json_client.connect(timeout=10))[0]
    try:
        hello = await current.receive_from(timeout=10)
        assert 'id="live-state"' in hello and RESYNC not in hello
        assert RESYNC in await stale.receive_from(timeout=10)

        await database_sync_to_async(report)(1)
        # one message: the rows first, then the rest
        delta = await current.receive_from(timeout=10)
        assert delta.startswith("<tr") and 'id="step-1"' in delta and 'id="step-4"' in delta
        assert delta.index('id="step-4"') < delta.index('id="op-summary" hx-swap-oob="true"')
        assert "live-state" in await second_page.receive_from(timeout=10)
        shown = await second_page.receive_from(timeout=10)
        assert re.findall(r'id="(step-\d+)"', shown) == ["step-3", "step-4"]
        assert 'id="op-summary" hx-swap-oob="true"' in shown
        # JSON clients get the delta without what the page's socket reads
        assert PAGE_CHANGES not in await json_client.receive_json_from(timeout=10)

        # a version lost between the channel layer and this socket: the page re-reads
        from rescaler import events

        publish = events.publish
        monkeypatch.setattr(events, "publish", lambda *args: None)
        await database_sync_to_async(report)(2)
        monkeypatch.setattr(events, "publish", publish)
        await database_sync_to_async(report)(3)
        assert await current.receive_from(timeout=10) == RESYNC
        assert await current.receive_nothing(timeout=0.2)
    finally:
        for communicator in (current, stale, second_page, json_client):
            await communicator.disconnect()
