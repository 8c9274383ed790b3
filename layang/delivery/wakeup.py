"""Waking an idle worker when mail is queued, without polling the database.

On PostgreSQL every enqueue sends ``NOTIFY layang_mail`` and an idle worker waits on a
connection that ``LISTEN``s, until a notification, the next retry falls due, or a safety
interval passes. SQLite has no notifications: an idle worker looks again every
``LAYANG_WORKER_POLL_SECONDS``, which on a local file costs well under a millisecond.
"""

from __future__ import annotations

import contextlib
import logging
import select
import threading

from layang.clock import now_ms
from layang.config import Config
from layang.db import database, is_postgresql
from layang.mail.outbox import QUEUED_CHANNEL as CHANNEL

log = logging.getLogger("layang.worker")

LONGEST_SLEEP = 5.0
"""An idle worker on PostgreSQL looks at the queue at least this often anyway."""


def notify_queued() -> None:
    """Tell idle workers that mail was queued (PostgreSQL; after the commit)."""
    if is_postgresql():
        database.execute_sql(f"NOTIFY {CHANNEL}")


def next_due_ms() -> int | None:
    """When the next queued email falls due (epoch ms), or None if none is queued."""
    row = database.execute_sql(
        'SELECT MIN("next_attempt_at") FROM "recipient" WHERE "next_attempt_at" IS NOT NULL'
    ).fetchone()
    return None if row is None or row[0] is None else int(row[0])


class MailWakeup:
    """Waits for queued mail, the way the database allows."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.connection = None
        self.postgresql = config.database_url.startswith("postgres")

    def wait(self, timeout: float, stop: threading.Event) -> None:
        """Return after ``timeout`` on SQLite; on PostgreSQL when mail is queued, when the
        next retry is due, or after at most ``LONGEST_SLEEP``."""
        if not self.postgresql:
            stop.wait(timeout)
            return
        try:
            connection = self._listening()
            due = next_due_ms()
            sleep = LONGEST_SLEEP
            if due is not None:
                sleep = max(0.0, min(sleep, (due - now_ms()) / 1000))
            if sleep > 0 and not stop.is_set():
                select.select([connection], [], [], sleep)
                connection.poll()
                connection.notifies.clear()
        except Exception as error:
            log.debug("listening for queued mail failed: %s", error)
            self.close()
            stop.wait(timeout)

    def _listening(self):  # type: ignore[no-untyped-def]
        if self.connection is None:
            import psycopg2

            connection = psycopg2.connect(self.config.database_url)
            connection.autocommit = True
            connection.cursor().execute(f"LISTEN {CHANNEL}")
            self.connection = connection
        return self.connection

    def close(self) -> None:
        connection, self.connection = self.connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                connection.close()
