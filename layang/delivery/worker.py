"""The sender: claims due emails, builds their copies, and hands them to the delivery engine.

A worker claims due emails under a lease and builds each recipient's copy (compose, return path,
DKIM) in its own thread; the engine (:mod:`layang.delivery.engine`, where the threads of a worker
are described) sends them over many sessions at once, and the bookkeeper thread records outcomes
in batches and keeps the lease of everything the worker holds alive. The engine and the
bookkeeper meet through the engine's :class:`~layang.delivery.jobs.Ledger`, which the
bookkeeper is.

Exactly once without a crash: an email is sent only while its lease is held, and the lease is
renewed (every quarter lease) until its outcome is recorded, however long an SMTP reply takes;
no other worker can claim it meanwhile. Emails waiting behind a destination that stopped
answering are handed back so that other workers carry on with them. At least once across
crashes: a worker that dies stops renewing, and its emails are claimed again once the lease runs
out; sending never runs more than ``MAX_UNRECORDED`` recipients ahead of recording (why that
bounds what a crash sends twice: :mod:`layang.delivery.admission`).
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
from collections.abc import Callable, Collection, Iterable, Sequence

from layang.config import Config
from layang.db import UNAVAILABLE_ERRORS, database, discard_connection, error_summary
from layang.delivery.build import CopyBuilder
from layang.delivery.engine import MAX_UNRECORDED, Engine, Job
from layang.delivery.envelope import Envelope
from layang.delivery.outcomes import BOUNCED, RecipientResult
from layang.delivery.queue import (
    RECIPIENTS,
    Attempt,
    ClaimedRecipient,
    QueuedTransmission,
    claim_due_recipients,
    claim_due_recipients_besides,
    load_transmissions,
    personal_contents,
    record_attempts,
    record_suppressed,
    record_waiting,
)
from layang.delivery.routes import Router, Transport
from layang.delivery.wakeup import mail_wakeup
from layang.destinations.sites import Throttle
from layang.logs import shown_recipient
from layang.mail.breaker_levels import judge_recorded
from layang.mail.message import OutgoingMessage
from layang.mail.outbox import PersonalContent
from layang.mail.schedule import release_due
from layang.mail.suppression import applies, suppressed_recipients
from layang.metrics import recorded_outcomes, relay_latency
from layang.queueing.bridge import LoopSignal
from layang.queueing.keeper import LeaseKeeper
from layang.queueing.loop import run_until
from layang.queueing.retry import RetryPolicy
from layang.queueing.wakeup import Wakeup

log = logging.getLogger("layang.worker")
# Each attempt's outcome, one line per recipient: a logger of its own, so that it can be
# filtered or silenced apart from the worker's own news.
outcomes_log = logging.getLogger("layang.outcomes")

# A claim holds about this many seconds of sending (and at least enough to keep every
# connection busy), so that with a slow upstream several workers share the queue instead of one
# holding all of it.
BATCH_SECONDS = 1.0
FIRST_BATCH = 10
# A destination whose every session has waited this long (or half the lease, if shorter) for a
# reply hands back the emails queued behind them.
STALL_SECONDS = 10.0
# Outcomes are recorded in one transaction once this many recipients wait, or the oldest has
# waited this long, or the batch is done. Sending waits while MAX_UNRECORDED are unrecorded, so
# a quarter of that keeps several batches on their way at once.
FLUSH_RECIPIENTS = MAX_UNRECORDED // 4
FLUSH_SECONDS = 0.02
# Emails a worker handed back are left to other processes this long before it claims them
# again (a process holding the site's sessions polls at least this often), at most this many.
GIVEN_BACK_SECONDS = 2.0
MAX_GIVEN_BACK = 2000


class Worker:
    """Claims due emails in batches, has the engine relay them, records each outcome."""

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
        # Set by the bookkeeper after each batch it records: wakes sending held at the cap.
        self.recorded = LoopSignal()
        self.books = Bookkeeper(self)
        # Set when a cycle broke off: what it held is handed back once the database answers
        # again, rather than waiting for the lease to run out.
        self.abandoned = False
        self.seconds_per_message = BATCH_SECONDS / FIRST_BATCH
        self._engine: Engine | None = None
        self._wakeup: Wakeup | None = None
        self._sent = 0
        self._paced_at = time.monotonic()
        self._next_look_besides = 0.0

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = Engine(
                self.books,
                connections=self.config.worker_connections,
                stall_seconds=min(STALL_SECONDS, self.config.lease_seconds / 2),
                lease_fresh=self.leases.fresh,
                recorded=self.recorded,
                owner=self.owner,
                lease_seconds=self.config.lease_seconds,
                throttle=Throttle.from_config(self.config),
                setup_seconds=self.config.mx_setup_seconds,
                transaction_seconds=self.config.mx_transaction_seconds,
            )
        return self._engine

    def run(self, stop: threading.Event) -> None:
        """Work until ``stop`` is set; finishes the messages in flight before returning."""
        log.info("worker started owner=%s", self.owner)
        self._wakeup = mail_wakeup(self.config)
        try:
            run_until(
                stop,
                lambda: self.step(stop),
                log=log,
                idle_seconds=self.config.worker_poll_seconds,
                after_failure=self.abandon,
                chores=self.chores,
            )
        finally:
            self.close()
            self._wakeup.close()
            log.info("worker stopped owner=%s", self.owner)

    def step(self, stop: threading.Event) -> float:
        """Claim more when the engine has room; wait for new mail when none is due."""
        engine = self.engine
        target = self.backlog_target()
        if engine.pending >= max(1, target // 2):
            crowding = engine.crowding_accounts()
            if crowding and time.monotonic() >= self._next_look_besides:
                # The backlog is mail of accounts that have their share of the sessions
                # already: others' mail is claimed too, or it would wait behind it all.
                self._next_look_besides = time.monotonic() + self.config.worker_poll_seconds
                size = max(1, self.config.worker_connections // 4)
                if self.run_once(stop, wait=False, limit=size, besides=crowding):
                    return 0.0
            # Claim in larger batches: once half the backlog is sent, claim the other half.
            engine.wait_below(max(1, target // 2), self.config.worker_poll_seconds)
            return 0.0
        if self.run_once(stop, wait=False, limit=target - engine.pending):
            return 0.0
        assert self._wakeup is not None
        self._wakeup.wait(self.config.worker_poll_seconds, stop)
        return 0.0

    def abandon(self) -> None:
        self.abandoned = True

    def close(self) -> None:
        """Hand back what waits, let what is in flight finish, record it, drop connections."""
        if self._engine is not None:
            queued = self._engine.take_queued()
            if queued:
                self.books.hand_back(queued)
            self._engine.wait_below(1, self.config.lease_seconds / 2)
            self.books.stop()
            self._engine.close()
            self._engine = None
        else:
            self.books.stop()
        self.router.close()

    def backlog_target(self) -> int:
        """How many emails to hold in the engine: about ``BATCH_SECONDS`` of sending at the
        recent pace, and at least enough to keep every connection busy."""
        size = int(BATCH_SECONDS / max(self.seconds_per_message, 1e-6))
        size = max(size, self.config.worker_connections)
        return max(1, min(size, self.config.worker_batch_size))

    def batch_size(self) -> int:
        """How many emails one claim takes at most."""
        size = int(BATCH_SECONDS / max(self.seconds_per_message, 1e-6))
        size = max(size, FIRST_BATCH, self.config.worker_connections)
        return max(1, min(size, self.config.worker_batch_size))

    def run_once(
        self,
        stop: threading.Event | None = None,
        *,
        wait: bool = True,
        limit: int | None = None,
        besides: Collection[int] = (),
    ) -> int:
        """Claim one batch (of accounts other than ``besides`` only, if given) and hand every
        email in it to the engine; returns how many were claimed. With ``wait``, returns once
        every outcome is recorded (or given up on)."""
        database.connect(reuse_if_open=True)
        if self.abandoned:
            # What waits in the engine goes back to the queue; what is in flight or waiting to
            # be recorded stays held, or another worker would send it again.
            self.abandoned = False
            if self._engine is not None:
                queued = self._engine.take_queued()
                ids = [job.recipient.id for job in queued]
                self.leases.drop(ids)
                released = RECIPIENTS.release(self.owner, ids) if ids else 0
                if released:
                    log.info("released %d emails of a broken-off round", released)
        size = self.batch_size() if limit is None else min(self.batch_size(), max(limit, 1))
        if not besides:
            # Scheduled mail due by now joins the queue first (a read of an index when none).
            release_due()
        given_back = self.books.given_back()
        if besides or given_back:
            claimed = claim_due_recipients_besides(
                self.owner, besides, size, self.config.lease_seconds, excluding=given_back
            )
        else:
            claimed = claim_due_recipients(self.owner, size, self.config.lease_seconds)
        if not claimed:
            if wait:
                self.engine.wait_below(1, 1e9)
                self.books.wait_recorded()
            return 0
        groups: dict[str, list[ClaimedRecipient]] = {}
        for recipient in claimed:
            groups.setdefault(recipient.transmission_id, []).append(recipient)
        transmissions = load_transmissions(list(groups))
        self.books.keep(r.id for r in claimed)
        groups = self.without_suppressed(groups, transmissions)
        self.builder.load(t.account_id for t in transmissions.values())
        jobs: list[Job] = []
        for tid, group in groups.items():
            if stop is not None and stop.is_set():
                self.books.release_now([r.id for r in group])
                continue
            jobs.extend(self.deliver(transmissions[tid], group))
        self.engine.submit(jobs)
        self._pace(len(claimed))
        if wait:
            self.engine.wait_below(1, 1e9)
            self.books.wait_recorded()
        return len(claimed)

    def _pace(self, claimed: int) -> None:
        now = time.monotonic()
        done, self._sent = self.books.sent, self.books.sent
        elapsed = now - self._paced_at
        self._paced_at = now
        if done and elapsed > 0:
            self.seconds_per_message = 0.5 * self.seconds_per_message + 0.5 * (elapsed / done)

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
        self.leases.drop(skipped)
        kept = {tid: [r for r in group if r.id not in skipped] for tid, group in groups.items()}
        return {tid: group for tid, group in kept.items() if group}

    def deliver(
        self, transmission: QueuedTransmission, recipients: Sequence[ClaimedRecipient]
    ) -> list[Job]:
        """The jobs that send ``transmission`` to ``recipients``."""
        message = None
        if transmission.raw is None:
            try:
                message = OutgoingMessage.from_payload(json.loads(transmission.payload))
            except Exception as error:
                self.unbuildable(transmission, recipients, error)
                return []
        if transmission.personalized and message is not None:
            contents = personal_contents([r.id for r in recipients])
            jobs = []
            for recipient in recipients:
                own = contents.get(recipient.id)
                mine = message if own is None else PersonalContent.apply(message, own)
                jobs.extend(self.attempt(transmission, [recipient], mine, personal=True))
            return jobs
        if self.builder.is_personal(message):
            jobs = []
            for recipient in recipients:
                jobs.extend(self.attempt(transmission, [recipient], message, personal=True))
            return jobs
        return self.attempt(transmission, recipients, message, personal=False)

    def attempt(
        self,
        transmission: QueuedTransmission,
        recipients: Sequence[ClaimedRecipient],
        message: OutgoingMessage | None,
        *,
        personal: bool,
    ) -> list[Job]:
        """One delivery attempt of one copy of the message to ``recipients``: a job each.

        Each recipient goes in a transaction of its own, because each has its own envelope
        sender (its VERP return path) and its own ``X-Layang-Id`` header.
        """
        try:
            body = self.builder.body(transmission, message, recipients[0].id if personal else None)
        except Exception as error:
            self.unbuildable(transmission, recipients, error)
            return []
        # What was composed is kept for retries (see record_attempts), unless it is personal.
        built = (transmission.id, body) if message is not None and not personal else None
        sender = (transmission.account_id, transmission.from_domain)
        jobs = []
        for recipient in recipients:
            route = self.router.route_for(recipient.address)
            try:
                copy = self.builder.copy(transmission, body, recipient.id)
            except Exception as error:
                log.error("could not build message tid=%s: %s", transmission.id, error)
                reply = f"message could not be built: {error}"
                result = RecipientResult(recipient.address, 0, reply, BOUNCED)
                self.books.add(
                    Attempt([recipient], {recipient.address: result}, built, sender=sender)
                )
                continue
            envelope = Envelope(
                copy.mail_from,
                (recipient.address,),
                copy.data,
                # What compose wrote has CRLF line ends only; submitted bytes are checked.
                crlf_clean=message is not None,
                requiretls=transmission.require_tls,
                reference=transmission.id,
                attempt=recipient.attempts + 1,
            )
            job = Job(recipient, route, route.destination, envelope, built)
            job.stream = transmission.stream
            job.account = transmission.account_id
            job.from_domain = sender[1]
            jobs.append(job)
        return jobs

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
        sender = (transmission.account_id, transmission.from_domain)
        self.books.add(Attempt(recipients, results, sender=sender))


class Bookkeeper:
    """The worker's second thread: records outcomes and keeps the worker's leases alive.

    The engine's :class:`~layang.delivery.engine.Ledger`: it settles each job's outcome here as
    it comes (``settle``), and hands back or holds what it will not send; everything the worker
    holds (queued in the engine, in flight, sent but not yet recorded) is renewed every quarter
    lease. Releasing and recording happen in this thread, off the engine's loop; after each
    batch recorded, ``worker.recorded`` wakes sending held back at the unrecorded cap.
    """

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.lease = worker.config.lease_seconds
        self.lock = threading.Condition()
        self.unrecorded: list[Attempt] = []
        self.unrecorded_count = 0  # recipients in ``unrecorded``
        self.unrecorded_since = 0.0
        self.flush_wanted = False
        self.recording = 0  # recipients being recorded right now
        self.to_release: list[str] = []
        self._given_back: dict[str, float] = {}  # id → until (time.monotonic())
        self.to_hold: list[tuple[list[ClaimedRecipient], str, int | None, str]] = []
        self.leases = worker.leases
        self.thread: threading.Thread | None = None
        self.stopping = False
        self.sent = 0  # recipients with an outcome, since the last look (see Worker._pace)

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

    def keep(self, ids: Iterable[str]) -> None:
        """Keep the leases of ``ids`` (just claimed) alive until they are recorded or let go."""
        with self.lock:
            self._ensure_thread()
            self.leases.hold(ids)

    def busy(self) -> set[str]:
        """The ids whose outcome is waiting to be recorded."""
        with self.lock:
            return {r.id for attempt in self.unrecorded for r in attempt.recipients}

    def unrecorded_total(self) -> int:
        """Recipients sent but not recorded yet (read without the lock: a hint)."""
        return self.unrecorded_count + self.recording

    def settle(self, job: Job, result: RecipientResult) -> None:
        """Take ``job``'s outcome, to record in the next batch."""
        if job.detail.get("durationMs") is not None:
            relay_latency().observe(job.detail["durationMs"] / 1000)
        details = {job.recipient.address: job.detail} if job.detail else {}
        sender = (job.account, job.from_domain) if job.account else None
        self.add(
            Attempt([job.recipient], {job.recipient.address: result}, job.built, details, sender)
        )

    def add(self, attempt: Attempt) -> None:
        with self.lock:
            self._ensure_thread()
            if not self.unrecorded:
                self.unrecorded_since = time.monotonic()
            self.unrecorded.append(attempt)
            self.unrecorded_count += len(attempt.recipients)
            self.sent += len(attempt.recipients)
            if self.unrecorded_count >= FLUSH_RECIPIENTS:
                self.lock.notify_all()

    def hand_back(self, jobs: Sequence[Job]) -> None:
        """Release the emails of ``jobs`` (never started) to the queue, from this thread; this
        worker leaves them to others for ``GIVEN_BACK_SECONDS`` (see ``given_back``)."""
        ids = [job.recipient.id for job in jobs]
        self.leases.drop(ids)
        until = time.monotonic() + GIVEN_BACK_SECONDS
        with self.lock:
            self._ensure_thread()
            self.to_release.extend(ids)
            for recipient_id in ids:
                self._given_back[recipient_id] = until
            self.lock.notify_all()

    def given_back(self) -> list[str]:
        """The emails this worker handed back less than ``GIVEN_BACK_SECONDS`` ago (at most
        ``MAX_GIVEN_BACK``, the latest): its claims pass them over. Mail is handed back so
        that another process takes it (one that has the site's sessions, or a worker whose
        leases are fresh); claimed again at once by the same worker, it would go round
        between queue and engine and the other process might never get it."""
        now = time.monotonic()
        with self.lock:
            if not self._given_back:
                return []
            self._given_back = {i: t for i, t in self._given_back.items() if t > now}
            if len(self._given_back) > MAX_GIVEN_BACK:
                latest = sorted(self._given_back.items(), key=lambda item: item[1])
                self._given_back = dict(latest[-MAX_GIVEN_BACK:])
            return list(self._given_back)

    def hold(self, jobs: Sequence[Job], site: str, until_ms: int | None, reason: str) -> None:
        """Hand the emails of ``jobs`` back to wait on ``site`` (see ``record_waiting``), from
        this thread."""
        recipients = [job.recipient for job in jobs]
        with self.lock:
            self._ensure_thread()
            self.to_hold.append((recipients, site, until_ms, reason))
            self.lock.notify_all()

    def release_now(self, ids: list[str]) -> None:
        self.leases.drop(ids)
        if ids:
            self._release(ids)

    def wait_recorded(self) -> None:
        """Block until every outcome handed over is recorded or given up on."""
        with self.lock:
            self.flush_wanted = True
            self.lock.notify_all()
            while (
                self.unrecorded or self.recording or self.to_release or self.to_hold
            ) and self.thread:
                self.lock.wait(0.05)
            self.flush_wanted = False

    # -- the bookkeeper's thread -------------------------------------------------------------

    def run(self) -> None:
        interval = self.lease / 4
        next_renewal = time.monotonic() + interval
        try:
            while True:
                with self.lock:
                    while (
                        not self._flush_due()
                        and not self.stopping
                        and not self.to_release
                        and not self.to_hold
                    ):
                        if not self.unrecorded and not len(self.leases):
                            self.thread = None  # nothing to keep alive: end, see add/hold
                            return
                        if time.monotonic() >= next_renewal:
                            break
                        self.lock.wait(min(FLUSH_SECONDS / 2, interval))
                    batch = []
                    if self._flush_due() or self.stopping:
                        batch, self.unrecorded = self.unrecorded, []
                        self.recording, self.unrecorded_count = self.unrecorded_count, 0
                    release, self.to_release = self.to_release, []
                    holds, self.to_hold = self.to_hold, []
                    if self.stopping and not batch and not release and not holds:
                        self.thread = None
                        return
                if batch:
                    self.record(batch)
                if release:
                    self._release(release)
                for recipients, site, until_ms, reason in holds:
                    self._hold(recipients, site, until_ms, reason)
                if release or holds:
                    with self.lock:
                        self.lock.notify_all()
                if time.monotonic() >= next_renewal:
                    self.leases.renew_if_due()
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
        # The Warning goes out with the event that crossed the threshold, not with a later send.
        judge_recorded(recorded.items(), self.worker.config, senders(attempts))
        counts = collections.Counter(recorded.values())
        for status, count in counts.items():
            recorded_outcomes().labels(status).inc(count)
        if outcomes_log.isEnabledFor(logging.INFO):
            self._log_outcomes(attempts, recorded)
        ids = [r.id for attempt in attempts for r in attempt.recipients]
        self.leases.drop(ids)
        with self.lock:
            self.recording = 0
            self.lock.notify_all()
        self.worker.recorded.set()

    def _log_outcomes(self, attempts: list[Attempt], recorded: dict[str, str]) -> None:
        """One line per recorded outcome (docs/deploy.md, "Logs"): ``Delivery``, ``Delay`` or
        ``Bounce``, the transmission and recipient ids, the recipient (as
        ``LAYANG_LOG_RECIPIENTS`` says), the reply code and the reply."""
        how = self.worker.config.log_recipients
        for attempt in attempts:
            for r in attempt.recipients:
                status = recorded.get(r.id)
                if status is None:
                    continue
                result = attempt.results[r.address]
                outcomes_log.info(
                    "%s tid=%s rid=%s rcpt=%s code=%s reply=%s",
                    status,
                    r.transmission_id,
                    r.id,
                    shown_recipient(r.address, how),
                    result.code,
                    json.dumps(result.reply, ensure_ascii=False),
                )

    def _hold(
        self, recipients: list[ClaimedRecipient], site: str, until_ms: int | None, reason: str
    ) -> None:
        self.leases.drop(r.id for r in recipients)
        try:
            database.connect(reuse_if_open=True)
            delayed = record_waiting(self.worker.owner, recipients, site, until_ms, reason)
        except UNAVAILABLE_ERRORS as error:
            log.warning("could not hold %d emails: %s", len(recipients), error_summary(error))
            discard_connection()
            return
        log.info(
            "site %s waits (%s): %d emails held, %d delayed", site, reason, len(recipients), delayed
        )

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


def senders(attempts: Iterable[Attempt]) -> dict[str, tuple[int, str]]:
    """Recipient id → (account id, From domain) of the ``attempts`` whose message is known."""
    return {
        r.id: attempt.sender
        for attempt in attempts
        if attempt.sender is not None
        for r in attempt.recipients
    }
