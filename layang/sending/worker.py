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
from layang.db import database
from layang.models import Recipient, Transmission
from layang.sending.compose import compose_message
from layang.sending.outbox import (
    RetryPolicy,
    claim_due_recipients,
    record_results,
    renew_lease,
)
from layang.sending.relay import RecipientResult, Relay, SendResult, relay_from_url

log = logging.getLogger("layang.worker")


class Worker:
    """Claims due emails in batches, relays them, records each recipient's outcome."""

    def __init__(self, config: Config, relay: Relay | None = None, name: str | None = None) -> None:
        self.config = config
        self.owner = name or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.relay = relay or relay_from_url(config.relay_url, helo_name=socket.gethostname())
        self.policy = RetryPolicy(config.retry_base_seconds, config.max_delivery_seconds)

    def run(self, stop: threading.Event) -> None:
        """Work until ``stop`` is set; finishes the message in hand before returning."""
        log.info("worker started owner=%s", self.owner)
        try:
            while not stop.is_set():
                try:
                    busy = self.run_once(stop)
                except Exception:
                    log.exception("worker cycle failed; retrying shortly")
                    if not database.is_closed():
                        database.close()
                    busy = 0
                if not busy:
                    stop.wait(self.config.worker_poll_seconds)
        finally:
            self.relay.close()
            log.info("worker stopped owner=%s", self.owner)

    def run_once(self, stop: threading.Event | None = None) -> int:
        """Claim one batch and attempt every email in it; returns how many were claimed."""
        database.connect(reuse_if_open=True)
        lease = self.config.lease_seconds
        claimed = claim_due_recipients(self.owner, self.config.worker_batch_size, lease)
        groups: dict[str, list[Recipient]] = {}
        for recipient in claimed:
            groups.setdefault(recipient.transmission_id, []).append(recipient)
        leased_at = time.monotonic()
        for transmission_id, recipients in groups.items():
            if stop is not None and stop.is_set():
                break  # the unsent rest goes back to the queue when the lease runs out
            if time.monotonic() - leased_at > lease / 2:
                held = renew_lease(self.owner, [r.id for r in recipients], lease)
                recipients = [r for r in recipients if r.id in held]
                leased_at = time.monotonic()
                if not recipients:
                    continue
            self.deliver(transmission_id, recipients)
        return len(claimed)

    def deliver(self, transmission_id: str, recipients: Sequence[Recipient]) -> None:
        transmission = Transmission.get_by_id(transmission_id)
        addresses = [r.address for r in recipients]
        built = None
        try:
            if transmission.raw is not None:
                raw = bytes(transmission.raw)
            else:
                raw = compose_message(json.loads(transmission.payload), transmission.message_id)
                built = (transmission.id, raw)
        except Exception as error:
            log.exception("could not build message tid=%s", transmission_id)
            reply = f"message could not be built: {error}"
            result = SendResult(tuple(RecipientResult(a, 0, reply, "deferred") for a in addresses))
        else:
            result = self.relay.send(
                transmission.mail_from, addresses, raw, reference=transmission_id
            )
        outcomes = result.by_recipient()
        recorded = record_results(self.owner, recipients, outcomes, self.policy, built)
        for recipient in recipients:
            if recipient.id in recorded:
                outcome = outcomes[recipient.address]
                log.info(
                    "%s tid=%s rid=%s rcpt=%s reply=%s",
                    recorded[recipient.id].lower(),
                    transmission_id,
                    recipient.id,
                    recipient.address,
                    json.dumps(outcome.reply),
                )
