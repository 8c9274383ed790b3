"""The sender: the only code that talks to the upstream server."""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Sequence

from layang.config import Config
from layang.db import UNAVAILABLE_ERRORS, database, discard_connection, error_summary
from layang.metrics import timed_relay
from layang.models import Recipient, Transmission
from layang.sending.compose import compose_message
from layang.sending.message import OutgoingMessage
from layang.sending.outbox import (
    Attempt,
    RetryPolicy,
    claim_due_recipients,
    record_attempts,
    release_leases,
    renew_lease,
)
from layang.sending.relay import BOUNCED, RecipientResult, Relay, relay_from_url
from layang.sending.tracking import Tracker

log = logging.getLogger("layang.worker")

# Outcomes are recorded in one transaction per this many recipients (or this much time):
# one commit per message cost as much as the SMTP transaction itself. Should the worker die
# between a send and the next flush, at most these are sent again by another worker; nothing
# is ever lost.
FLUSH_RECIPIENTS = 16
FLUSH_SECONDS = 0.25


class Worker:
    """Claims due emails in batches, relays them, records each recipient's outcome."""

    def __init__(self, config: Config, relay: Relay | None = None, name: str | None = None) -> None:
        self.config = config
        self.owner = name or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.relay = relay or relay_from_url(config.relay_url, helo_name=socket.gethostname())
        self.policy = RetryPolicy(config.retry_base_seconds, config.max_delivery_seconds)
        self.tracker = Tracker(config.secret_key, config.public_url)
        # Set when a cycle broke off: the rest of its batch is handed back once the database
        # answers again, rather than waiting for the lease to run out.
        self.abandoned = False
        self.pending: list[Attempt] = []
        self.pending_count = 0
        self.pending_since: float | None = None

    def run(self, stop: threading.Event) -> None:
        """Work until ``stop`` is set; finishes the message in hand before returning."""
        log.info("worker started owner=%s", self.owner)
        try:
            while not stop.is_set():
                try:
                    busy = self.run_once(stop)
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
            self.relay.close()
            log.info("worker stopped owner=%s", self.owner)

    def run_once(self, stop: threading.Event | None = None) -> int:
        """Claim one batch and attempt every email in it; returns how many were claimed."""
        database.connect(reuse_if_open=True)
        if self.abandoned:
            released = release_leases(self.owner)
            self.abandoned = False
            if released:
                log.info("released %d emails of a broken-off batch", released)
        lease = self.config.lease_seconds
        claimed = claim_due_recipients(self.owner, self.config.worker_batch_size, lease)
        groups: dict[str, list[Recipient]] = {}
        for recipient in claimed:
            groups.setdefault(recipient.transmission_id, []).append(recipient)
        transmissions = {
            t.id: t for t in Transmission.select().where(Transmission.id.in_(list(groups)))
        }
        leased_at = time.monotonic()
        try:
            for transmission_id, recipients in groups.items():
                if stop is not None and stop.is_set():
                    break  # the unsent rest goes back to the queue when the lease runs out
                if time.monotonic() - leased_at > lease / 2:
                    self.flush()
                    held = renew_lease(self.owner, [r.id for r in recipients], lease)
                    recipients = [r for r in recipients if r.id in held]
                    leased_at = time.monotonic()
                    if not recipients:
                        continue
                self.deliver(transmissions[transmission_id], recipients)
        finally:
            self.flush()
        return len(claimed)

    def deliver(self, transmission: Transmission, recipients: Sequence[Recipient]) -> None:
        message = None
        if transmission.raw is None:
            try:
                message = OutgoingMessage.from_payload(json.loads(transmission.payload))
            except Exception as error:
                self.unbuildable(transmission, recipients, error)
                return
        if message is not None and message.tracked:
            # Tracking URLs name the recipient, so each recipient gets a copy of its own.
            for recipient in recipients:
                self.attempt(transmission, [recipient], message, tracked=True)
        else:
            self.attempt(transmission, recipients, message, tracked=False)

    def attempt(
        self,
        transmission: Transmission,
        recipients: Sequence[Recipient],
        message: OutgoingMessage | None,
        *,
        tracked: bool,
    ) -> None:
        """One delivery attempt of one copy of the message to ``recipients``."""
        addresses = [r.address for r in recipients]
        built = None
        try:
            if message is None:
                raw = bytes(transmission.raw)
            elif tracked:
                raw = compose_message(
                    self.tracked_message(message, recipients[0].id), transmission.message_id
                )
            else:
                raw = compose_message(message, transmission.message_id)
                built = (transmission.id, raw)
        except Exception as error:
            self.unbuildable(transmission, recipients, error)
            return
        with timed_relay():
            result = self.relay.send(
                transmission.mail_from, addresses, raw, reference=transmission.id
            )
        self.add_pending(Attempt(recipients, result.by_recipient(), built))

    def unbuildable(
        self, transmission: Transmission, recipients: Sequence[Recipient], error: Exception
    ) -> None:
        """A message that cannot be built never will be: it bounces at once with the reason,
        rather than being retried for days."""
        log.error("could not build message tid=%s: %s", transmission.id, error)
        reply = f"message could not be built: {error}"
        results = {r.address: RecipientResult(r.address, 0, reply, BOUNCED) for r in recipients}
        self.add_pending(Attempt(recipients, results))

    def add_pending(self, attempt: Attempt) -> None:
        self.pending.append(attempt)
        self.pending_count += len(attempt.recipients)
        if self.pending_since is None:
            self.pending_since = time.monotonic()
        if (
            self.pending_count >= FLUSH_RECIPIENTS
            or time.monotonic() - self.pending_since >= FLUSH_SECONDS
        ):
            self.flush()

    def flush(self) -> None:
        """Record the outcomes of the attempts made since the last flush, in one transaction."""
        if not self.pending:
            return
        attempts, self.pending = self.pending, []
        self.pending_count, self.pending_since = 0, None
        recorded = self.record(attempts)
        for attempt in attempts:
            for recipient in attempt.recipients:
                if recipient.id in recorded:
                    log.info(
                        "%s tid=%s rid=%s rcpt=%s reply=%s",
                        recorded[recipient.id].lower(),
                        recipient.transmission_id,
                        recipient.id,
                        recipient.address,
                        json.dumps(attempt.results[recipient.address].reply),
                    )

    def record(self, attempts: Sequence[Attempt]) -> dict[str, str]:
        """``record_attempts``, retried through a database outage for up to one lease.

        The mail has already gone out: recording it late beats sending it again once the lease
        runs out. Retrying is safe because only the lease holder's rows are updated.
        """
        deadline = time.monotonic() + self.config.lease_seconds
        while True:
            try:
                return record_attempts(self.owner, attempts, self.policy)
            except UNAVAILABLE_ERRORS as error:
                if time.monotonic() >= deadline:
                    raise
                log.warning("could not record outcome, retrying: %s", error_summary(error))
                discard_connection()
                time.sleep(min(1.0, self.config.lease_seconds / 10))

    def tracked_message(self, message: OutgoingMessage, recipient_id: str) -> OutgoingMessage:
        html = self.tracker.track_html(
            message.html,
            recipient_id,
            opens=message.open_tracking,
            clicks=message.click_tracking,
        )
        return message.with_html(html)
