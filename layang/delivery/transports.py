"""The one seam between the engine and the ways mail leaves: ``Transport.open(job) -> Session``.

A transport opens sessions; a session runs one transaction at a time and reports a result per
recipient, never raising for delivery problems. The smarthost
(:mod:`layang.delivery.smarthost`) and direct to MX (:mod:`layang.delivery.direct`) open
:class:`~layang.delivery.smtp.SmtpSession`\\ s on the engine's event loop; the capture directory
and the mailbox simulator are synchronous, and :class:`InThread` runs them through the same
seam in a thread. How to add a transport: docs/development.md.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from layang.delivery.envelope import Envelope
from layang.delivery.outcomes import DEFERRED, RecipientResult


class Refused(Exception):
    """The session could not be set up. ``kind`` is ``connect``, ``greeting``, ``tls`` or
    ``auth``; ``code`` the server's reply code (0 without one); ``reply`` says why."""

    def __init__(self, kind: str, code: int, reply: str) -> None:
        super().__init__(reply)
        self.kind = kind
        self.code = code
        self.reply = reply
        self.reports: list[Any] = []  # what the sessions tried showed of TLS (TLS-RPT)


class Stale(Exception):
    """A reused session was dead before the transaction started: nothing was delivered, so the
    caller may retry on a new session."""


class Session(Protocol):
    """An open session: one transaction at a time. ``transactions`` counts those started,
    ``last_used`` is when the last one ended (``time.monotonic``)."""

    closed: bool
    transactions: int
    last_used: float

    async def send(
        self,
        envelope: Envelope,
        before_end: Callable[[], Awaitable[None]],
        following: Callable[[], Envelope | None] | None = None,
    ) -> list[RecipientResult]:
        """One transaction: a result per recipient of ``envelope``, in order. ``before_end``
        is awaited just before the message's end goes out (never, if the transaction ends
        before that): from then on the other side may have the message. ``following`` may be
        called once, then, for the envelope of the next transaction, to begin it behind this
        one's end; the next call is then for that envelope (or the session is closed). May
        raise :class:`Stale` (nothing was sent: try a new session)."""
        ...

    async def close(self) -> None:
        """End the session; never raises."""
        ...

    def abort(self) -> None:
        """Drop the session at once, mid-transaction if need be."""
        ...

    def detail(self) -> dict[str, Any]:
        """What a delivery event says of the session (``host``, ``address``, ``tls``), or
        nothing."""
        ...


class Transport(Protocol):
    """Opens sessions to a destination."""

    async def open(self, job: Any) -> Session:
        """A session that can carry ``job`` (a :class:`~layang.delivery.engine.Job`); raises
        :class:`Refused` saying why none could be set up."""
        ...

    def refusal(self, session: Session, job: Any) -> str | None:
        """Why ``session`` may not carry ``job`` (a REQUIRETLS message over a session that
        does not meet RFC 8689), as the reply that bounces it; None when it may."""
        ...

    def close(self) -> None:
        """Release what the transport holds besides sessions (threads); it stays usable."""
        ...


class Synchronous(Protocol):
    """A transport that blocks (files, made-up outcomes): one call per transaction."""

    def deliver(self, envelope: Envelope) -> list[RecipientResult]:
        """A result per recipient of ``envelope``; never raises for delivery problems."""
        ...


class InThread:
    """A :class:`Synchronous` transport behind the seam: its transactions run one at a time in
    a thread of its own (made when first needed, ended by :meth:`close`)."""

    def __init__(self, inner: Synchronous) -> None:
        self.inner = inner
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    def __repr__(self) -> str:
        return f"<InThread {self.inner!r}>"

    async def open(self, job: Any = None) -> _ThreadSession:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="transport")
        return _ThreadSession(self.inner, self._pool)

    def refusal(self, session: Session, job: Any) -> str | None:
        return None  # nothing leaves the machine: no transport security to check

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)


class _ThreadSession:
    def __init__(self, inner: Synchronous, pool: concurrent.futures.Executor) -> None:
        self.inner = inner
        self.pool = pool
        self.closed = False
        self.transactions = 0
        self.last_used = time.monotonic()

    async def send(
        self,
        envelope: Envelope,
        before_end: Callable[[], Awaitable[None]],
        following: Callable[[], Envelope | None] | None = None,
    ) -> list[RecipientResult]:
        await before_end()  # the transport does it all in one call: it counts from the start
        self.transactions += 1
        loop = asyncio.get_running_loop()
        results = await loop.run_in_executor(self.pool, self.inner.deliver, envelope)
        self.last_used = time.monotonic()
        if any(r.code == 0 and r.outcome == DEFERRED for r in results):
            # The transport itself failed (a directory that cannot be written): what waits
            # behind would fail the same way, one by one.
            self.closed = True
        return results

    async def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def detail(self) -> dict[str, Any]:
        return {}
