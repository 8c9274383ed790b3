"""The sender: the only code that talks to the upstream server.

A worker claims a batch of due emails under a lease, relays them one message after another,
and hands each outcome to its bookkeeper thread, which records outcomes in batches while the
next messages go out and keeps the lease of everything the worker holds alive.

Exactly once without a crash: an email is sent only while its lease is held, and the lease is
renewed (every quarter lease) until its outcome is recorded, however long an SMTP reply takes;
no other worker can claim it meanwhile. If a message hangs, the rest of the batch is handed back
so that other workers carry on with it. At least once across crashes: a worker that dies stops
renewing, and its emails are claimed again once the lease runs out.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from layang.config import Config
from layang.db import UNAVAILABLE_ERRORS, database, discard_connection, error_summary
from layang.delivery.build import CopyBuilder
from layang.delivery.queue import (
    RECIPIENTS,
    Attempt,
    ClaimedRecipient,
    QueuedTransmission,
    claim_due_recipients,
    load_transmissions,
    record_attempts,
    record_suppressed,
)
from layang.delivery.relay import BOUNCED, DEFERRED, RecipientResult
from layang.delivery.routes import Router, Transport
from layang.mail.message import OutgoingMessage
from layang.mail.suppression import applies, suppressed_recipients
from layang.metrics import recorded_outcomes, timed_relay
from layang.queueing.keeper import LeaseKeeper
from layang.queueing.loop import run_until
from layang.queueing.retry import RetryPolicy

log = logging.getLogger("layang.worker")

# A batch holds about this many seconds of sending, so that with a slow upstream several
# workers share the queue instead of one holding all of it.
BATCH_SECONDS = 1.0
FIRST_BATCH = 10
# An attempt still waiting for its reply after this long (or half the lease, if shorter) hands
# the rest of its batch back to the queue.
STALL_SECONDS = 10.0
# Outcomes are recorded in one transaction once this many recipients wait, or the oldest has
# waited this long, or the batch is done: recording each on its own would compete with the
# sender for the interpreter on every message.
FLUSH_RECIPIENTS = 256
FLUSH_SECONDS = 0.1
# Outcomes waiting to be recorded before the sender pauses for the bookkeeper.
MAX_UNRECORDED = 4 * FLUSH_RECIPIENTS


class Worker:
    """Claims due emails in batches, relays them, records each recipient's outcome."""

    def __init__(
        self,
        config: Config,
        relay: Transport | None = None,
        name: str | None = None,
        *,
        chores: Sequence[Callable[[], object]] = (),
    ) -> None:
        """``relay`` replaces the transport ``LAYANG_RELAY_URL`` names; ``chores`` run every
        few minutes between batches (housekeeping)."""
        self.config = config
        self.owner = name or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.router = Router.from_config(config, relay)
        self.policy = RetryPolicy.doubling(config.retry_base_seconds, config.max_delivery_seconds)
        self.builder = CopyBuilder(config)
        self.chores = chores
        self.leases = LeaseKeeper(RECIPIENTS, self.owner, config.lease_seconds)
        self.books = Bookkeeper(self)
        # Set when a cycle broke off: the rest of its batch is handed back once the database
        # answers again, rather than waiting for the lease to run out.
        self.abandoned = False
        self.seconds_per_message = BATCH_SECONDS / FIRST_BATCH

    def run(self, stop: threading.Event) -> None:
        """Work until ``stop`` is set; finishes the message in hand before returning."""
        log.info("worker started owner=%s", self.owner)
        try:
            run_until(
                stop,
                lambda: 0.0 if self.run_once(stop, wait=False) else self.config.worker_poll_seconds,
                log=log,
                idle_seconds=self.config.worker_poll_seconds,
                after_failure=self.abandon,
                chores=self.chores,
            )
        finally:
            self.close()
            log.info("worker stopped owner=%s", self.owner)

    def abandon(self) -> None:
        self.abandoned = True

    def close(self) -> None:
        """Record what is left, stop the bookkeeper and drop the upstream connections."""
        self.books.stop()
        self.router.close()

    def batch_size(self) -> int:
        """How many emails to claim: about ``BATCH_SECONDS`` of sending at the recent pace."""
        size = int(BATCH_SECONDS / max(self.seconds_per_message, 1e-6))
        return max(1, min(size, self.config.worker_batch_size))

    def run_once(self, stop: threading.Event | None = None, *, wait: bool = True) -> int:
        """Claim one batch and attempt every email in it; returns how many were claimed.

        With ``wait``, returns once every outcome of the batch is recorded (or given up on: see
        ``Bookkeeper.record``); without, the last outcomes are recorded while the next batch is
        claimed and sent.
        """
        database.connect(reuse_if_open=True)
        if self.abandoned:
            # Outcomes still on their way to the database must not be handed to another worker.
            self.books.wait_recorded()
            released = RECIPIENTS.release(self.owner)
            self.abandoned = False
            if released:
                log.info("released %d emails of a broken-off batch", released)
        claimed = claim_due_recipients(self.owner, self.batch_size(), self.config.lease_seconds)
        if not claimed:
            return 0
        groups: dict[str, list[ClaimedRecipient]] = {}
        for recipient in claimed:
            groups.setdefault(recipient.transmission_id, []).append(recipient)
        transmissions = load_transmissions(list(groups))
        groups = self.without_suppressed(groups, transmissions)
        self.builder.load(t.account_id for t in transmissions.values())
        self.books.hold(list(groups.values()))
        started = time.monotonic()
        sent = 0
        try:
            while (group := self.books.next_group(stop)) is not None:
                self.deliver(transmissions[group[0].transmission_id], group)
                sent += len(group)
        finally:
            self.books.hand_back_queued()
            if wait:
                self.books.wait_recorded()
        if sent:
            pace = (time.monotonic() - started) / sent
            self.seconds_per_message = 0.5 * self.seconds_per_message + 0.5 * pace
        return len(claimed)

    def without_suppressed(
        self,
        groups: dict[str, list[ClaimedRecipient]],
        transmissions: dict[str, QueuedTransmission],
    ) -> dict[str, list[ClaimedRecipient]]:
        """``groups`` less the recipients whose address went on the suppression list while
        they waited; those are recorded ``Suppressed`` instead of being sent."""
        found = suppressed_recipients([r.id for group in groups.values() for r in group])
        if not found:
            return groups
        stopped = [
            (recipient, found[recipient.id])
            for tid, group in groups.items()
            for recipient in group
            if recipient.id in found
            and applies(found[recipient.id], transmissions[tid].is_transactional)
        ]
        record_suppressed(self.owner, stopped)
        skipped = {recipient.id for recipient, _ in stopped}
        kept = {tid: [r for r in group if r.id not in skipped] for tid, group in groups.items()}
        return {tid: group for tid, group in kept.items() if group}

    def deliver(
        self, transmission: QueuedTransmission, recipients: Sequence[ClaimedRecipient]
    ) -> None:
        message = None
        if transmission.raw is None:
            try:
                message = OutgoingMessage.from_payload(json.loads(transmission.payload))
            except Exception as error:
                self.unbuildable(transmission, recipients, error)
                return
        if self.builder.is_personal(message):
            for recipient in recipients:
                self.attempt(transmission, [recipient], message, personal=True)
        else:
            self.attempt(transmission, recipients, message, personal=False)

    def attempt(
        self,
        transmission: QueuedTransmission,
        recipients: Sequence[ClaimedRecipient],
        message: OutgoingMessage | None,
        *,
        personal: bool,
    ) -> None:
        """One delivery attempt of one copy of the message to ``recipients``.

        Each recipient goes in a transaction of its own (on the same connection), because each
        has its own envelope sender (its VERP return path) and its own ``X-Layang-Id`` header.
        """
        try:
            body = self.builder.body(transmission, message, recipients[0].id if personal else None)
        except Exception as error:
            self.unbuildable(transmission, recipients, error)
            return
        # What was composed is kept for retries (see record_attempts), unless it is personal.
        built = (transmission.id, body) if message is not None and not personal else None
        results: dict[str, RecipientResult] = {}
        failed: dict[str, RecipientResult] = {}
        for recipient in recipients:
            route = self.router.route_for(recipient.address)
            if route.destination in failed:
                # That destination is unreachable, timed out or closing: trying each remaining
                # recipient would wait out the same failure once per recipient.
                results[recipient.address] = replace(
                    failed[route.destination], recipient=recipient.address
                )
                continue
            copy = self.builder.copy(transmission, body, recipient.id)
            with self.books.in_flight(), timed_relay():
                result = route.transport.send(
                    copy.mail_from,
                    [recipient.address],
                    copy.data,
                    reference=transmission.id,
                    # What compose wrote has CRLF line ends only; submitted bytes are checked.
                    crlf_clean=message is not None,
                    attempt=recipient.attempts + 1,
                    # Passed only when asked, so transports without it keep working.
                    **({"require_tls": True} if transmission.require_tls else {}),
                )
            (outcome,) = result.recipients
            results[recipient.address] = outcome
            if outcome.outcome == DEFERRED and outcome.code in (0, 421):
                failed[route.destination] = outcome
        self.books.add(Attempt(recipients, results, built))

    def unbuildable(
        self,
        transmission: QueuedTransmission,
        recipients: Sequence[ClaimedRecipient],
        error: Exception,
    ) -> None:
        """A message that cannot be built never will be: it bounces at once with the reason,
        rather than being retried for days."""
        log.error("could not build message tid=%s: %s", transmission.id, error)
        reply = f"message could not be built: {error}"
        results = {r.address: RecipientResult(r.address, 0, reply, BOUNCED) for r in recipients}
        self.books.add(Attempt(recipients, results))


class Bookkeeper:
    """The worker's second thread: records outcomes and keeps the worker's leases alive.

    The sender takes groups from ``next_group`` and hands outcomes to ``add``; everything the
    worker holds (queued, in flight, sent but not yet recorded) is renewed every quarter lease.
    Queued groups are handed back when an attempt hangs, or when renewing has failed for so long
    that the lease may have run out, so that an email is never started without a live lease.
    """

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.lease = worker.config.lease_seconds
        self.lock = threading.Condition()
        self.queued: collections.deque[list[ClaimedRecipient]] = collections.deque()
        self.unrecorded: list[Attempt] = []
        self.unrecorded_count = 0  # recipients in ``unrecorded``
        self.unrecorded_since = 0.0
        self.flush_wanted = False
        self.recording = 0  # recipients being recorded right now
        self.leases = worker.leases
        self.attempt_started: float | None = None
        self.thread: threading.Thread | None = None
        self.stopping = False

    # -- the sender's side ------------------------------------------------------------------

    def _ensure_thread(self) -> None:
        # Called with the lock held. The thread ends by itself once it holds nothing (see
        # ``run``), so an idle worker, or one only used by tests, keeps no thread around.
        if self.thread is None:
            self.stopping = False
            self.thread = threading.Thread(
                target=self.run, name=f"bookkeeper-{self.worker.owner}", daemon=True
            )
            self.thread.start()

    def stop(self) -> None:
        """Record what is pending, then end the thread."""
        with self.lock:
            self.stopping = True
            thread = self.thread
            self.lock.notify_all()
        if thread is not None:
            thread.join(self.lease + 5)

    def hold(self, groups: list[list[ClaimedRecipient]]) -> None:
        with self.lock:
            self._ensure_thread()
            self.queued.extend(groups)
            self.leases.hold(r.id for group in groups for r in group)

    def next_group(self, stop: threading.Event | None) -> list[ClaimedRecipient] | None:
        """The next group to send, or None when the batch is done (or handed back)."""
        with self.lock:
            while self.unrecorded_count >= MAX_UNRECORDED and not self.stopping:
                self.lock.wait(0.1)
            if stop is not None and stop.is_set():
                return None
            if not self.leases.fresh():
                return None  # the lease may lapse before this attempt ends: leave it
            return self.queued.popleft() if self.queued else None

    def in_flight(self) -> _InFlight:
        return _InFlight(self)

    def add(self, attempt: Attempt) -> None:
        with self.lock:
            self._ensure_thread()
            if not self.unrecorded:
                self.unrecorded_since = time.monotonic()
            self.unrecorded.append(attempt)
            self.unrecorded_count += len(attempt.recipients)
            if self.unrecorded_count >= FLUSH_RECIPIENTS:
                self.lock.notify_all()

    def hand_back_queued(self) -> None:
        """Release the groups the sender will not get to (stopped, or the lease is in doubt)."""
        with self.lock:
            groups, self.queued = list(self.queued), collections.deque()
            ids = [r.id for group in groups for r in group]
        self.leases.drop(ids)
        if ids:
            self._release(ids)

    def wait_recorded(self) -> None:
        """Block until every outcome handed over is recorded or given up on."""
        with self.lock:
            self.flush_wanted = True
            self.lock.notify_all()
            while (self.unrecorded or self.recording) and self.thread is not None:
                self.lock.wait(0.05)
            self.flush_wanted = False

    # -- the bookkeeper's thread -------------------------------------------------------------

    def run(self) -> None:
        interval = self.lease / 4
        next_renewal = time.monotonic() + interval
        try:
            while True:
                with self.lock:
                    while not self._flush_due() and not self.stopping:
                        if not self.unrecorded and not len(self.leases) and not self.queued:
                            self.thread = None  # nothing to keep alive: end, see add/hold
                            return
                        if time.monotonic() >= next_renewal or self._stalled():
                            break
                        self.lock.wait(min(FLUSH_SECONDS / 2, interval))
                    batch = []
                    if self._flush_due() or self.stopping:
                        batch, self.unrecorded = self.unrecorded, []
                        self.recording, self.unrecorded_count = self.unrecorded_count, 0
                    if self.stopping and not batch:
                        self.thread = None
                        return
                if batch:
                    self.record(batch)
                if self._stalled():
                    self.hand_back_queued()
                if time.monotonic() >= next_renewal:
                    self.renew()
                    next_renewal = time.monotonic() + interval
        finally:
            discard_connection()
            with self.lock:
                self.lock.notify_all()

    def _flush_due(self) -> bool:
        # Called with the lock held.
        return bool(self.unrecorded) and (
            self.flush_wanted
            or self.unrecorded_count >= FLUSH_RECIPIENTS
            or time.monotonic() - self.unrecorded_since >= FLUSH_SECONDS
        )

    def _stalled(self) -> bool:
        started = self.attempt_started
        limit = min(STALL_SECONDS, self.lease / 2)
        return started is not None and time.monotonic() - started > limit and bool(self.queued)

    def renew(self) -> None:
        lost = self.leases.renew_if_due()
        if lost:
            # Another worker took these over (this one was presumed dead): leave them.
            with self.lock:
                self.queued = collections.deque(
                    kept
                    for group in self.queued
                    if (kept := [r for r in group if r.id not in lost])
                )

    def record(self, attempts: list[Attempt]) -> None:
        """``record_attempts``, retried through a database outage for up to one lease.

        The mail has already gone out: recording it late beats sending it again once the lease
        runs out. Retrying is safe because only the lease holder's rows are updated.
        """
        deadline = time.monotonic() + self.lease
        recorded: dict[str, str] = {}
        while True:
            try:
                database.connect(reuse_if_open=True)
                recorded = record_attempts(self.worker.owner, attempts, self.worker.policy)
                break
            except UNAVAILABLE_ERRORS as error:
                discard_connection()
                if time.monotonic() >= deadline:
                    log.error("gave up recording %d outcomes: %s", len(attempts), error)
                    self.worker.abandoned = True
                    break
                log.warning("could not record outcomes, retrying: %s", error_summary(error))
                time.sleep(min(1.0, self.lease / 10))
            except Exception:
                log.exception("could not record outcomes")
                self.worker.abandoned = True
                break
        counts = collections.Counter(recorded.values())
        for status, count in counts.items():
            recorded_outcomes().labels(status).inc(count)
        if log.isEnabledFor(logging.DEBUG):
            for attempt in attempts:
                for r in attempt.recipients:
                    if r.id in recorded:
                        log.debug(
                            "%s tid=%s rid=%s rcpt=%s reply=%s",
                            recorded[r.id].lower(),
                            r.transmission_id,
                            r.id,
                            r.address,
                            json.dumps(attempt.results[r.address].reply),
                        )
        ids = [r.id for attempt in attempts for r in attempt.recipients]
        self.leases.drop(ids)
        with self.lock:
            self.recording = 0
            self.lock.notify_all()

    def _release(self, ids: list[str]) -> None:
        try:
            database.connect(reuse_if_open=True)
            released = RECIPIENTS.release(self.worker.owner, ids)
        except UNAVAILABLE_ERRORS as error:
            # The lease runs out by itself; another worker takes them then.
            log.warning("could not hand back %d emails: %s", len(ids), error_summary(error))
            discard_connection()
            return
        if released:
            log.info("handed back %d emails to the queue", released)


class _InFlight:
    """Marks the time an attempt started, so a hanging one can be noticed."""

    def __init__(self, books: Bookkeeper) -> None:
        self.books = books

    def __enter__(self) -> None:
        self.books.attempt_started = time.monotonic()

    def __exit__(self, *exc_info: object) -> None:
        self.books.attempt_started = None
