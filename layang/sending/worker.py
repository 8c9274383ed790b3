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
from collections.abc import Sequence
from dataclasses import replace

from layang.config import Config
from layang.db import UNAVAILABLE_ERRORS, database, discard_connection, error_summary
from layang.metrics import recorded_outcomes, timed_relay
from layang.sending import housekeeping, simulator
from layang.sending.compose import compose_message
from layang.sending.dkim import DkimSigner
from layang.sending.message import OutgoingMessage
from layang.sending.outbox import (
    Attempt,
    ClaimedRecipient,
    QueuedTransmission,
    RetryPolicy,
    claim_due_recipients,
    load_transmissions,
    record_attempts,
    record_suppressed,
    release,
    release_leases,
    renew_leases,
)
from layang.sending.relay import BOUNCED, DEFERRED, RecipientResult, Relay, relay_from_url
from layang.sending.return_path import ReturnPaths
from layang.sending.suppression import applies, suppressed_recipients
from layang.sending.tracking import Tracker
from layang.sending.unsubscribe import HEADER_NAMES as UNSUBSCRIBE_HEADERS
from layang.sending.unsubscribe import UnsubscribeTokens

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

    def __init__(self, config: Config, relay: Relay | None = None, name: str | None = None) -> None:
        self.config = config
        self.owner = name or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.relay = relay or relay_from_url(config.relay_url, helo_name=socket.gethostname())
        self.policy = RetryPolicy(config.retry_base_seconds, config.max_delivery_seconds)
        self.tracker = Tracker(config.secret_key, config.public_url)
        self.unsubscribe_tokens = UnsubscribeTokens(
            config.secret_key, config.public_url, config.bounce_domain
        )
        self.signer = DkimSigner(config.secret_key)
        self.return_paths = ReturnPaths(config.secret_key, config.bounce_domain)
        self.books = Bookkeeper(self)
        # Set when a cycle broke off: the rest of its batch is handed back once the database
        # answers again, rather than waiting for the lease to run out.
        self.abandoned = False
        self.seconds_per_message = BATCH_SECONDS / FIRST_BATCH

    def run(self, stop: threading.Event) -> None:
        """Work until ``stop`` is set; finishes the message in hand before returning."""
        log.info("worker started owner=%s", self.owner)
        next_housekeeping = time.monotonic()
        try:
            while not stop.is_set():
                try:
                    if time.monotonic() >= next_housekeeping:
                        next_housekeeping = time.monotonic() + housekeeping.INTERVAL_SECONDS
                        housekeeping.delete_expired()
                    busy = self.run_once(stop, wait=False)
                except UNAVAILABLE_ERRORS as error:
                    log.warning("database unavailable; retrying shortly: %s", error_summary(error))
                    self.abandoned = True
                    discard_connection()
                    busy = 0
                except Exception:
                    log.exception("worker cycle failed; retrying shortly")
                    self.abandoned = True
                    discard_connection()
                    busy = 0
                if not busy:
                    stop.wait(self.config.worker_poll_seconds)
        finally:
            self.close()
            log.info("worker stopped owner=%s", self.owner)

    def close(self) -> None:
        """Record what is left, stop the bookkeeper and drop the upstream connection."""
        self.books.stop()
        self.relay.close()

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
            released = release_leases(self.owner)
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
        self.signer.load(t.account_id for t in transmissions.values())
        self.return_paths.load(t.account_id for t in transmissions.values())
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
        if message is not None and (message.tracked or not message.is_transactional):
            # Tracking URLs and unsubscribe links name the recipient, so each recipient gets a
            # copy of its own.
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
        built = None
        try:
            if message is None:
                raw = transmission.raw
            elif personal:
                raw = compose_message(
                    self.personal_message(message, recipients[0].id), transmission.message_id
                )
            else:
                raw = compose_message(message, transmission.message_id)
                built = (transmission.id, raw)
        except Exception as error:
            self.unbuildable(transmission, recipients, error)
            return
        # Simulator mailboxes never reach the relay: their outcome is made up here.
        results: dict[str, RecipientResult] = {
            r.address: simulator.simulate(r.address, r.attempts + 1)
            for r in recipients
            if simulator.is_simulated(r.address)
        }
        relayed = [r for r in recipients if r.address not in results]
        # Read from the stored From header: once per copy, not once per recipient and use.
        from_domain = transmission.from_domain
        for index, recipient in enumerate(relayed):
            token = self.return_paths.token(recipient.id)
            # Signed last, over the very bytes relayed; what is kept for retries stays
            # unsigned, so a retry is signed with whichever key is active then.
            copy = self.signer.sign(
                self.return_paths.header(token) + raw, transmission.account_id, from_domain
            )
            mail_from = self.return_paths.address(token, transmission.account_id, from_domain)
            with self.books.in_flight(), timed_relay():
                result = self.relay.send(
                    mail_from,
                    [recipient.address],
                    copy,
                    reference=transmission.id,
                    # What compose wrote has CRLF line ends only; submitted bytes are checked.
                    crlf_clean=message is not None,
                )
            results.update(result.by_recipient())
            (outcome,) = result.recipients
            if outcome.outcome == DEFERRED and outcome.code in (0, 421):
                # The relay is unreachable, timed out or closing: trying each remaining
                # recipient would wait out the same failure once per recipient.
                for rest in relayed[index + 1 :]:
                    results[rest.address] = replace(outcome, recipient=rest.address)
                break
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

    def personal_message(self, message: OutgoingMessage, recipient_id: str) -> OutgoingMessage:
        """The copy of ``message`` for one recipient: its tracking URLs, and for mail that is
        not transactional its one-click unsubscribe headers (in place of any the sender gave:
        a message has one List-Unsubscribe)."""
        if message.tracked:
            html = self.tracker.track_html(
                message.html,
                recipient_id,
                opens=message.open_tracking,
                clicks=message.click_tracking,
            )
            message = message.with_html(html)
        if not message.is_transactional:
            kept = tuple(h for h in message.headers if h.name.lower() not in UNSUBSCRIBE_HEADERS)
            message = replace(
                message, headers=(*kept, *self.unsubscribe_tokens.headers(recipient_id))
            )
        return message


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
        self.held: set[str] = set()
        self.attempt_started: float | None = None
        self.renewed_at = 0.0
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
            self.held.update(r.id for group in groups for r in group)
            self.renewed_at = time.monotonic()  # the claim itself set the lease

    def next_group(self, stop: threading.Event | None) -> list[ClaimedRecipient] | None:
        """The next group to send, or None when the batch is done (or handed back)."""
        with self.lock:
            while self.unrecorded_count >= MAX_UNRECORDED and not self.stopping:
                self.lock.wait(0.1)
            if stop is not None and stop.is_set():
                return None
            if time.monotonic() - self.renewed_at > self.lease / 2:
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
            self.held.difference_update(ids)
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
                        if not self.unrecorded and not self.held and not self.queued:
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
        with self.lock:
            ids = list(self.held)
        if not ids:
            return
        try:
            database.connect(reuse_if_open=True)
            held = renew_leases(self.worker.owner, ids, self.lease)
        except UNAVAILABLE_ERRORS as error:
            log.warning("could not renew leases: %s", error_summary(error))
            discard_connection()
            return
        with self.lock:
            self.renewed_at = time.monotonic()
            lost = set(ids) - held
            if lost:
                # Another worker took these over (this one was presumed dead): leave them.
                log.warning("lost the lease of %d emails", len(lost))
                self.held.difference_update(lost)
                self.queued = collections.deque(
                    kept for group in self.queued if (kept := [r for r in group if r.id in held])
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
        with self.lock:
            self.held.difference_update(ids)
            self.recording = 0
            self.lock.notify_all()

    def _release(self, ids: list[str]) -> None:
        try:
            database.connect(reuse_if_open=True)
            released = release(self.worker.owner, ids)
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
