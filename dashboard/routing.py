"""Websocket URLs (mounted by rescaler/asgi.py). The last pattern refuses every other path."""

from django.urls import path, re_path

from dashboard.consumers import (
    ClusterConsumer,
    ClusterPageConsumer,
    NotFoundConsumer,
    OperationConsumer,
    OperationPageConsumer,
)

websocket_urlpatterns = [
    path("ws/cluster/", ClusterConsumer.as_asgi()),
    path("ws/cluster/page/", ClusterPageConsumer.as_asgi()),
    path("ws/operations/<str:operation_id>/", OperationConsumer.as_asgi()),
    path("ws/operations/<str:operation_id>/page/", OperationPageConsumer.as_asgi()),
    re_path(r"", NotFoundConsumer.as_asgi()),
]
