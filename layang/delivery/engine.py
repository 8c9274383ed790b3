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

Sending is bounded by recording: a transaction starts only while fewer than
``MAX_UNRECORDED`` recipients are sent or being sent but not recorded yet, so a worker killed at
any moment has sent at most that many copies that another worker will send again.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from layang.delivery.queue import ClaimedRecipient
from layang.delivery.relay import DEFERRED, RecipientResult, SmtpRelay
from layang.delivery.routes import Route
from layang.delivery.smtp import Envelope, Refused, SmtpSession, Stale

log = logging.getLogger("layang.engine")

IDLE_SECONDS = 30.0
"""A session unused for this long is closed."""
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


class Session(Protocol):
    """A session a destination keeps open: one transaction at a time."""

    closed: bool
    transactions: int
    last_used: float

    async def send(self, envelope: Envelope) -> list[RecipientResult]: ...

    async def close(self) -> None: ...


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
    ) -> None:
        self.connections = max(1, connections)
        self.helo_name = helo_name
        self.unrecorded = unrecorded
        self.hand_back = hand_back
        self.stall_seconds = stall_seconds
        self.lease_fresh = lease_fresh
        self.destinations: dict[str, Destination] = {}
        self.open_sessions = 0
        self.admitted = 0  # jobs let through to a transaction whose outcome is not handed over
        self.pending = 0  # jobs submitted and not finished (queued or in flight)
        self._changed = threading.Condition()
        self._threads = concurrent.futures.ThreadPoolExecutor(
            max_workers=8, thread_name_prefix="transport"
        )
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
        self._threads.shutdown(wait=False, cancel_futures=True)

    # -- on the loop ---------------------------------------------------------------------

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    def _enqueue(self, jobs: list[Job]) -> None:
        touched = {}
        for job in jobs:
            destination = self._destination(job)
            destination.queue.append(job)
            touched[destination.key] = destination
        for destination in touched.values():
            self._pump(destination)

    def _destination(self, job: Job) -> Destination:
        destination = self.destinations.get(job.destination)
        if destination is None:
            asynchronous = isinstance(job.route.transport, SmtpRelay)
            limit = self.connections if asynchronous else 1
            destination = Destination(job.destination, job.route, limit, 100)
            self.destinations[job.destination] = destination
        return destination

    def _pump(self, destination: Destination) -> None:
        while (
            destination.queue
            and destination.runners < destination.limit
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
                while self.unrecorded() + self.admitted >= MAX_UNRECORDED:
                    await asyncio.sleep(0.01)
                if not destination.queue:
                    break
                job = destination.queue.popleft()
                destination.waiting -= 1
                self.admitted += 1
                try:
                    session = await self._step(destination, session, job)
                finally:
                    self.admitted -= 1
                    destination.waiting += 1
        finally:
            destination.waiting -= 1
            destination.runners -= 1
            if session is not None and not session.closed:
                destination.idle.append(session)
            if destination.queue:
                self._pump(destination)

    async def _step(
        self, destination: Destination, session: Session | None, job: Job
    ) -> Session | None:
        """Run ``job`` on ``session`` (opened if need be); the session to go on with."""
        if session is None or session.closed:
            session = await self._open(destination, job)
            if session is None:
                return None
        result = await self._transact(destination, session, job)
        if result is None:  # a stale reused session: the job is queued again
            return None
        if session.closed or session.transactions >= destination.per_session:
            await self._close(session)
            return None
        return session

    async def _open(self, destination: Destination, job: Job) -> Session | None:
        """A new session for ``destination``, or None after failing ``job`` and every job
        queued behind it (one unreachable server is not tried once per recipient)."""
        await self._make_room()
        self.open_sessions += 1
        session: Session
        transport = destination.route.transport
        if isinstance(transport, SmtpRelay):
            smtp = SmtpSession(
                transport.host,
                transport.port,
                helo_name=transport.helo_name,
                tls=transport.tls,
                implicit_tls=transport.implicit_tls,
                context=transport.context,
                credentials=transport.credentials,
                timeout=transport.timeout,
            )
            try:
                await smtp.open()
            except Refused as refused:
                self.open_sessions -= 1
                result = RecipientResult("", refused.code, refused.reply, DEFERRED)
                failed = [job, *destination.queue]
                destination.queue.clear()
                for each in failed:
                    self._finish(each, replace(result, recipient=each.recipient.address))
                return None
            session = _Counted(smtp, self)
        else:
            session = _Counted(_ThreadSession(transport, self._threads, job), self)
        return session

    async def _transact(
        self, destination: Destination, session: Session, job: Job
    ) -> RecipientResult | None:
        job.started = time.monotonic()
        destination.in_flight[job] = job.started
        try:
            if isinstance(session, _Counted) and isinstance(session.inner, _ThreadSession):
                session.inner.job = job
            try:
                (result,) = await session.send(job.envelope)
            except Stale:
                await self._close(session)
                destination.queue.appendleft(job)
                return None
        finally:
            destination.in_flight.pop(job, None)
        job.detail = {"durationMs": int((time.monotonic() - job.started) * 1000)}
        if isinstance(session, _Counted) and isinstance(session.inner, SmtpSession):
            job.detail.update(
                host=session.inner.host, address=session.inner.peer, tls=session.inner.tls_info
            )
        self._finish(job, result)
        gone = session.closed or (
            isinstance(session, _Counted) and isinstance(session.inner, _ThreadSession)
        )
        if result.outcome == DEFERRED and result.code in (0, 421) and gone:
            # The destination went away: the jobs queued behind this one would wait out the
            # same failure one by one.
            failed = list(destination.queue)
            destination.queue.clear()
            for each in failed:
                self._finish(each, replace(result, recipient=each.recipient.address))
        return result

    def _finish(self, job: Job, result: RecipientResult) -> None:
        try:
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
        """Close sessions idle too long; hand back what waits behind hung transactions."""
        while True:
            await asyncio.sleep(0.5)
            now = time.monotonic()
            for destination in list(self.destinations.values()):
                for session in list(destination.idle):
                    if now - session.last_used > IDLE_SECONDS:
                        destination.idle.remove(session)
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


class _Counted:
    """A session counted in the engine's open sessions until closed."""

    def __init__(self, inner: Any, engine: Engine) -> None:
        self.inner = inner
        self.engine = engine
        self._counted = True

    @property
    def closed(self) -> bool:
        if self.inner.closed and self._counted:
            self._counted = False
            self.engine.open_sessions -= 1
        return self.inner.closed

    @property
    def transactions(self) -> int:
        return self.inner.transactions

    @property
    def last_used(self) -> float:
        return self.inner.last_used

    async def send(self, envelope: Envelope) -> list[RecipientResult]:
        return await self.inner.send(envelope)

    async def close(self) -> None:
        await self.inner.close()
        _ = self.closed


class _ThreadSession:
    """A transport that is not asyncio, run in a thread: one transaction at a time."""

    def __init__(self, transport: Any, pool: concurrent.futures.Executor, job: Job) -> None:
        self.transport = transport
        self.pool = pool
        self.job = job
        self.closed = False
        self.transactions = 0
        self.last_used = time.monotonic()

    async def send(self, envelope: Envelope) -> list[RecipientResult]:
        job = self.job
        self.transactions += 1
        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(
            self.pool,
            lambda: self.transport.send(
                envelope.mail_from,
                list(envelope.recipients),
                envelope.data,
                reference=job.reference,
                crlf_clean=envelope.crlf_clean,
                attempt=job.recipient.attempts + 1,
            ),
        )
        self.last_used = time.monotonic()
        return list(result.recipients)

    async def close(self) -> None:
        # The transport keeps its own connection (if any) for the next session.
        self.closed = True
