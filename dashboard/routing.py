"""Websocket URLs (mounted by rescaler/asgi.py)."""

from django.urls import path

from dashboard.consumers import ClusterConsumer

websocket_urlpatterns = [
    path("ws/cluster/", ClusterConsumer.as_asgi()),
]
