"""The runner app's Celery tasks, where Celery's autodiscovery looks for them."""

from rescaler.runner.workers.tasks import release_worker

__all__ = ["release_worker"]
