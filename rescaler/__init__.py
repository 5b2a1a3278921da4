"""Rescaler's Django project: settings, URLs, ASGI/WSGI entry points, the Celery app."""

from .celery import app as celery_app

__all__ = ("celery_app",)
