"""kombu's Redis transport, with one fix: a worker that loses Redis while it holds tasks not yet
acknowledged (a countdown's, which the operation drivers queue) reconnects instead of exiting.

Celery 5.7's consumer, on a lost connection, first detaches the connection's transport
(``collect``) and then closes it; closing the channel restores the held tasks to Redis, and
kombu's Redis ``QoS.restore_unacked`` then reads the detached connection's address and raises
``AttributeError`` ('NoneType' object has no attribute 'hostname'). That is no connection error,
so the consumer does not catch it: the worker logged "Unrecoverable error" and exited with status
1, and nothing restarted it (``tests/integration/test_celery_worker.py``).

With the connection detached there is nothing to restore them through: the tasks stay where
Redis keeps them until they are acknowledged (its ``unacked`` hash, which a live worker restores
after the visibility timeout), and a Redis that restarted empty lost them anyway, which
``rescaler.celery.ResumeOnConnect`` makes up for at the reconnect.

Used for ``redis://`` brokers (``CELERY_BROKER_TRANSPORT`` in rescaler/settings/base.py).
"""

from __future__ import annotations

import logging
from typing import Any

from kombu.transport import redis

log = logging.getLogger(__name__)


class QoS(redis.QoS):
    def restore_unacked(self, client: Any = None) -> None:
        if client is None and self.channel.connection.client is None:
            log.warning(
                "the broker connection is gone: %d held task(s) not restored here (they stay "
                "unacknowledged in Redis, restored after the visibility timeout)",
                len(self._delivered),
            )
            self._delivered.clear()
            return
        super().restore_unacked(client)


class Channel(redis.Channel):
    QoS = QoS


class Transport(redis.Transport):
    Channel = Channel
