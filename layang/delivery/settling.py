"""How jobs leave the engine, and how many are still in it.

Every job the worker submits leaves the engine exactly once, by one of three ways: *settled*
with its outcome (to the ledger at once, which records it), *handed back* unfinished (to be
claimed again, by this worker or another), or *held* on its site (a site that asked to slow down
or is suspended: the ledger records one ``Delay`` and charges no attempt). The backlog counts
the jobs in between, queued or in flight; the worker claims more only while it is low.
"""

from __future__ import annotations

import collections
from dataclasses import replace

from layang.delivery.jobs import Destination, Job, Ledger
from layang.delivery.outcomes import RecipientResult
from layang.delivery.shares import AccountShares
from layang.metrics import site_outcome
from layang.queueing.bridge import Backlog


class Settling:
    """The ways out of the engine, to ``ledger``; every job that leaves is also gone from its
    account's ``shares``. ``backlog`` counts jobs submitted and not gone (thread-safe)."""

    def __init__(self, ledger: Ledger, shares: AccountShares) -> None:
        self.ledger = ledger
        self.shares = shares
        self.backlog = Backlog()

    def finish(self, job: Job, result: RecipientResult) -> None:
        """Settle ``job`` with ``result`` (once: a job finished already is left as it is)."""
        if job.finished:
            return
        job.finished = True
        self.shares.left(job)
        try:
            if job.mx is not None:
                site_outcome(job.mx.site, result.outcome)
            self.ledger.settle(job, result)
        finally:
            self.backlog.done()

    def fail_queue(
        self,
        destination: Destination,
        result: RecipientResult,
        first: Job | None = None,
        *,
        domain: str | None = None,
    ) -> None:
        """Settle ``first`` and everything queued for ``destination`` (to ``domain`` only,
        if given) with ``result``."""
        queued: list[Job] = []
        kept: collections.deque[Job] = collections.deque()
        for job in destination.queue:
            ours = domain is None or (job.mx is not None and job.mx.domain == domain)
            (queued if ours else kept).append(job)
        destination.queue = kept
        failed = [first, *queued] if first is not None else queued
        for job in failed:
            self.finish(job, replace(result, recipient=job.recipient.address))

    def give_back(self, destination: Destination) -> None:
        """Hand everything queued for ``destination`` back to the queue."""
        jobs = list(destination.queue)
        destination.queue.clear()
        if jobs:
            self.let_go(jobs)
            self.ledger.hand_back(jobs)

    def hold(self, destination: Destination, site: str, until_ms: int | None, reason: str) -> None:
        """Hand everything queued for ``destination`` back to wait on ``site`` until
        ``until_ms`` (None: until the site says otherwise), for ``reason``."""
        jobs = list(destination.queue)
        destination.queue.clear()
        if jobs:
            self.let_go(jobs)
            self.ledger.hold(jobs, site, until_ms, reason)

    def let_go(self, jobs: list[Job]) -> None:
        """``jobs`` leave the engine unfinished (handed back or held)."""
        self.backlog.done(len(jobs))
        for job in jobs:
            self.shares.left(job)
