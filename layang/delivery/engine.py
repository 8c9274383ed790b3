"""The delivery engine: many SMTP sessions in flight at once, on one asyncio event loop.

The worker (its own thread) claims recipients, builds their copies and hands them over as
:class:`Job`s. Each job joins the ready queue of its destination (the smarthost, the capture
directory, the simulator; one per recipient domain's site with ``mx:``). A destination runs up to
its limit of sessions at once, each reused for many transactions; a job that has to wait for its
destination never holds up another destination's. Outcomes go back to the worker's bookkeeper,
which records them in batches.

Only network I/O runs on the loop: building copies (compose, DKIM) happens in the worker's thread
before a job is handed over, recording in the bookkeeper's. Transports that are not asyncio
(the capture directory, the simulator, a transport a test hands in) run in a thread, one
transaction at a time per destination.

Sending is bounded by recording: a message's end (the dot after its body, after which the server
may have taken it) goes out only while fewer than ``MAX_UNRECORDED`` recipients are past that
point and not recorded yet, so a worker killed at any moment has sent at most that many copies
that another worker will send again. Everything before the end runs freely.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from layang.db import UNAVAILABLE_ERRORS, database, discard_connection, error_summary
from layang.delivery import sites, tls_policy
from layang.delivery.direct import MxTransport, TlsReport
from layang.delivery.mx import TEMPORARY, MxFailure, remember_sites
from layang.delivery.mx import Destination as MxDestination
from layang.delivery.outcomes import BOUNCED, DEFERRED, DELIVERED, RecipientResult
from layang.delivery.queue import ClaimedRecipient
from layang.delivery.routes import Route
from layang.delivery.shaping import SiteRule
from layang.delivery.sites import is_slow_down
from layang.delivery.smtp import Envelope, Refused, Stale
from layang.delivery.tls_policy import OPPORTUNISTIC, TransportPolicy
from layang.delivery.transports import Session
from layang.mail import tlsrpt
from layang.metrics import site_outcome

log = logging.getLogger("layang.engine")

IDLE_SECONDS = 30.0
"""A session unused for this long is closed."""
POLICY_SECONDS = 60.0
"""A domain's transport policy is looked at again after this long (MTA-STS is cached in the
database for its max_age; this only spares the TXT look-up on every batch)."""
MX_IDLE_SECONDS = 2.0
"""A session to an MX site unused for this long is closed (as Postfix's connection cache)."""
BLOCKED_SECONDS = 1.0
"""A site refused a new session (at its limit across processes) is asked again after this."""
SPARE_SECONDS = 1.0
"""A session slot freed by this process and not taken again within this long is given back to
the site (so another process may use it)."""
MAX_UNRECORDED = 100
"""At most this many recipients are sent (or being sent) but not yet recorded: what a worker
killed at the worst moment sends again (contract: at most 100 recipients)."""


@dataclass(eq=False)
class Job:
    """One recipient's copy on its way: the transaction to run, and who to tell."""

    recipient: ClaimedRecipient
    route: Route
    destination: str
    envelope: Envelope
    reference: str
    done: Callable[[Job, RecipientResult], None]
    started: float = 0.0
    detail: dict[str, Any] = field(default_factory=dict)
    mx: MxDestination | None = None  # direct to MX: the recipient domain resolved
    policy: TransportPolicy | None = None  # direct to MX: what the domain asks of TLS
    finished: bool = False
    stream: str = "transactional"
    admitted: bool = False  # counted among the sent and unrecorded (see ``Engine._admit``)


@dataclass
class Destination:
    """A destination's ready queue and sessions."""

    key: str
    route: Route
    limit: int
    per_session: int
    queue: collections.deque[Job] = field(default_factory=collections.deque)
    runners: int = 0
    waiting: int = 0  # runners looking for their next job
    idle: list[Session] = field(default_factory=list)
    in_flight: dict[Job, float] = field(default_factory=dict)
    site: str | None = None  # direct to MX: the site, whose state is shared
    rule: SiteRule | None = None
    blocked_until: float = 0.0  # no new session before (monotonic): the site is at its limit
    paused: bool = False  # the site asked to slow down: the sessions stop
    policy: TransportPolicy | None = None  # direct to MX: what the domain(s) ask of TLS


class Engine:
    """Runs jobs on an event loop in a thread of its own. ``submit`` and ``take_queued`` may be
    called from any thread."""

    def __init__(
        self,
        *,
        connections: int,
        helo_name: str,
        unrecorded: Callable[[], int],
        hand_back: Callable[[list[Job]], None],
        stall_seconds: float,
        lease_fresh: Callable[[], bool],
        owner: str = "",
        hold: Callable[[list[Job], str, int | None, str], None] | None = None,
        lease_seconds: float = 60.0,
        throttle: sites.Throttle | None = None,
    ) -> None:
        self.connections = max(1, connections)
        self.owner = owner
        self.hold = hold
        self.lease_ms = int(lease_seconds * 1000)
        self._resolving: dict[str, list[Job]] = {}
        self.throttle = throttle or sites.DEFAULT
        self._site_state = concurrent.futures.ThreadPoolExecutor(
            max_workers=4, thread_name_prefix="site-state"
        )
        self._last_success: dict[str, float] = {}
        # Sites this process saw slow down or refuse connections: only they are told of
        # successes (winning the limit back, ending a run of failures); for any other site
        # that would be a database round trip per second for nothing.
        self._troubled: set[str] = set()
        self._recorded = asyncio.Event()
        self._work = asyncio.Event()
        self._policies: dict[str, tuple[float, TransportPolicy]] = {}
        self._next_slot_renewal = time.monotonic()
        # Slots of sessions that closed, kept a moment for the next session to the same site
        # (no database round trip): site -> [(slot id, when it was freed)].
        self._spares: dict[str, list[tuple[str, float]]] = {}
        # Sites another process waits for: this process's fair share of each (see the tick).
        self._shares: dict[str, int] = {}
        self.helo_name = helo_name
        self.unrecorded = unrecorded
        self.hand_back = hand_back
        self.stall_seconds = stall_seconds
        self.lease_fresh = lease_fresh
        self.destinations: dict[str, Destination] = {}
        self.open_sessions = 0
        self.sessions: set[_Counted] = set()
        self.admitted = 0  # jobs past the point of no return whose outcome is not handed over
        self.pending = 0  # jobs submitted and not finished (queued or in flight)
        self._changed = threading.Condition()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name="engine", daemon=True)
        self._thread.start()
        self._ticking = asyncio.run_coroutine_threadsafe(self._tick(), self.loop)

    # -- from other threads --------------------------------------------------------------

    def submit(self, jobs: Iterable[Job]) -> None:
        """Queue ``jobs`` for their destinations."""
        jobs = list(jobs)
        if not jobs:
            return
        with self._changed:
            self.pending += len(jobs)
        self.loop.call_soon_threadsafe(self._enqueue, jobs)

    def wait_below(self, count: int, timeout: float) -> None:
        """Block until fewer than ``count`` jobs are pending, or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self.pending >= count:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._changed.wait(left)

    def recorded(self) -> None:
        """Outcomes were recorded: sending held back by the unrecorded cap may go on."""
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._recorded.set)

    def take_queued(self) -> list[Job]:
        """Remove and return every job not started yet (to hand back to the queue)."""
        future = asyncio.run_coroutine_threadsafe(self._take_queued(), self.loop)
        return future.result(10)

    def close(self) -> None:
        """Close every session and stop the loop."""
        if self.loop.is_closed():
            return
        with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
            asyncio.run_coroutine_threadsafe(self._close_all(), self.loop).result(15)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)

    # -- on the loop ---------------------------------------------------------------------

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    def _enqueue(self, jobs: list[Job]) -> None:
        self._work.set()
        touched = {}
        for job in jobs:
            if job.route.sited:
                domain = job.recipient.address.rpartition("@")[2].rstrip(".").lower()
                waiting = self._resolving.setdefault(domain, [])
                waiting.append(job)
                if len(waiting) == 1:
                    self.loop.create_task(self._resolve(job.route.transport, domain))
                continue
            destination = self._destination(job)
            destination.queue.append(job)
            touched[destination.key] = destination
        for destination in touched.values():
            self._pump(destination)

    async def _resolve(self, route: MxTransport, domain: str) -> None:
        """Resolve ``domain`` and queue its waiting jobs on its site (or settle them)."""
        try:
            resolved = await route.resolver_for_loop().resolve(domain)
        except MxFailure as failure:
            outcome = DEFERRED if failure.kind == TEMPORARY else BOUNCED
            for job in self._resolving.pop(domain, []):
                result = RecipientResult(
                    job.recipient.address, failure.code, failure.reply, outcome
                )
                self._finish(job, result)
            return
        except Exception as error:
            log.exception("resolving %s failed", domain)
            for job in self._resolving.pop(domain, []):
                reply = f"451 4.4.3 looking up {domain} failed: {error}"
                self._finish(job, RecipientResult(job.recipient.address, 451, reply, DEFERRED))
            return
        policy = await self._policy(route, resolved)
        jobs = self._resolving.pop(domain, [])
        if route.pools and len({job.stream for job in jobs}) > 1:
            for stream in sorted({job.stream for job in jobs}):
                self._queue_resolved(
                    route, resolved, policy, [j for j in jobs if j.stream == stream]
                )
            return
        self._queue_resolved(route, resolved, policy, jobs)

    def _queue_resolved(
        self, route: MxTransport, resolved: MxDestination, policy: TransportPolicy, jobs: list[Job]
    ) -> None:
        domain = resolved.domain
        # Domains without a policy of their own share their site's sessions; one with a policy
        # gets sessions checked against it (still within the site's shared limits).
        plain = (
            policy.kind == OPPORTUNISTIC and not policy.required and policy.fetch_failure is None
        )
        key = f"mx:{resolved.site}" if plain else f"mx:{resolved.site}|{domain}"
        if route.pools:
            # Each stream's sessions leave from its own addresses: they are not shared.
            key += f"|{jobs[0].stream}"
        destination = self.destinations.get(key)
        if destination is None or destination.policy != policy:
            rule = resolved.rule
            limit = min(self.connections, rule.connections * len(route.sources))
            if destination is None:
                destination = Destination(
                    key,
                    jobs[0].route,
                    limit,
                    rule.messages_per_connection,
                    site=resolved.site,
                    rule=rule,
                )
                self.destinations[key] = destination
            destination.policy = policy
        for job in jobs:
            job.mx = resolved
            job.policy = policy
            destination.queue.append(job)
        self._pump(destination)

    def _destination(self, job: Job) -> Destination:
        destination = self.destinations.get(job.destination)
        if destination is None:
            limit = min(job.route.max_sessions or self.connections, self.connections)
            destination = Destination(job.destination, job.route, limit, 100)
            self.destinations[job.destination] = destination
        return destination

    def _pump(self, destination: Destination) -> None:
        # While no new session may open, only idle ones take jobs.
        limit = destination.limit
        if destination.blocked_until > time.monotonic():
            limit = min(limit, destination.runners + len(destination.idle))
        while (
            destination.queue
            and destination.runners < limit
            and destination.waiting < len(destination.queue)
        ):
            destination.runners += 1
            destination.waiting += 1
            self.loop.create_task(self._runner(destination))

    async def _runner(self, destination: Destination) -> None:
        session = destination.idle.pop() if destination.idle else None
        try:
            while destination.queue:
                if not self.lease_fresh():
                    # The leases may lapse before a transaction ends: leave the rest.
                    self._give_back(destination)
                    break
                if destination.paused:
                    break
                if session is None and destination.idle:
                    session = destination.idle.pop()
                if session is None and destination.blocked_until > time.monotonic():
                    # No new session may open now: the tick tries again, not a loop here.
                    break
                job = destination.queue.popleft()
                destination.waiting -= 1
                try:
                    session = await self._step(destination, session, job)
                except Exception as error:  # a bug must not leave the job unfinished
                    log.exception("delivery to %s failed", destination.key)
                    if session is not None:
                        await self._close(session)
                        session = None
                    if not job.finished:
                        reply = f"451 4.3.0 local error: {error}"
                        self._finish(
                            job, RecipientResult(job.recipient.address, 0, reply, DEFERRED)
                        )
                finally:
                    if job.admitted:
                        job.admitted = False
                        self.admitted -= 1
                    destination.waiting += 1
        finally:
            destination.waiting -= 1
            destination.runners -= 1
            if session is not None and not session.closed:
                destination.idle.append(session)
            if destination.queue:
                self._pump(destination)

    async def _admit(self, job: Job) -> None:
        """Wait until fewer than ``MAX_UNRECORDED`` recipients are sent (or past the point of
        no return) and not recorded, then count ``job`` among them. Called just before the
        message's end is written: a transaction cut off before that delivers nothing."""
        while self.unrecorded() + self.admitted >= MAX_UNRECORDED:
            # Woken when the bookkeeper has recorded a batch (see ``recorded``).
            self._recorded.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._recorded.wait(), 0.1)
        job.admitted = True
        self.admitted += 1

    async def _step(
        self, destination: Destination, session: Session | None, job: Job
    ) -> Session | None:
        """Run ``job`` on ``session`` (opened if need be); the session to go on with."""
        if session is None or session.closed:
            if destination.site is not None:
                session = await self._open_mx(destination, job)
            else:
                session = await self._open(destination, job)
            if session is None:
                return None
        if job.envelope.requiretls:
            refusal = destination.route.transport.refusal(session.inner, job)
            if refusal is not None:
                bounce = RecipientResult(job.recipient.address, 550, refusal, BOUNCED)
                self._finish(job, bounce)
                return session
        if destination.rule is not None and destination.rule.rate:
            wait = await self._state(
                sites.take_rate, destination.site, destination.rule.rate, default=0.0
            )
            if wait > 0:
                await asyncio.sleep(wait)
        result = await self._transact(destination, session, job)
        if result is None:  # a stale reused session: the job is queued again
            return None
        if (
            session.closed
            or session.transactions >= destination.per_session
            or getattr(session, "retiring", False)
        ):
            await self._close(session)
            return None
        return session

    async def _open(self, destination: Destination, job: Job) -> Session | None:
        """A new session for ``destination``, or None after failing ``job`` and every job
        queued behind it (one unreachable server is not tried once per recipient)."""
        await self._make_room()
        self.open_sessions += 1
        try:
            opened = await destination.route.transport.open(job)
        except Refused as refused:
            self.open_sessions -= 1
            result = RecipientResult("", refused.code, refused.reply, DEFERRED)
            failed = [job, *destination.queue]
            destination.queue.clear()
            for each in failed:
                self._finish(each, replace(result, recipient=each.recipient.address))
            return None
        return _Counted(opened, self)

    async def _transact(
        self, destination: Destination, session: Session, job: Job
    ) -> RecipientResult | None:
        job.started = time.monotonic()
        destination.in_flight[job] = job.started
        try:
            try:
                (result,) = await session.send(job.envelope, lambda: self._admit(job))
            except Stale:
                await self._close(session)
                destination.queue.appendleft(job)
                return None
        finally:
            destination.in_flight.pop(job, None)
        job.detail = {"durationMs": int((time.monotonic() - job.started) * 1000)}
        job.detail.update(session.inner.detail())
        if destination.site is not None and job.detail.get("tls") is None:
            job.detail["tls"] = {
                "version": None,
                "cipher": None,
                "verified": False,
                "policy": "none",
            }
        self._finish(job, result)
        if destination.site is not None and (
            result.outcome == DEFERRED or destination.site in self._troubled
        ):
            await self._site_feedback(destination, session, result)
        if result.outcome == DEFERRED and result.code in (0, 421) and session.closed:
            # The destination went away: the jobs queued behind this one would wait out the
            # same failure one by one.
            failed = list(destination.queue)
            destination.queue.clear()
            for each in failed:
                self._finish(each, replace(result, recipient=each.recipient.address))
        return result

    def _finish(self, job: Job, result: RecipientResult) -> None:
        if job.finished:
            return
        job.finished = True
        try:
            if job.mx is not None:
                site_outcome(job.mx.site, result.outcome)
            job.done(job, result)
        finally:
            with self._changed:
                self.pending -= 1
                self._changed.notify_all()

    async def _make_room(self) -> None:
        """Close the longest idle session anywhere when every connection is in use."""
        while self.open_sessions >= self.connections:
            idle = [(s.last_used, d, s) for d in self.destinations.values() for s in d.idle]
            if not idle:
                await asyncio.sleep(0.01)
                continue
            _, destination, session = min(idle, key=lambda item: item[0])
            destination.idle.remove(session)
            await self._close(session)

    async def _close(self, session: Session) -> None:
        await session.close()
        slot = getattr(session, "slot", None)
        if slot is not None:
            session.slot = None  # type: ignore[union-attr]
            if getattr(session, "retiring", False):  # another process waits for it
                await self._state(sites.release_slots, [slot])
            else:
                self._spare(session.site, slot)  # type: ignore[union-attr]

    def _spare(self, site: str, slot: str) -> None:
        """Keep ``slot`` (its session closed) for this process's next session to ``site``;
        the tick gives back those not taken again soon (``SPARE_SECONDS``)."""
        self._spares.setdefault(site, []).append((slot, time.monotonic()))
        for destination in self.destinations.values():
            if destination.site == site and destination.queue and destination.blocked_until:
                destination.blocked_until = 0.0
                self._pump(destination)

    def _at_share(self, site: str) -> bool:
        """Whether this process has its fair share of ``site``'s sessions open while another
        process waits for one (see ``_give_back_slots``)."""
        share = self._shares.get(site)
        if share is None:
            return False
        return sum(1 for s in self.sessions if s.site == site and s.slot is not None) >= share

    def _spare_slot(self, site: str) -> str | None:
        spares = self._spares.get(site)
        if not spares or self._at_share(site):
            return None
        slot, _ = spares.pop()
        return slot

    # -- direct to MX ----------------------------------------------------------------------

    async def _state(
        self, function: Callable[..., Any], *args: Any, default: Any = None, **kwargs: Any
    ) -> Any:
        """Call a site-state function (a database transaction) off the loop; a database that
        does not answer leaves the engine to its own limits (``default``)."""

        def call() -> Any:
            try:
                database.connect(reuse_if_open=True)
                return function(*args, **kwargs)
            except UNAVAILABLE_ERRORS as error:
                discard_connection()
                log.warning("site state unavailable: %s", error_summary(error))
                return default

        return await self.loop.run_in_executor(self._site_state, call)

    async def _policy(self, route: MxTransport, resolved: MxDestination) -> TransportPolicy:
        """The transport policy of a resolved domain (DANE, MTA-STS, a shaping rule's
        ``tls = "required"``, else opportunistic), kept for a minute."""
        cached = self._policies.get(resolved.domain)
        now = time.monotonic()
        hosts = tuple(h.name for h in resolved.hosts)
        if cached is not None and cached[0] > now and cached[1].mx_hosts == hosts:
            return cached[1]
        try:
            policy = await tls_policy.policy_for(
                resolved.domain, hosts, route.dns_resolver(), settings=route.tls_settings
            )
        except Exception:  # never lose mail to a policy look-up bug: no policy then
            log.exception("transport policy of %s failed", resolved.domain)
            policy = TransportPolicy(resolved.domain, mx_hosts=hosts)
        if resolved.rule.tls == "required":
            policy = policy.requiring_tls()
        if len(self._policies) > 10_000:
            self._policies.clear()
        self._policies[resolved.domain] = (now + POLICY_SECONDS, policy)
        return policy

    async def _open_mx(self, destination: Destination, job: Job) -> Session | None:
        """A session to ``destination``'s site, if its shared state lets one start: a paused
        or suspended site has its waiting mail held (a ``Delay`` once, with the reason), a site
        at its limit across processes keeps it queued here for a moment."""
        assert destination.site is not None and destination.rule is not None and job.mx
        route: MxTransport = job.route.transport  # type: ignore[assignment]
        site, ceiling = destination.site, destination.rule.connections * len(route.sources)
        slot = self._spare_slot(site)
        if slot is None and not self._at_share(site):
            slot = await self._state(
                sites.acquire_slot, site, self.owner, ceiling, self.lease_ms, default=""
            )
        if slot is None:
            view = await self._state(sites.gate, site, ceiling)
            destination.queue.appendleft(job)
            if view is not None and view.state != "ok":
                self._troubled.add(site)
            if view is not None and not view.open:
                self._hold_site(destination, view.until_ms, view.reason or view.state)
            else:
                # Tried again by the tick, or at once when this process frees a slot there.
                destination.blocked_until = time.monotonic() + BLOCKED_SECONDS
            return None
        await self._make_room()
        self.open_sessions += 1
        try:
            smtp = await route.open(job)
        except Refused as refused:
            await self._report_tls(refused.reports)
            self.open_sessions -= 1
            if slot:
                self._spare(site, slot)
            reply = refused.reply
            self._troubled.add(site)
            if is_slow_down(reply):
                await self._state(sites.slow_down, site, reply, ceiling, throttle=self.throttle)
            elif refused.kind != "tls":  # a policy not met says nothing of the site's health
                await self._state(
                    sites.connect_failure, site, reply, ceiling, throttle=self.throttle
                )
            code = refused.code if 400 <= refused.code < 500 else 0
            result = RecipientResult("", code, reply, DEFERRED)
            failed = [job, *destination.queue]
            destination.queue.clear()
            for each in failed:
                self._finish(each, replace(result, recipient=each.recipient.address))
            return None
        await self._report_tls(smtp.reports)
        session = _Counted(smtp, self)
        session.slot = slot or None
        session.site = site
        return session

    async def _report_tls(self, reports: list[TlsReport]) -> None:
        """Count what the sessions tried showed of TLS, for TLS-RPT (off the loop)."""
        for report in reports:
            await self._state(
                tlsrpt.record_session,
                report.domain,
                report.policy,
                report.host,
                report.succeeded,
                report.failure_type,
                report.failure,
            )

    async def _site_feedback(
        self, destination: Destination, session: Session, result: RecipientResult
    ) -> None:
        """Tell the site's shared state what a transaction showed: a "slow down" halves its
        limit and pauses it (this process's sessions to it stop, its waiting mail is held);
        a delivery wins the limit back step by step (told at most once a second)."""
        site = destination.site
        assert site is not None and destination.rule is not None
        ceiling = destination.rule.connections
        if result.outcome == DEFERRED and is_slow_down(result.reply):
            self._troubled.add(site)
            view = await self._state(
                sites.slow_down, site, result.reply, ceiling, throttle=self.throttle
            )
            await self._close(session)
            if view is not None and not view.open:
                self._hold_site(destination, view.until_ms, view.reason or "slow down")
            return
        if result.outcome == DELIVERED and site in self._troubled:
            now = time.monotonic()
            if now - self._last_success.get(site, 0.0) >= 1.0:
                self._last_success[site] = now
                view = await self._state(sites.success, site, ceiling, throttle=self.throttle)
                if view is not None and view.state == "ok" and view.limit in (None, ceiling):
                    self._troubled.discard(site)

    def _hold_site(self, destination: Destination, until_ms: int | None, reason: str) -> None:
        """Stop sending to ``destination`` and hand its queued mail back to wait on the site
        until ``until_ms``; sessions still open finish their transaction and close."""
        destination.paused = True
        jobs = list(destination.queue)
        destination.queue.clear()
        if jobs:
            with self._changed:
                self.pending -= len(jobs)
                self._changed.notify_all()
            if self.hold is not None:
                assert destination.site is not None
                self.hold(jobs, destination.site, until_ms, reason)
            else:
                self.hand_back(jobs)
        self.loop.call_later(1.0, self._unpause, destination)

    def _unpause(self, destination: Destination) -> None:
        destination.paused = False
        if destination.queue:
            self._pump(destination)

    async def _give_back_slots(self, now: float) -> None:
        """Give back the spare slots not taken again within ``SPARE_SECONDS`` (in one
        transaction). Where another process waits for a site's slots, keep no more than a fair
        share of them: spares and idle sessions go first, then sessions close after their
        transaction. A site's slots go where its mail is."""
        held: dict[str, int] = {}
        for session in self.sessions:
            if session.slot is not None:
                held[session.site] = held.get(session.site, 0) + 1
        for site, spares in self._spares.items():
            held[site] = held.get(site, 0) + len(spares)
        if not held:
            return
        shares = await self._state(sites.fair_shares, sorted(held), self.owner, default={})
        released: list[str] = []
        for site in list(self._spares):
            keep = []
            for slot, freed in self._spares[site]:
                if held[site] > shares.get(site, held[site]) or now - freed >= SPARE_SECONDS:
                    released.append(slot)
                    held[site] -= 1
                else:
                    keep.append((slot, freed))
            if keep:
                self._spares[site] = keep
            else:
                del self._spares[site]
        if released:
            await self._state(sites.release_slots, released)
        for site, share in shares.items():
            excess = held[site] - share
            for destination in self.destinations.values():
                if destination.site != site:
                    continue
                while excess > 0 and destination.idle:
                    session = destination.idle.pop()
                    session.retiring = True  # type: ignore[attr-defined]
                    await self._close(session)
                    excess -= 1
            for session in self.sessions:
                if excess <= 0:
                    break
                if session.site == site and session.slot is not None and not session.retiring:
                    session.retiring = True  # closes after its transaction
                    excess -= 1
        self._shares = shares

    async def _site_chores(self, now: float) -> None:
        """Renew this process's session slots; remember which site each domain is on."""
        if not any(d.site for d in self.destinations.values()):
            return
        await self._give_back_slots(now)
        if now >= self._next_slot_renewal:
            self._next_slot_renewal = now + self.lease_ms / 4000
            await self._state(sites.renew_slots, self.owner, self.lease_ms)
            for destination in self.destinations.values():
                route = destination.route.transport
                if destination.route.sited and route.resolver is not None:  # type: ignore[attr-defined]
                    learned = route.resolver.learned_sites()  # type: ignore[attr-defined]
                    if learned:
                        await self._state(remember_sites, learned)
                    break

    def _give_back(self, destination: Destination) -> None:
        jobs = list(destination.queue)
        destination.queue.clear()
        if jobs:
            with self._changed:
                self.pending -= len(jobs)
                self._changed.notify_all()
            self.hand_back(jobs)

    async def _take_queued(self) -> list[Job]:
        jobs = [job for d in self.destinations.values() for job in d.queue]
        for destination in self.destinations.values():
            destination.queue.clear()
        with self._changed:
            self.pending -= len(jobs)
            self._changed.notify_all()
        return jobs

    async def _tick(self) -> None:
        """Close sessions idle too long; hand back what waits behind hung transactions. With
        no session open and nothing to send, sleep until jobs come (an idle worker's CPU)."""
        while True:
            if self.open_sessions == 0 and self.pending == 0 and not self._spares:
                self._work.clear()
                await self._work.wait()
            await asyncio.sleep(0.5)
            try:
                await self._tick_once()
            except Exception:
                log.exception("engine housekeeping failed")

    async def _tick_once(self) -> None:
        now = time.monotonic()
        await self._site_chores(now)
        for destination in list(self.destinations.values()):
            if (
                destination.queue
                and destination.blocked_until
                and destination.site is not None
                and destination.runners == 0
                and not destination.idle
            ):
                # Another process holds every slot of the site: its mail goes back to the
                # queue, for the process that has the sessions, instead of filling this
                # process's backlog while it waits.
                destination.blocked_until = 0.0
                self._give_back(destination)
            if destination.queue and destination.blocked_until and destination.blocked_until <= now:
                destination.blocked_until = 0.0
                self._pump(destination)
            # A session to a site holds one of the site's shared slots: let it go sooner.
            idle_limit = IDLE_SECONDS if destination.site is None else MX_IDLE_SECONDS
            # Taken out of the idle list before any is closed: closing awaits, and meanwhile a
            # runner may take one of the others.
            expired = [s for s in destination.idle if now - s.last_used > idle_limit]
            if expired:
                destination.idle = [s for s in destination.idle if s not in expired]
                for session in expired:
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
                self._give_back(destination)

    async def _close_all(self) -> None:
        self._ticking.cancel()
        for destination in self.destinations.values():
            sessions, destination.idle = destination.idle, []
            for session in sessions:
                await self._close(session)
        slots = [slot for spares in self._spares.values() for slot, _ in spares]
        self._spares.clear()
        for session in list(self.sessions):  # still in a transaction: cut off
            session.inner.abort()
            _ = session.closed
            if session.slot is not None:
                slots.append(session.slot)
        if slots:
            await self._state(sites.release_slots, slots)


class _Counted:
    """A session counted in the engine's open sessions until closed."""

    def __init__(self, inner: Any, engine: Engine) -> None:
        self.inner = inner
        self.engine = engine
        self._counted = True
        self.slot: str | None = None
        self.site = ""
        self.retiring = False  # over its process's fair share of the site: closes when done
        engine.sessions.add(self)

    @property
    def closed(self) -> bool:
        if self.inner.closed and self._counted:
            self._counted = False
            self.engine.open_sessions -= 1
            self.engine.sessions.discard(self)
        return self.inner.closed

    @property
    def transactions(self) -> int:
        return self.inner.transactions

    @property
    def last_used(self) -> float:
        return self.inner.last_used

    async def send(
        self, envelope: Envelope, before_end: Callable[[], Awaitable[None]]
    ) -> list[RecipientResult]:
        return await self.inner.send(envelope, before_end)

    async def close(self) -> None:
        await self.inner.close()
        _ = self.closed
