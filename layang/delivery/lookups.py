"""Recipient domains on their way to a site: the MX look-ups in flight and what they taught.

On the ``mx:`` route a job waits for its recipient domain to be resolved (its MX records, the
site they name, the shaping rule; :mod:`layang.destinations.mx`) and for the domain's transport
policy (:mod:`layang.delivery.policies`) before it joins a site's ready queue. One look-up runs
per domain however many jobs wait on it. Which site each domain resolved to (or, on a
smarthost, which site its mail went to) is written down every few seconds for the queue views.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from layang.clock import now_ms
from layang.delivery.jobs import Job
from layang.delivery.offloop import OffLoop
from layang.delivery.outcomes import BOUNCED, DEFERRED, RecipientResult
from layang.delivery.policies import PolicyCache
from layang.destinations.mx import TEMPORARY, MxFailure, remember_sites
from layang.destinations.mx import Destination as MxDestination
from layang.destinations.policy import TransportPolicy

log = logging.getLogger("layang.engine")

REMEMBER_SECONDS = 5.0
"""How often the sites domains resolved to are written down (for the queue views)."""
RELAYED_SITE_MS = 3_600_000
"""How long a domain whose mail went to the smarthost is shown at the smarthost's site."""


@dataclass
class Resolution:
    """What the look-up of one domain came to for the jobs that waited on it: ``settled``, each
    job with its result when the mail cannot go on (no usable MX: bounced; a failed look-up:
    deferred), or ``queues``, the jobs to queue on the resolved destination under its transport
    policy (a group per stream when the route has source pools)."""

    settled: list[tuple[Job, RecipientResult]] = field(default_factory=list)
    queues: list[tuple[MxDestination, TransportPolicy, list[Job]]] = field(default_factory=list)


class DomainLookups:
    """The jobs waiting on each domain's look-up, the transport policies, and the sites learned
    and not written down yet; for one event loop (the database write runs off it)."""

    def __init__(self, offloop: OffLoop) -> None:
        self.offloop = offloop
        self.policies = PolicyCache()
        self._waiting: dict[str, list[Job]] = {}  # domain → jobs waiting on its look-up
        self._route: Any = None  # the mx: route's transport: its resolver learned the sites
        self._relayed: dict[str, str] = {}  # domain → the smarthost's site, to write down
        self._remember_at = 0.0  # monotonic: when the sites learned are next written down

    def wait(self, job: Job) -> str | None:
        """Queue ``job`` behind the look-up of its recipient's domain; returns the domain when
        no look-up of it is under way (the caller starts one: :meth:`resolve`), else None."""
        domain = _domain_of(job)
        waiting = self._waiting.setdefault(domain, [])
        waiting.append(job)
        return domain if len(waiting) == 1 else None

    async def resolve(self, route: Any, domain: str) -> Resolution:
        """Resolve ``domain`` with ``route`` (an :class:`~layang.delivery.direct.MxTransport`)
        and look up its transport policy, for every job that waits on it; never raises (a
        look-up that fails for a bug defers the mail, logged)."""
        self._route = route
        try:
            resolved = await route.resolver_for_loop().resolve(domain)
        except MxFailure as failure:
            outcome = DEFERRED if failure.kind == TEMPORARY else BOUNCED
            return self._settled(domain, failure.code, failure.reply, outcome)
        except Exception as error:
            log.exception("resolving %s failed", domain)
            reply = f"451 4.4.3 looking up {domain} failed: {error}"
            return self._settled(domain, 451, reply, DEFERRED)
        policy = await self.policies.policy(route, resolved)
        jobs = self._waiting.pop(domain, [])
        if route.pools and len({job.stream for job in jobs}) > 1:
            streams = sorted({job.stream for job in jobs})
            return Resolution(
                queues=[(resolved, policy, [j for j in jobs if j.stream == s]) for s in streams]
            )
        return Resolution(queues=[(resolved, policy, jobs)])

    def _settled(self, domain: str, code: int, reply: str, outcome: str) -> Resolution:
        jobs = self._waiting.pop(domain, [])
        results = [RecipientResult(job.recipient.address, code, reply, outcome) for job in jobs]
        return Resolution(settled=list(zip(jobs, results, strict=True)))

    def relayed(self, job: Job, site: str) -> None:
        """``job`` is queued for a smarthost whose site is ``site``: its domain is shown there."""
        self._relayed[_domain_of(job)] = site

    async def remember(self, now: float) -> None:
        """Every ``REMEMBER_SECONDS`` (``now``: monotonic), write down which site each domain
        resolved to (also when none of its hosts could be used: the queue views name the site as
        soon as the MX records are known) or went to through a smarthost."""
        if now < self._remember_at:
            return
        self._remember_at = now + REMEMBER_SECONDS
        resolver = self._route.resolver if self._route is not None else None
        learned = resolver.learned_sites() if resolver is not None else []
        if self._relayed:
            until = now_ms() + RELAYED_SITE_MS
            learned += [(domain, site, until) for domain, site in self._relayed.items()]
            self._relayed = {}
        if learned:
            await self.offloop.call(remember_sites, learned)


def _domain_of(job: Job) -> str:
    return job.recipient.address.rpartition("@")[2].rstrip(".").lower()
