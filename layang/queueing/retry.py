"""When to try again: the one retry policy of mail and webhooks.

Delays grow (doubling from a base, or following a schedule) with the same jitter either way,
so that work that failed together does not come back together.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

JITTER = 0.2
"""Each delay is spread by this fraction either way."""


@dataclass(frozen=True)
class RetryPolicy:
    """After the ``n``-th failed attempt, wait ``schedule[n-1]`` seconds (``doubling``: the
    base times 2^(n-1)), with ±``JITTER``; give up once the schedule is spent, or once
    ``max_age_seconds`` have passed since the work was created (the last try then lands on the
    deadline itself)."""

    schedule: tuple[float, ...] = ()
    base_seconds: float = 0.0
    max_age_seconds: float | None = None

    @classmethod
    def doubling(cls, base_seconds: float, max_age_seconds: float) -> RetryPolicy:
        """Mail: ``base_seconds``, then twice as long each time, until ``max_age_seconds``."""
        return cls(base_seconds=base_seconds, max_age_seconds=max_age_seconds)

    @classmethod
    def scheduled(cls, delays: tuple[float, ...]) -> RetryPolicy:
        """Webhooks: one delay per retry, then no more."""
        return cls(schedule=tuple(delays))

    def next_attempt(self, attempts: int, created_at: int, now: int) -> int | None:
        """When (epoch ms) to try again after ``attempts`` failed attempts of work created at
        ``created_at``, or None when it is to be given up."""
        if self.schedule:
            if attempts > len(self.schedule):
                return None
            delay = self.schedule[attempts - 1]
        else:
            delay = self.base_seconds * 2 ** max(attempts - 1, 0)
        at = now + int(delay * random.uniform(1 - JITTER, 1 + JITTER) * 1000)
        if self.max_age_seconds is None:
            return at
        deadline = created_at + int(self.max_age_seconds * 1000)
        return None if now >= deadline else min(at, deadline)
