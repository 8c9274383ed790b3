"""The webhook dispatcher: runs in a thread of every worker process, beside the mail sender.

Each round it puts waiting events into deliveries, claims due deliveries under a lease (fairly
across accounts and endpoints, at most two requests in flight to one endpoint: see
``outbox.claim_deliveries``) and POSTs them as coroutines on an event loop of its own (the
bridge every sender uses: :mod:`layang.queueing.bridge`), each within one overall deadline, so
that a slow endpoint costs a coroutine, not a slot another account's events need. The database
is used from the dispatcher's thread only. The leases of the requests in flight are renewed
every quarter lease until their outcome is recorded. A dispatcher that dies stops renewing, and
another takes its deliveries over when the lease runs out: no event is lost, and an event may
arrive twice only across such a crash.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import ssl
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait

import httpx

from layang.clock import now_ms
from layang.config import Config
from layang.db import UNAVAILABLE_ERRORS, database, discard_connection, error_summary
from layang.models import WebhookEndpoint
from layang.queueing.bridge import LoopThread
from layang.queueing.keeper import LeaseKeeper
from layang.queueing.loop import run_until
from layang.queueing.retry import RetryPolicy
from layang.queueing.wakeup import Wakeup
from layang.sealing import KeyUnavailable
from layang.tls_trust import client_ssl_context
from layang.webhooks import outbox as webhook_outbox
from layang.webhooks.outbox import ClaimedDelivery, Outcome
from layang.webhooks.wire import (
    TIMEOUT_SECONDS,
    Resolver,
    post,
    signed_headers,
    signing_secrets,
)

log = logging.getLogger("layang.webhooks")

# Requests in flight at once per dispatcher (coroutines: a waiting request costs little).
CONCURRENCY = 64
# A round that found less than a full delivery's worth of events waits this long before the
# next, so that under steady traffic events gather into fuller requests instead of each round
# taking the write lock from the mail sender for a handful.
GATHER_SECONDS = 0.2


class Dispatcher:
    """Delivers the webhook outbox until stopped."""

    def __init__(
        self,
        config: Config,
        name: str | None = None,
        *,
        timeout: float = TIMEOUT_SECONDS,
        concurrency: int = CONCURRENCY,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        """``timeout`` bounds each request as a whole (resolving, connecting, sending and
        reading); ``verify`` is how endpoints' certificates are checked (by default httpx's CA
        bundle, or the system CAs and ``LAYANG_TLS_CAFILE`` when that is set)."""
        self.config = config
        self.owner = name or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}:wh"
        self.timeout = timeout
        self.concurrency = concurrency
        if verify is True and config.tls_cafile:
            # LAYANG_TLS_CAFILE: private CAs are trusted here as everywhere Layang is a client.
            verify = client_ssl_context(config.tls_cafile)
        self.verify = verify
        self.lease = config.lease_seconds
        self.poll = config.worker_poll_seconds
        self.policy = RetryPolicy.scheduled(config.webhook_retry_schedule)
        self.leases = LeaseKeeper(webhook_outbox.DELIVERIES, self.owner, self.lease)
        self.wakeup = Wakeup(config, webhook_outbox.CHANNEL, webhook_outbox.next_due_ms)
        self.resolver = Resolver(config.dns_resolvers)
        self.client: httpx.AsyncClient | None = None
        self.runtime = LoopThread("webhook-post")
        self.in_flight: dict[Future[Outcome], ClaimedDelivery] = {}
        self.formed = 0
        self.claimed_all = False
        # Deliveries to inbound routes' endpoints, which go one at a time: when one finishes,
        # the route's next is due at once, so the next round does not wait to gather events.
        self.ordered: set[str] = set()
        self.successor_due = False

    def run(self, stop: threading.Event) -> None:
        """Work until ``stop`` is set; the requests in flight finish and are recorded first."""
        log.info("webhook dispatcher started owner=%s", self.owner)
        try:
            run_until(
                stop, lambda: self.pause(self.step(stop), stop), log=log, idle_seconds=self.poll
            )
        finally:
            self.close()
            log.info("webhook dispatcher stopped owner=%s", self.owner)

    def pause(self, busy: bool, stop: threading.Event) -> float:
        """How long to wait after a round: nothing while every slot was taken; a moment to let
        events gather into fuller requests while they trickle in; when idle, until events are
        stored or a retry is due (PostgreSQL notifies; SQLite polls)."""
        if self.successor_due:
            self.successor_due = False
            return 0.0
        if not busy:
            self.wakeup.wait(self.poll, stop)
            return 0.0
        if self.formed < webhook_outbox.EVENTS_PER_DELIVERY and not self.claimed_all:
            return min(GATHER_SECONDS, self.poll)
        return 0.0

    def close(self) -> None:
        """Let the requests in flight finish and record them, then hand back the rest."""
        try:
            while self.in_flight:
                self.collect(self.lease)
            database.connect(reuse_if_open=True)
            webhook_outbox.DELIVERIES.release(self.owner)
        except UNAVAILABLE_ERRORS as error:
            log.warning("could not record the last webhook attempts: %s", error_summary(error))
        finally:
            self.stop_loop()
            self.wakeup.close()
            discard_connection()

    def stop_loop(self) -> None:
        """Close the HTTP client and end the event loop's thread (once)."""
        self.runtime.stop(self._close_client(), timeout=self.timeout)

    async def _close_client(self) -> None:
        if self.client is not None:
            await self.client.aclose()

    def step(self, stop: threading.Event | None = None) -> bool:
        """One round: form, claim up to the free slots, collect what finished; returns whether
        there was work (so the caller polls again at once)."""
        database.connect(reuse_if_open=True)
        free = self.concurrency - len(self.in_flight)
        claimed: list[ClaimedDelivery] = []
        self.formed = 0
        if free > 0 and (stop is None or not stop.is_set()):
            if webhook_outbox.has_waiting_events():
                self.formed = webhook_outbox.form_deliveries()
            if webhook_outbox.has_due_deliveries():
                claimed = webhook_outbox.claim_deliveries(self.owner, free, self.lease)
            if claimed:
                self.start(claimed)
        # Every free slot taken: more deliveries may be due at once, do not wait.
        self.claimed_all = free > 0 and len(claimed) == free
        if self.in_flight:
            self.collect(self.config.worker_poll_seconds)
        return bool(claimed) or bool(self.in_flight)

    def start(self, claimed: list[ClaimedDelivery]) -> None:
        ids = {delivery.endpoint_id for delivery in claimed}
        endpoints = {e.id: e for e in WebhookEndpoint.select().where(WebhookEndpoint.id.in_(ids))}
        self.leases.hold(delivery.id for delivery in claimed)
        now = now_ms()
        for delivery in claimed:
            endpoint = endpoints.get(delivery.endpoint_id)
            if endpoint is None:
                self.leases.drop([delivery.id])
                continue  # deleted meanwhile: its deliveries went with it
            try:
                signing = signing_secrets(endpoint, self.config.secret_key, now)
            except KeyUnavailable as error:
                log.error("webhook secret does not open endpoint=%s: %s", endpoint.id, error)
                future: Future[Outcome] = Future()
                future.set_result(Outcome(delivery, False, None, f"secret unavailable: {error}"))
            else:
                future = self.runtime.start(self.attempt(delivery, endpoint.url, signing))
            self.in_flight[future] = delivery
            if endpoint.kind != "events":
                self.ordered.add(delivery.id)

    async def attempt(self, delivery: ClaimedDelivery, url: str, signing: list[str]) -> Outcome:
        """One POST of ``delivery`` (on the event loop; touches no database)."""
        if self.client is None:
            self.client = httpx.AsyncClient(
                timeout=self.timeout,
                verify=self.verify,
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=32),
            )
        body = delivery.body.encode()
        headers = signed_headers(signing, f"msg_{delivery.id}", int(time.time()), body)
        try:
            result = await post(
                self.client,
                url,
                headers,
                body,
                allow_private=self.config.webhook_allow_private,
                resolver=self.resolver,
                timeout=self.timeout,
            )
        except Exception as error:  # a bug must not leave the delivery held until the lease ends
            log.exception("webhook POST failed delivery=%s", delivery.id)
            return Outcome(delivery, False, None, f"internal error: {error}")
        if not result.ok:
            log.info(
                "webhook attempt failed delivery=%s status=%s error=%s",
                delivery.id,
                result.status,
                result.error,
            )
        return Outcome(delivery, result.ok, result.status, result.error)

    def collect(self, timeout: float) -> None:
        """Wait up to ``timeout`` for requests to finish, record those that did, and renew the
        leases of the rest when due."""
        done, _ = wait(list(self.in_flight), timeout=timeout, return_when=FIRST_COMPLETED)
        if done:
            outcomes = [future.result() for future in done]
            webhook_outbox.record_outcomes(self.owner, outcomes, self.policy)
            for future in done:
                finished = self.in_flight.pop(future).id
                self.leases.drop([finished])
                if finished in self.ordered:
                    self.ordered.discard(finished)
                    self.successor_due = True
        self.leases.renew_if_due()
