"""What the engine carries and where it queues it: jobs, their destinations' ready queues, and
the ledger the engine reports each job's fate to.

A *destination* is what sessions are kept per: the smarthost, the capture directory, the
simulator, or on the ``mx:`` route one MX host set of a site (the domains sharing that set share
its sessions; a domain with a transport policy of its own gets its own destination, and with
source pools each stream does). The site's limits and state are shared by all its
destinations. Each has a ready queue of jobs in arrival order and a limit of sessions.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from layang.delivery.envelope import Envelope
from layang.delivery.outcomes import RecipientResult
from layang.delivery.queue import ClaimedRecipient
from layang.delivery.routes import Route
from layang.destinations.mx import Destination as MxDestination
from layang.destinations.policy import OPPORTUNISTIC, TransportPolicy
from layang.destinations.shaping import SiteRule


@dataclass(eq=False)
class Job:
    """One recipient's copy on its way: the transaction to run, and what the ledger keeps with
    its outcome (``built``: the composed bytes kept for retries, see ``record_attempts``)."""

    recipient: ClaimedRecipient
    route: Route
    destination: str
    envelope: Envelope
    built: tuple[str, bytes] | None = None
    started: float = 0.0
    detail: dict[str, Any] = field(default_factory=dict)
    mx: MxDestination | None = None  # direct to MX: the recipient domain resolved
    policy: TransportPolicy | None = None  # direct to MX: what the domain asks of TLS
    finished: bool = False
    stream: str = "transactional"
    admitted: bool = False  # counted by the admission (past the point of no return)
    account: int = 0  # whose mail: an account's share of the engine's sessions
    from_domain: str = ""  # the From header's domain: the breaker its outcome counts for
    deadline: asyncio.Timeout | None = None  # the transaction's, while it runs


class Ledger(Protocol):
    """What the engine needs of the worker's recorder (the bookkeeper): every method is called
    on the engine's loop and must not block."""

    def unrecorded_total(self) -> int:
        """Recipients whose outcome was handed over and is not recorded yet (a hint)."""
        ...

    def settle(self, job: Job, result: RecipientResult) -> None:
        """Take ``job``'s outcome, to record."""
        ...

    def hand_back(self, jobs: Sequence[Job]) -> None:
        """Release ``jobs`` (never started) to the queue."""
        ...

    def hold(self, jobs: Sequence[Job], site: str, until_ms: int | None, reason: str) -> None:
        """Hand ``jobs`` back to wait on ``site`` until ``until_ms`` (``record_waiting``)."""
        ...


@dataclass
class Destination:
    """A destination's ready queue and the state of its runners."""

    key: str
    route: Route
    limit: int
    per_session: int
    queue: collections.deque[Job] = field(default_factory=collections.deque)
    runners: int = 0
    waiting: int = 0  # runners looking for their next job
    in_flight: dict[Job, float] = field(default_factory=dict)
    site: str | None = None  # direct to MX: the site, whose state is shared
    rule: SiteRule | None = None
    blocked_until: float = 0.0  # no new session before (monotonic): the site is at its limit
    paused: bool = False  # the site asked to slow down: the sessions stop

    @property
    def ceiling(self) -> int:
        """The site's most sessions across processes (its rule, per source address)."""
        assert self.rule is not None
        return self.rule.connections * len(self.route.transport.sources)  # type: ignore[attr-defined]


class ReadyQueues:
    """Every destination of one engine, made as jobs come; ``connections`` bounds each
    destination's sessions (with its route's and its site's own limits)."""

    def __init__(self, connections: int) -> None:
        self.connections = connections
        self.destinations: dict[str, Destination] = {}

    def __iter__(self) -> Any:
        return iter(list(self.destinations.values()))

    def of_site(self, site: str) -> list[Destination]:
        return [d for d in self.destinations.values() if d.site == site]

    @property
    def any_site(self) -> bool:
        """Whether any destination is a site (the ``mx:`` route)."""
        return any(d.site for d in self.destinations.values())

    def for_job(self, job: Job) -> Destination:
        """The destination of a job whose route names it (not ``sited``). A smarthost is a
        site (its ``site`` and ``rule``): its limit and state are shared across processes."""
        destination = self.destinations.get(job.destination)
        if destination is None:
            limit = min(job.route.max_sessions or self.connections, self.connections)
            transport = job.route.transport
            site = getattr(transport, "site", None)
            if isinstance(site, str):
                rule = transport.rule  # type: ignore[attr-defined]
                destination = Destination(
                    job.destination,
                    job.route,
                    0,
                    rule.messages_per_connection,
                    site=site,
                    rule=rule,
                )
                destination.limit = min(limit, destination.ceiling)
            else:
                destination = Destination(job.destination, job.route, limit, 100)
            self.destinations[job.destination] = destination
        return destination

    def for_resolved(
        self, resolved: MxDestination, policy: TransportPolicy, jobs: list[Job]
    ) -> Destination:
        """The destination of ``jobs`` to one resolved domain with ``policy`` (one stream, if
        the route has source pools), with the jobs queued on it."""
        route = jobs[0].route
        # A session carries mail only for domains whose own MX set includes the host it is
        # connected to: domains share sessions only when they share their MX set (the site's
        # limits and state are shared more widely, by site). A domain with a policy of its
        # own gets sessions checked against it (still within the site's shared limits).
        plain = (
            policy.kind == OPPORTUNISTIC and not policy.required and policy.fetch_failure is None
        )
        mx_set = "+".join(sorted({host.name.rstrip(".").lower() for host in resolved.hosts}))
        key = f"mx:{resolved.site}" if mx_set == resolved.site else f"mx:{resolved.site}|{mx_set}"
        if not plain:
            key += f"|{resolved.domain}"
        if route.transport.pools:  # type: ignore[attr-defined]
            # Each stream's sessions leave from its own addresses: they are not shared.
            key += f"|{jobs[0].stream}"
        destination = self.destinations.get(key)
        if destination is None:
            rule = resolved.rule
            destination = Destination(
                key, route, 0, rule.messages_per_connection, site=resolved.site, rule=rule
            )
            destination.limit = min(self.connections, destination.ceiling)
            self.destinations[key] = destination
        for job in jobs:
            job.mx = resolved
            job.policy = policy
            destination.queue.append(job)
        return destination

    def take_all(self) -> list[Job]:
        """Every queued job, taken out of its queue."""
        jobs = [job for d in self.destinations.values() for job in d.queue]
        for destination in self.destinations.values():
            destination.queue.clear()
        return jobs
