"""Each account's share of an engine's sessions, so that one tenant's mail never starves another's.

While one account alone has mail in the engine, its mail may keep all but ``reserve`` of the
sessions busy (the reserve lets another account's first mail start at once); while several
have, each may keep an equal part of them busy. A session being set up counts towards the share
of the account whose mail it was opened for, as a busy one does. Mail of an account at its
share waits in its destination's queue while mail of others behind it goes out (a runner looks
``SCAN`` jobs deep). docs/delivery.md, "Sessions", says what a user sees of it.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Iterable

from layang.delivery.jobs import Job

SCAN = 64
"""How far down a destination's queue a runner looks for mail of an account under its share."""


class AccountShares:
    """The accounts with mail in one engine: how much each has there (``pending``) and how
    many sessions its mail keeps busy (``busy``); both forget an account at zero."""

    def __init__(self, connections: int) -> None:
        self.connections = max(1, connections)
        self.reserve = self.connections // 10
        self._pending: collections.Counter[int] = collections.Counter()
        self._busy: collections.Counter[int] = collections.Counter()

    def arrived(self, job: Job) -> None:
        """``job`` came into the engine."""
        self._pending[job.account] += 1

    def left(self, job: Job) -> None:
        """``job`` left the engine (finished, handed back or held)."""
        _count_down(self._pending, job.account)

    def started(self, account: int) -> None:
        """A session is now busy (or being set up) for ``account``'s mail."""
        self._busy[account] += 1

    def stopped(self, account: int) -> None:
        """A session busy for ``account``'s mail is no longer."""
        _count_down(self._busy, account)

    def share(self) -> int:
        """The most sessions one account's mail may keep busy now."""
        active = len(self._pending)  # only accounts with mail here (``_count_down``)
        if active <= 1:
            return max(1, self.connections - self.reserve)
        return max(1, self.connections // active)

    def under_share(self, jobs: Iterable[Job]) -> Job | None:
        """The first of ``jobs`` (among the first ``SCAN``) whose account is under its share."""
        share = self.share()
        busy = self._busy
        return next(
            (job for job in itertools.islice(jobs, SCAN) if busy[job.account] < share), None
        )

    def take(self, queue: collections.deque[Job], replacing: Job | None = None) -> Job | None:
        """The first job of ``queue`` (among the first ``SCAN``) whose account is under its
        share, taken out of it; None: none is. ``replacing``: the session asking carries that
        job now and this one next, so that job's account counts one session less meanwhile."""
        if replacing is not None:
            self.stopped(replacing.account)
        try:
            share = self.share()
            busy = self._busy
            for index, job in enumerate(itertools.islice(queue, SCAN)):
                if busy[job.account] < share:
                    del queue[index]
                    return job
            return None
        finally:
            if replacing is not None:
                self.started(replacing.account)

    def crowding(self) -> set[int]:
        """The accounts whose mail keeps their share of the sessions busy with more of it
        queued behind (a hint, safe to read from another thread: the worker claims others'
        mail too)."""
        busy = dict(self._busy)
        pending = dict(self._pending)
        share = self.share()
        return {a for a, n in busy.items() if n >= share and pending.get(a, 0) > n}


def _count_down(counter: collections.Counter[int], account: int) -> None:
    """One less of ``account`` (gone at none: the counters stay as small as the accounts with
    mail in the engine)."""
    if counter[account] <= 1:
        counter.pop(account, None)
    else:
        counter[account] -= 1
