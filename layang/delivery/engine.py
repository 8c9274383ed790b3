"""The delivery engine: many sessions in flight at once, on one asyncio event loop.

The threads of a worker process, and what each owns:

- **The worker's thread** (:mod:`layang.delivery.worker`) claims due recipients under a lease,
  builds each copy (compose, DKIM: CPU work, never on the loop) and hands them over as
  :class:`Job`\\ s with :meth:`Engine.submit`. It claims more only while the engine's
  backlog is below about a second of sending (:meth:`Engine.wait_below`).
- **The engine's thread** runs the event loop (:class:`~layang.queueing.bridge.LoopThread`):
  only network I/O and the engine's own bookkeeping run there. Each job joins the ready queue
  of its destination (the smarthost, the capture directory, the simulator; with ``mx:`` each
  recipient domain's site, once resolved). A destination runs up to its limit of sessions,
  each reused for many transactions; a job that waits for its destination never holds up
  another destination's.
- **The bookkeeper's thread** (the worker's recorder) takes each outcome (:class:`Ledger`),
  records them in batches, and keeps the leases of everything the worker holds alive.
- **A few threads for blocking calls**: the sites' shared state in the database
  (:mod:`layang.delivery.offloop`), and the synchronous transports (capture, simulator) behind
  the transport seam (:mod:`layang.delivery.transports`).

The life of one job, step by step (:meth:`Engine._step`): *ensure a session* (an idle one, or a
new one: room in the pool, a slot of the site, the transport opens it), *check the transport
policy* (a REQUIRETLS message bounces on a session that cannot carry it), *wait for the site's
rate*, *transact* (the message's end waits for :class:`~layang.delivery.admission.Admission`),
*report to the site* (a slow-down halves its limit and holds its mail), *settle what waits
behind a destination that went away*, and *keep or retire the session*. The outcome goes to
the ledger at once. A session to an MX site has a deadline for its set-up and for each
transaction, and one account's mail keeps at most its share of the sessions busy while
another account's waits (:mod:`~layang.delivery.shares`; docs/delivery.md, "Sessions").

The parts (the ready queues of :mod:`~layang.delivery.jobs`, the MX look-ups of
:mod:`~layang.delivery.lookups`, :mod:`~layang.delivery.pool`, :mod:`~layang.delivery.slots`,
:mod:`~layang.delivery.admission`, and :mod:`~layang.delivery.settling`, the ways a job leaves)
own their state and are called by the engine; none calls back: what a part has to say, it
returns.

Why at most ``MAX_UNRECORDED`` copies are sent twice after a crash: see
:mod:`layang.delivery.admission`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

from layang.delivery.admission import MAX_UNRECORDED, Admission
from layang.delivery.direct import TlsReport
from layang.delivery.envelope import Envelope
from layang.delivery.jobs import Destination, Job, Ledger, ReadyQueues
from layang.delivery.lookups import DomainLookups
from layang.delivery.offloop import OffLoop
from layang.delivery.outcomes import BOUNCED, DEFERRED, RecipientResult
from layang.delivery.pool import Pooled, SessionPool
from layang.delivery.settling import Settling
from layang.delivery.shares import AccountShares
from layang.delivery.slots import DOMAIN_REFUSALS, SiteSlots
from layang.delivery.transports import Refused, Stale
from layang.destinations import sites, tlsrpt
from layang.destinations.sites import reply_codes
from layang.queueing.bridge import LoopSignal, LoopThread

__all__ = ["MAX_UNRECORDED", "Engine", "Job", "Ledger"]

log = logging.getLogger("layang.engine")

BLOCKED_SECONDS = 1.0
"""A site refused a new session (at its limit across processes) is asked again after this."""
TICK_SECONDS = 0.5
"""The engine's housekeeping runs this often while it has anything open or queued."""
PLAINTEXT = {"version": None, "cipher": None, "verified": False, "policy": "none"}
"""What a delivery event says of TLS for a session to an MX host without it."""


class Engine:
    """Runs jobs on an event loop in a thread of its own. ``submit``, ``wait_below``,
    ``take_queued`` and ``close`` are for the worker's thread; ``recorded`` (a
    :class:`~layang.queueing.bridge.LoopSignal`) is set by the ledger's."""

    def __init__(
        self,
        ledger: Ledger,
        *,
        connections: int,
        stall_seconds: float,
        lease_fresh: Callable[[], bool],
        recorded: LoopSignal,
        owner: str = "",
        lease_seconds: float = 60.0,
        throttle: sites.Throttle | None = None,
        setup_seconds: float = 60.0,
        transaction_seconds: float = 300.0,
    ) -> None:
        """``stall_seconds``: a destination whose every session waited this long for a reply
        hands back what waits behind them; ``lease_fresh()`` says whether the worker's leases
        surely still hold (no transaction starts otherwise). ``setup_seconds`` and
        ``transaction_seconds``: the most a session to an MX site may take to be set up, and
        one transaction on it (past them, the mail is a ``Delay``)."""
        self.connections = max(1, connections)
        self.setup_seconds = setup_seconds
        self.transaction_seconds = transaction_seconds
        self.shares = AccountShares(self.connections)
        self.settling = Settling(ledger, self.shares)  # its backlog: jobs not gone yet
        self.stall_seconds = stall_seconds
        self.lease_fresh = lease_fresh
        self.pool = SessionPool(self.connections)
        self.offloop = OffLoop()
        self.slots = SiteSlots(self.offloop, owner, lease_seconds, throttle or sites.DEFAULT)
        self.lookups = DomainLookups(self.offloop)
        self.admission = Admission(ledger.unrecorded_total, recorded)
        self.ready = ReadyQueues(self.connections)
        self._work = asyncio.Event()  # jobs came: the idle tick wakes
        self.runtime = LoopThread("engine")
        self._ticking = self.runtime.start(self._tick())

    @property
    def pending(self) -> int:
        """Jobs submitted and not finished (queued or in flight)."""
        return self.settling.backlog.count

    # -- from the worker's thread --------------------------------------------------------

    def submit(self, jobs: Iterable[Job]) -> None:
        """Queue ``jobs`` for their destinations."""
        jobs = list(jobs)
        if jobs:
            self.settling.backlog.add(len(jobs))
            self.runtime.call_soon(self._enqueue, jobs)

    def wait_below(self, count: int, timeout: float) -> None:
        """Block until fewer than ``count`` jobs are pending, or ``timeout`` passes."""
        self.settling.backlog.wait_below(count, timeout)

    def crowding_accounts(self) -> set[int]:
        """The accounts whose mail keeps their share of the sessions busy with more of it
        queued behind (a hint, read off the loop: the worker claims others' mail too)."""
        return self.shares.crowding()

    def take_queued(self) -> list[Job]:
        """Remove and return every job not started yet (to hand back to the queue)."""
        return self.runtime.call(self._take_queued(), 10)

    def close(self) -> None:
        """Close every session, give back every slot, and stop the loop."""
        self.runtime.stop(self._close_all())
        self.offloop.shutdown()

    # -- queueing --------------------------------------------------------------------------

    def _enqueue(self, jobs: list[Job]) -> None:
        self._work.set()
        touched = {}
        for job in jobs:
            self.shares.arrived(job)
            if job.route.sited:
                if (domain := self.lookups.wait(job)) is not None:
                    self.runtime.loop.create_task(self._resolve(job.route.transport, domain))
                continue
            destination = self.ready.for_job(job)
            destination.queue.append(job)
            touched[destination.key] = destination
            if destination.site is not None:  # a smarthost: the site every domain's mail is at
                self.lookups.relayed(job, destination.site)
        for destination in touched.values():
            self._pump(destination)

    async def _resolve(self, route: Any, domain: str) -> None:
        """Resolve ``domain`` and queue its waiting jobs on its site (or settle them)."""
        resolution = await self.lookups.resolve(route, domain)
        for job, result in resolution.settled:
            self.settling.finish(job, result)
        for resolved, policy, jobs in resolution.queues:
            self._pump(self.ready.for_resolved(resolved, policy, jobs))

    def _pump(self, destination: Destination) -> None:
        """Start runners for ``destination``'s queue, up to its limit."""
        limit = destination.limit
        if destination.blocked_until > time.monotonic():
            # While no new session may open, only idle ones take jobs.
            limit = min(limit, destination.runners + self.pool.idle(destination.key))
        while (
            destination.queue
            and destination.runners < limit
            and destination.waiting < len(destination.queue)
            and self.shares.under_share(destination.queue) is not None
        ):
            destination.runners += 1
            destination.waiting += 1
            self.runtime.loop.create_task(self._runner(destination))

    # -- one runner: a session and the jobs it carries ------------------------------------

    async def _runner(self, destination: Destination) -> None:
        session = self.pool.take_idle(destination.key)
        try:
            while destination.queue or (session is not None and session.primed is not None):
                if not self.lease_fresh():
                    # The leases may lapse before a transaction ends: leave the rest.
                    self.settling.give_back(destination)
                    break
                if destination.paused:
                    break
                if session is not None and session.closed:
                    self._unprime(session)
                    session = None
                if session is None:
                    session = self.pool.take_idle(destination.key)
                if session is None:
                    if destination.blocked_until > time.monotonic():
                        # No new session may open now: the tick tries again, not a loop here.
                        break
                    # A session takes mail only once it is ready (greeted, EHLO, STARTTLS):
                    # the mail waits in the queue meanwhile, for whichever session is ready
                    # first, never on one a server leaves unanswered (CONTRACT section 19).
                    session = await self._ready_session(destination)
                    if session is None:
                        break
                    continue  # the setup took time: look at the lease, pause and queue again
                job = self._unprime(session, queue=False) or self.shares.take(destination.queue)
                if job is None:
                    # Every account queued here has its share of the sessions while others
                    # wait: this session goes idle (to be closed for them); the tick comes back.
                    break
                if not session.may_carry(job):
                    # Connected to a host this job's domain does not name (its MX set or
                    # policy changed meanwhile): never hand its mail to another domain's server.
                    destination.queue.appendleft(job)
                    await self._close(session)
                    session = None
                    continue
                destination.waiting -= 1
                self.shares.started(job.account)
                try:
                    session = await self._step(destination, session, job)
                except Exception as error:  # a bug must not leave the job unfinished
                    log.exception("delivery to %s failed", destination.key)
                    if session is not None:
                        await self._close(session)
                        session = None
                    if not job.finished:
                        reply = f"451 4.3.0 local error: {error}"
                        self.settling.finish(
                            job, RecipientResult(job.recipient.address, 0, reply, DEFERRED)
                        )
                finally:
                    self.shares.stopped(job.account)
                    if job.admitted:
                        job.admitted = False
                        self.admission.release()
                    destination.waiting += 1
        finally:
            destination.waiting -= 1
            destination.runners -= 1
            if session is not None and session.primed is not None:
                await self._close(session)  # its begun transaction goes back to the queue
            elif session is not None and not session.closed:
                self.pool.park(destination.key, session)
            if destination.queue:
                self._pump(destination)

    async def _step(
        self, destination: Destination, session: Pooled | None, job: Job
    ) -> Pooled | None:
        """Run ``job`` on the ready ``session``; returns the session to go on with (None:
        none)."""
        if not self._meets_policy(destination, session, job):
            return session
        await self._wait_for_rate(destination)
        result = await self._transact(destination, session, job)
        if result is None:  # a stale reused session: the job is queued again
            return None
        await self._report_to_site(destination, session, result)
        self._settle_if_gone(destination, session, result)
        return await self._keep_or_retire(destination, session)

    async def _ready_session(self, destination: Destination) -> Pooled | None:
        """A new session to ``destination``, set up for the first job in its queue whose
        account is under its share (the job stays queued: any ready session may take it).
        None: none could be had now. A server that refused it while other sessions of this
        process carry the destination's mail only lowers the site's limit; with none, the queue
        is settled with the refusal (one unreachable server is not tried once per recipient)."""
        if not destination.queue:
            return None
        job = self.shares.under_share(destination.queue)
        if job is None:
            return None  # every account queued here has its share of the sessions
        # A session being set up counts towards its account's share, as a busy one does: an
        # account at slow servers may not fill every session with setups either.
        self.shares.started(job.account)
        try:
            return await self._set_up(destination, job)
        finally:
            self.shares.stopped(job.account)

    async def _set_up(self, destination: Destination, job: Job) -> Pooled | None:
        if destination.site is not None:
            slot = await self._site_slot(destination)
            if slot is None:
                return None
        else:
            slot = ""
        await self._make_room()
        self.pool.reserve()
        try:
            opened = await self._open(destination, job)
        except Refused as refused:
            self.pool.unreserve()
            await self._report_tls(refused.reports)
            carried = self.pool.carrying(destination.key) > 0  # busy or idle
            if destination.site is not None:
                if slot:
                    self._keep_slot(destination.site, slot)
                await self.slots.refused(destination.site, refused, destination.ceiling)
                code = refused.code if 400 <= refused.code < 500 else 0
            else:
                code = refused.code
            if carried and refused.kind not in DOMAIN_REFUSALS:
                return None
            result = RecipientResult("", code, refused.reply, DEFERRED)
            if refused.kind in DOMAIN_REFUSALS and job.mx is not None:
                # The domain's own policy: a Delay of that domain's mail, no one else's.
                self.settling.fail_queue(destination, result, domain=job.mx.domain)
            else:
                self.settling.fail_queue(destination, result)
            return None
        await self._report_tls(getattr(opened, "reports", ()))
        pooled = self.pool.adopt(opened, destination.site, destination.key)
        pooled.slot = slot or None
        return pooled

    async def _open(self, destination: Destination, job: Job) -> Any:
        """A new session of ``destination``'s transport for ``job``; one to an MX site must be
        set up within ``setup_seconds`` (all its hosts tried), else :class:`Refused`."""
        if destination.site is None:
            return await destination.route.transport.open(job)
        try:
            async with asyncio.timeout(self.setup_seconds):
                return await destination.route.transport.open(job)
        except TimeoutError:
            seconds = f"{self.setup_seconds:g}"
            reply = f"451 4.4.1 no session to {destination.site} set up within {seconds} s"
            raise Refused("connect", 451, reply) from None

    async def _site_slot(self, destination: Destination) -> str | None:
        """A slot of ``destination``'s site for a new session (``""``: go without one), or
        None: a paused or suspended site has its waiting mail held (a ``Delay`` once, with
        the reason) unless a throttled site's open sessions here carry it on; a site at its
        limit across processes keeps it queued here a moment."""
        site, ceiling = destination.site, destination.ceiling
        assert site is not None
        slot = await self.slots.take(site, ceiling, self.pool.holding(site))
        if slot is not None:
            return slot
        view = await self.slots.gate(site, ceiling)
        if view is not None and not view.open:
            if view.state == "suspended" or not self.pool.carrying(destination.key):
                self._hold_site(destination, view.until_ms, view.reason or view.state)
            else:
                # Throttled: no new session for now, the open ones go on at the lowered limit.
                destination.blocked_until = time.monotonic() + BLOCKED_SECONDS
        else:
            # Tried again by the tick, or at once when this process frees a slot there.
            destination.blocked_until = time.monotonic() + BLOCKED_SECONDS
        return None

    def _meets_policy(self, destination: Destination, session: Pooled, job: Job) -> bool:
        """Whether ``session`` may carry ``job`` (REQUIRETLS, RFC 8689); else it bounces."""
        if not job.envelope.requiretls:
            return True
        refusal = destination.route.transport.refusal(session.inner, job)
        if refusal is None:
            return True
        self.settling.finish(job, RecipientResult(job.recipient.address, 550, refusal, BOUNCED))
        return False

    async def _wait_for_rate(self, destination: Destination) -> None:
        if destination.rule is not None and destination.rule.rate:
            assert destination.site is not None
            wait = await self.slots.wait_for_rate(destination.site, destination.rule.rate)
            if wait > 0:
                await asyncio.sleep(wait)

    async def _transact(
        self, destination: Destination, session: Pooled, job: Job
    ) -> RecipientResult | None:
        """One transaction; its outcome goes to the ledger. None when the session was found
        stale before anything was sent: ``job`` is queued again, first, for a new session."""
        job.started = time.monotonic()
        destination.in_flight[job] = job.started
        limit = self.transaction_seconds if destination.site is not None else None
        try:
            async with asyncio.timeout(limit) as job.deadline:
                (result,) = await session.inner.send(
                    job.envelope,
                    lambda: self._admit(job),
                    following=lambda: self._prime(destination, session, job),
                )
        except Stale:
            await self._close(session)
            destination.queue.appendleft(job)
            return None
        except TimeoutError:
            if job.deadline is None or not job.deadline.expired():
                raise
            # The server may have the message by now: the next try may send it again, as
            # after any lost connection; a slow server keeps a session no longer than this.
            await self._close(session, abort=True)
            host = getattr(session.inner, "host", None) or destination.key
            reply = f"451 4.4.2 transaction with {host} not finished within {limit:g} s"
            result = RecipientResult(job.recipient.address, 0, reply, DEFERRED)
        finally:
            job.deadline = None
            destination.in_flight.pop(job, None)
        job.detail = {"durationMs": int((time.monotonic() - job.started) * 1000)}
        job.detail.update(session.detail())
        if destination.route.sited and job.detail.get("tls") is None:  # direct to MX
            job.detail["tls"] = dict(PLAINTEXT)
        self.settling.finish(job, result)
        return result

    def _prime(self, destination: Destination, session: Pooled, current: Job) -> Envelope | None:
        """The job ``session`` carries after ``current``, taken now so that its first commands
        go out behind ``current``'s end (one round trip a message: ``SmtpSession.send``); None
        when the next transaction should not begin yet (the runner's checks would stop it).
        ``current``'s session is the one the next job takes: it counts for neither account's
        share meanwhile."""
        if (
            session.retiring
            or session.transactions >= destination.per_session
            or destination.paused
            or (destination.rule is not None and destination.rule.rate)
            or not self.lease_fresh()
        ):
            return None
        job = self.shares.take(destination.queue, replacing=current)
        if job is None:
            return None
        if job.envelope.requiretls or not session.may_carry(job):
            destination.queue.appendleft(job)  # for the runner to handle as it would
            return None
        session.primed = (destination, job)
        return job.envelope

    def _unprime(self, session: Pooled, *, queue: bool = True) -> Job | None:
        """Take back the job ``session`` had begun (its body never went out), queued again
        first unless ``queue`` is false; None: none."""
        if session.primed is None:
            return None
        (destination, job), session.primed = session.primed, None
        if queue:
            destination.queue.appendleft(job)
            self._pump(destination)
        return job

    async def _admit(self, job: Job) -> None:
        """Just before the message's end: wait for room under the unrecorded cap (which is
        not the server's time: the transaction's deadline moves on by as much)."""
        if self.admission.try_admit():
            job.admitted = True
            return
        deadline, left = job.deadline, None
        loop = asyncio.get_running_loop()
        if deadline is not None and (when := deadline.when()) is not None:
            left = when - loop.time()
            deadline.reschedule(None)
        await self.admission.admit()
        job.admitted = True
        if deadline is not None and left is not None:
            deadline.reschedule(loop.time() + left)

    async def _report_to_site(
        self, destination: Destination, session: Pooled, result: RecipientResult
    ) -> None:
        site = destination.site
        if site is None or not self.slots.worth_telling(site, result):
            return
        assert destination.rule is not None
        view = await self.slots.told(site, result, destination.rule.connections)
        if view is not None:  # the site said slow down
            await self._close(session)
            if not view.open:
                self._hold_site(destination, view.until_ms, view.reason or "slow down")

    def _settle_if_gone(
        self, destination: Destination, session: Pooled, result: RecipientResult
    ) -> None:
        """The destination went away (no reply, or 421 and the session closed): the jobs
        queued behind would wait out the same failure one by one. After the site was told:
        a site that asked to slow down has its queue held instead (nothing is left here)."""
        if result.outcome == DEFERRED and result.code in (0, 421) and session.closed:
            # The mail queued behind may be other accounts': it gets Layang's words, not
            # the server's reply to someone else's message.
            host = getattr(session.inner, "host", None) or "the server"
            reply = f"451 4.4.2 the session with {host} ended ({reply_codes(result.reply)})"
            self.settling.fail_queue(destination, replace(result, code=451, reply=reply))

    async def _keep_or_retire(self, destination: Destination, session: Pooled) -> Pooled | None:
        if session.closed or session.transactions >= destination.per_session or session.retiring:
            await self._close(session)
            return None
        return session

    # -- settling and handing back ------------------------------------------------------

    def _hold_site(self, destination: Destination, until_ms: int | None, reason: str) -> None:
        """Stop sending to ``destination``'s site (every MX set of it this engine sends to)
        and hand its queued mail back to wait on the site until ``until_ms``; sessions still
        open finish their transaction and close, and spare slots go back."""
        site = destination.site
        assert site is not None
        spares = self.slots.forget_spares(site)
        if spares:
            self.runtime.loop.create_task(self.slots.release(spares))
        for held in self.ready.of_site(site):
            held.paused = True
            self.settling.hold(held, site, until_ms, reason)
            self.runtime.loop.call_later(1.0, self._unpause, held)

    def _unpause(self, destination: Destination) -> None:
        destination.paused = False
        if destination.queue:
            self._pump(destination)

    async def _take_queued(self) -> list[Job]:
        jobs = self.ready.take_all()
        self.settling.let_go(jobs)
        return jobs

    # -- sessions and slots ---------------------------------------------------------------

    async def _make_room(self) -> None:
        """Close the longest idle session anywhere while every connection is in use."""
        while self.pool.full:
            session = self.pool.longest_idle()
            if session is None:
                await asyncio.sleep(0.01)
                continue
            await self._close(session)

    async def _close(self, session: Pooled, *, abort: bool = False) -> None:
        self._unprime(session)
        retiring = session.retiring
        slot = session.abort() if abort else await session.close()
        if slot is not None and session.site is not None:
            if retiring:  # another process waits for it
                await self.slots.release([slot])
            else:
                self._keep_slot(session.site, slot)

    def _keep_slot(self, site: str, slot: str) -> None:
        """Keep a freed slot for the next session to ``site``, and let a destination there
        that waited for one go on."""
        self.slots.keep(site, slot)
        for destination in self.ready.of_site(site):
            if destination.queue and destination.blocked_until:
                destination.blocked_until = 0.0
                self._pump(destination)

    async def _report_tls(self, reports: Sequence[TlsReport]) -> None:
        """Count what the sessions tried showed of TLS, for TLS-RPT (off the loop)."""
        for report in reports:
            await self.offloop.call(
                tlsrpt.record_session,
                report.domain,
                report.policy,
                report.host,
                report.succeeded,
                report.failure_type,
                report.failure,
            )

    # -- housekeeping -------------------------------------------------------------------

    async def _tick(self) -> None:
        """Close sessions idle too long; hand back what waits behind hung transactions. With
        no session open and nothing to send, sleep until jobs come (an idle worker's CPU)."""
        while True:
            if self.pool.open == 0 and self.pending == 0 and not self.slots.has_spares:
                self._work.clear()
                await self._work.wait()
            await asyncio.sleep(TICK_SECONDS)
            try:
                await self._tick_once()
            except Exception:
                log.exception("engine housekeeping failed")

    async def _tick_once(self) -> None:
        now = time.monotonic()
        await self._site_chores(now)
        for destination in self.ready:
            if (
                destination.queue
                and destination.blocked_until
                and destination.site is not None
                and destination.runners == 0
                and not self.pool.idle(destination.key)
            ):
                # Another process holds every slot of the site: its mail goes back to the
                # queue, for the process that has the sessions, instead of filling this
                # process's backlog while it waits.
                destination.blocked_until = 0.0
                self.settling.give_back(destination)
            if destination.queue and destination.blocked_until and destination.blocked_until <= now:
                destination.blocked_until = 0.0
                self._pump(destination)
            elif destination.queue and not destination.paused and not destination.blocked_until:
                self._pump(destination)  # its account's share may have room again
            sited = destination.route.sited  # an MX site: idle sessions hold its slots briefly
            for session in self.pool.expired(destination.key, now, sited):
                await self._close(session)
            if (
                destination.queue
                and destination.runners >= destination.limit
                and destination.in_flight
                and all(now - t > self.stall_seconds for t in destination.in_flight.values())
            ):
                log.info(
                    "destination %s is not answering: handing back %d emails",
                    destination.key,
                    len(destination.queue),
                )
                self.settling.give_back(destination)

    async def _site_chores(self, now: float) -> None:
        """Hold the mail of suspended sites, give back spare slots and shares, renew this
        process's slots, and write down the sites domains resolved to (for the queue views)."""
        if self.ready.any_site:
            await self._hold_suspended()
            excess = await self.slots.tick(now, self.pool.held())
            for site, count in excess.items():
                keys = [d.key for d in self.ready.of_site(site)]
                for session in self.pool.retire(site, keys, count):
                    await self._close(session)
            await self.slots.renew(now)
        await self.lookups.remember(now)

    async def _hold_suspended(self) -> None:
        """Hold the mail of every site this engine sends to that is suspended now (an operator's
        ``layang queue suspend``, from any process): within a tick, no session there starts
        another transaction (CONTRACT section 19); idle ones close, giving back their slots."""
        busy = {
            d.site
            for d in self.ready
            if d.site is not None and not d.paused and (d.queue or d.runners)
        }
        if not busy:
            return
        views = await self.offloop.call(sites.views, sorted(busy), default={})
        for site in sorted(busy):
            view = views.get(site)
            if view is None or view.state != "suspended" or view.open:
                continue
            destinations = self.ready.of_site(site)
            self._hold_site(destinations[0], view.until_ms, view.reason or view.state)
            for destination in destinations:
                while (session := self.pool.take_idle(destination.key)) is not None:
                    await self._close(session)

    async def _close_all(self) -> None:
        self._ticking.cancel()
        for session in self.pool.take_all_idle():
            await self._close(session)
        slots = self.slots.take_spares()
        for session in list(self.pool.sessions):  # still in a transaction: cut off
            slot = session.abort()
            if slot is not None:
                slots.append(slot)
        # Sessions still being set up (a slow server's greeting) are cut off too, rather than
        # left open with the loop; their jobs stay leased, to be claimed again.
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        if others:
            await asyncio.wait(others, timeout=1.0)
        await self.slots.release(slots)
