"""The lease keeper: what a holder holds, renewed every quarter lease until it lets go.

A worker (or webhook dispatcher) tells the keeper what it took (``hold``) and what it recorded
or handed back (``drop``), and calls ``renew_if_due`` from its own loop: everything still held
is renewed in one statement. Rows another holder took over meanwhile (this one was presumed
dead) are reported lost, so the holder can leave them. ``fresh`` says whether the leases are
surely still alive: a holder must not start work on a row whose lease may have run out.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable

from layang.db import UNAVAILABLE_ERRORS, discard_connection, error_summary
from layang.queueing.leases import LeasedTable

log = logging.getLogger("layang.queueing")


class LeaseKeeper:
    """Keeps ``owner``'s leases on rows of ``queue`` alive. Thread-safe."""

    def __init__(self, queue: LeasedTable, owner: str, lease_seconds: float) -> None:
        self.queue = queue
        self.owner = owner
        self.lease = lease_seconds
        self._lock = threading.Lock()
        self._held: set[str] = set()
        self._renewed_at = time.monotonic()

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, ids: Iterable[str]) -> None:
        """Start keeping ``ids`` (just claimed: the claim itself set their lease)."""
        with self._lock:
            if not self._held:
                self._renewed_at = time.monotonic()
            self._held.update(ids)

    def drop(self, ids: Iterable[str]) -> None:
        """Stop keeping ``ids`` (recorded, handed back, or lost)."""
        with self._lock:
            self._held.difference_update(ids)

    def held(self) -> set[str]:
        with self._lock:
            return set(self._held)

    def fresh(self, within: float = 0.5) -> bool:
        """Whether the last renewal (or claim) is less than ``within`` of a lease ago."""
        return time.monotonic() - self._renewed_at <= self.lease * within

    def due(self) -> bool:
        return bool(self._held) and time.monotonic() - self._renewed_at >= self.lease / 4

    def renew_if_due(self) -> set[str]:
        """Renew every held lease if a quarter lease has passed; returns the ids lost to
        another holder (already dropped). A database failure is logged and leaves the leases to
        the next call (``fresh`` turns false if that lasts)."""
        if not self.due():
            return set()
        ids = self.held()
        try:
            kept = self.queue.renew(self.owner, list(ids), self.lease)
        except UNAVAILABLE_ERRORS as error:
            log.warning("could not renew leases on %s: %s", self.queue.table, error_summary(error))
            discard_connection()
            return set()
        lost = ids - kept
        with self._lock:
            self._renewed_at = time.monotonic()
            self._held.difference_update(lost)
        if lost:
            log.warning("lost the lease of %d rows of %s", len(lost), self.queue.table)
        return lost
