"""What one SMTP submission process lets its clients hold: connections, and AUTH guesses.

Counted in the memory of the process, on its event loop (so without locks): a second
``layang smtpd`` process, or a restart, counts afresh.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from dataclasses import dataclass, field

AUTH_FAILURES_PER_CONNECTION = 3
AUTH_FAILURE_WINDOW_SECONDS = 600.0


@dataclass
class ConnectionLimits:
    max_connections: int
    max_per_address: int
    max_auth_failures: int
    window_seconds: float = AUTH_FAILURE_WINDOW_SECONDS
    total: int = 0
    open: Counter[str] = field(default_factory=Counter)
    _failures: dict[str, deque[float]] = field(default_factory=dict)

    def admit(self, address: str) -> bool:
        """Count a new connection from ``address``; False (nothing counted) when it is one
        too many, in all or from that address."""
        if self.total >= self.max_connections or self.open[address] >= self.max_per_address:
            return False
        self.open[address] += 1
        self.total += 1
        return True

    def release(self, address: str) -> None:
        self.total -= 1
        self.open[address] -= 1
        if self.open[address] <= 0:
            del self.open[address]

    def auth_failed(self, address: str) -> None:
        now = time.monotonic()
        self._expire(address, now)
        self._failures.setdefault(address, deque()).append(now)
        if len(self._failures) > 4096:  # many addresses each failing once: forget the stale
            for stale in list(self._failures):
                self._expire(stale, now)

    def auth_blocked(self, address: str) -> bool:
        """Whether ``address`` has used up its failed AUTH attempts for the window."""
        self._expire(address, time.monotonic())
        return len(self._failures.get(address, ())) >= self.max_auth_failures

    def _expire(self, address: str, now: float) -> None:
        failures = self._failures.get(address)
        if failures is None:
            return
        while failures and failures[0] <= now - self.window_seconds:
            failures.popleft()
        if not failures:
            del self._failures[address]
