"""Waking an idle queue's process when work arrives, without polling the database.

On PostgreSQL whatever queues work sends a notification on the queue's channel (the mail
outbox's enqueue, a trigger on the webhook tables), and an idle process waits on a connection
that ``LISTEN``s, until a notification, the queue's next due time, or a safety interval passes.
SQLite has no notifications: an idle process looks again every ``timeout`` it is given, which on
a local file costs well under a millisecond.
"""

from __future__ import annotations

import contextlib
import logging
import select
import threading
from collections.abc import Callable
from typing import Any

from layang.clock import now_ms
from layang.config import Config

log = logging.getLogger("layang.wakeup")

LONGEST_SLEEP = 5.0
"""An idle process on PostgreSQL looks at its queue at least this often anyway."""


class Wakeup:
    """Waits for work on one queue, the way the database allows: ``channel`` is what the
    queue's writers notify, ``next_due`` when its next row falls due (epoch ms, None: none)."""

    def __init__(self, config: Config, channel: str, next_due: Callable[[], int | None]) -> None:
        self.config = config
        self.channel = channel
        self.next_due = next_due
        self.connection: Any = None
        self.postgresql = config.database_url.startswith("postgres")

    def wait(self, timeout: float, stop: threading.Event) -> None:
        """Return after ``timeout`` on SQLite; on PostgreSQL when work is queued, when the
        next row is due, or after at most ``LONGEST_SLEEP``."""
        if not self.postgresql:
            stop.wait(timeout)
            return
        try:
            connection = self._listening()
            due = self.next_due()
            sleep = LONGEST_SLEEP
            if due is not None:
                sleep = max(0.0, min(sleep, (due - now_ms()) / 1000))
            if sleep > 0 and not stop.is_set():
                # poll, not select: select refuses descriptors past 1024, which a busy process
                # reaches.
                poller = select.poll()
                poller.register(connection.fileno(), select.POLLIN)
                poller.poll(sleep * 1000)
                connection.poll()
                connection.notifies.clear()
        except Exception as error:
            log.debug("listening on %s failed: %s", self.channel, error)
            self.close()
            stop.wait(timeout)

    def _listening(self) -> Any:
        if self.connection is None:
            import psycopg2

            connection = psycopg2.connect(self.config.database_url)
            connection.autocommit = True
            connection.cursor().execute(f"LISTEN {self.channel}")
            self.connection = connection
        return self.connection

    def close(self) -> None:
        connection, self.connection = self.connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                connection.close()
