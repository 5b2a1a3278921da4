"""How a Celery task rides out Postgres restarting under it, decided once for every task that
works on the database (issue 48): the task runs again on a new connection (Celery's Django
fix-up drops the broken one), backing off from 1 s to half a minute, for about ten minutes.
What counts as the database down is ``rescaler.dbwait``'s, the same as for an HTTP request."""

from __future__ import annotations

from typing import Any

from rescaler.dbwait import DATABASE_DOWN

DATABASE_RETRY_FIRST_S = 1
DATABASE_RETRY_MAX_S = 30
DATABASE_RETRIES = 25  # 1 + 2 + 4 + 8 + 16 + 20 × 30 s: about ten and a half minutes


def database_retry() -> dict[str, Any]:
    """The options of a task that works on the database (``@shared_task(...,
    **database_retry())``): retried on ``DATABASE_DOWN`` with exponential backoff, without
    jitter (one task per operation: no herd to spread), ``DATABASE_RETRIES`` times at most."""
    return {
        "autoretry_for": DATABASE_DOWN,
        "retry_backoff": DATABASE_RETRY_FIRST_S,
        "retry_backoff_max": DATABASE_RETRY_MAX_S,
        "retry_jitter": False,
        "max_retries": DATABASE_RETRIES,
    }
