"""The session pool: every session this process has open, counted against its connections.

A session is *open* from the moment the engine reserves room for it until it closes; *idle*
sessions wait, per destination, for the next job there. When every connection is in use, room
for a new session is made by closing the longest idle one anywhere. Sessions to a site may hold
one of the site's shared slots (:mod:`layang.delivery.slots`); the pool keeps the slot on the
session and hands it back with the session when it closes, for the engine to give to the slots.
"""

from __future__ import annotations

from typing import Any

from layang.delivery.jobs import Job
from layang.delivery.transports import Session

IDLE_SECONDS = 30.0
"""A session unused for this long is closed."""
MX_IDLE_SECONDS = 2.0
"""A session to an MX site unused for this long is closed (as Postfix's connection cache): it
holds one of the site's shared slots."""


class Pooled:
    """An open session, counted in its pool until closed; ``slot`` is the site slot it holds
    (None: none), ``retiring`` says it closes after its transaction (its process is over its
    fair share of the site); ``key`` is the destination it was opened for; ``primed`` is the
    job it carries next, already begun (the engine's ``_prime``)."""

    def __init__(
        self, inner: Session, pool: SessionPool, site: str | None = None, key: str = ""
    ) -> None:
        self.inner = inner
        self.pool = pool
        self.site = site
        self.key = key
        self.slot: str | None = None
        self.retiring = False
        self.primed: Any = None  # (destination, job) begun behind the last body
        self._counted = True
        pool.sessions.add(self)

    @property
    def closed(self) -> bool:
        if self.inner.closed and self._counted:
            self._counted = False
            self.pool.open -= 1
            self.pool.sessions.discard(self)
        return self.inner.closed

    @property
    def transactions(self) -> int:
        return self.inner.transactions

    @property
    def last_used(self) -> float:
        return self.inner.last_used

    async def close(self) -> str | None:
        """Close the session; returns the slot it held (None: none), now the caller's."""
        await self.inner.close()
        _ = self.closed
        slot, self.slot = self.slot, None
        return slot

    def abort(self) -> str | None:
        """Drop the session at once; returns the slot it held, as :meth:`close`."""
        self.inner.abort()
        _ = self.closed
        slot, self.slot = self.slot, None
        return slot

    def detail(self) -> dict[str, Any]:
        return self.inner.detail()

    def may_carry(self, job: Job) -> bool:
        """Whether the session is connected to a host ``job``'s domain names: one of its own MX
        hosts that its transport policy allows (direct to MX; any other route has one server)."""
        if job.mx is None:
            return True
        host = str(getattr(self.inner, "host", "")).rstrip(".").lower()
        if job.policy is not None:
            return job.policy.allows(host)
        return any(h.name.rstrip(".").lower() == host for h in job.mx.hosts)


class SessionPool:
    """The open sessions of one engine (one event loop), at most ``connections``."""

    def __init__(self, connections: int) -> None:
        self.connections = max(1, connections)
        self.open = 0  # reserved or open, not closed
        self.sessions: set[Pooled] = set()
        self._idle: dict[str, list[Pooled]] = {}

    @property
    def full(self) -> bool:
        return self.open >= self.connections

    def reserve(self) -> None:
        """Count a session about to be opened (see :meth:`full` first)."""
        self.open += 1

    def unreserve(self) -> None:
        """The reserved session could not be opened."""
        self.open -= 1

    def adopt(self, session: Session, site: str | None = None, key: str = "") -> Pooled:
        """A reserved session to destination ``key``, now open, in the pool's count until it
        closes."""
        return Pooled(session, self, site, key)

    def carrying(self, key: str) -> int:
        """How many open sessions (busy or idle) destination ``key`` has."""
        return sum(1 for s in self.sessions if s.key == key and not s.inner.closed)

    def idle(self, key: str) -> int:
        """How many sessions to destination ``key`` are idle."""
        return len(self._idle.get(key, ()))

    def take_idle(self, key: str) -> Pooled | None:
        """An idle session to ``key`` (the last parked), or None."""
        idle = self._idle.get(key)
        return idle.pop() if idle else None

    def park(self, key: str, session: Pooled) -> None:
        """``session`` waits for the next job to ``key``."""
        self._idle.setdefault(key, []).append(session)

    def longest_idle(self) -> Pooled | None:
        """The session idle longest anywhere, taken out of the pool's idle ones (to close)."""
        waiting = [(s.last_used, key, s) for key, idle in self._idle.items() for s in idle]
        if not waiting:
            return None
        _, key, session = min(waiting, key=lambda item: item[0])
        self._idle[key].remove(session)
        return session

    def expired(self, key: str, now: float, sited: bool) -> list[Pooled]:
        """The sessions to ``key`` idle longer than they may be, taken out (to close)."""
        limit = MX_IDLE_SECONDS if sited else IDLE_SECONDS
        idle = self._idle.get(key)
        if not idle:
            return []
        expired = [s for s in idle if now - s.last_used > limit]
        if expired:
            self._idle[key] = [s for s in idle if s not in expired]
        return expired

    def take_all_idle(self) -> list[Pooled]:
        """Every idle session, taken out (to close)."""
        sessions = [s for idle in self._idle.values() for s in idle]
        self._idle.clear()
        return sessions

    def held(self) -> dict[str, int]:
        """The site slots held by open sessions, by site."""
        held: dict[str, int] = {}
        for session in self.sessions:
            if session.slot is not None and session.site is not None:
                held[session.site] = held.get(session.site, 0) + 1
        return held

    def holding(self, site: str) -> int:
        """How many open sessions hold a slot of ``site``."""
        return sum(1 for s in self.sessions if s.site == site and s.slot is not None)

    def retire(self, site: str, keys: list[str], excess: int) -> list[Pooled]:
        """Retire ``excess`` of the sessions holding ``site``'s slots: the idle ones of
        destinations ``keys`` first, returned taken out (to close now); then sessions in a
        transaction, marked to close after it."""
        closing: list[Pooled] = []
        for key in keys:
            idle = self._idle.get(key, [])
            while excess > 0 and idle:
                session = idle.pop()
                session.retiring = True
                closing.append(session)
                excess -= 1
        for session in self.sessions:
            if excess <= 0:
                break
            if session.site == site and session.slot is not None and not session.retiring:
                session.retiring = True  # the idle ones above are already
                excess -= 1
        return closing
