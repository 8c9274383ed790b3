"""A per-process budget for the memory large request bodies take.

A send costs about twice its body at its peak: its bytes and their text while it is read,
its text and what is parsed from it while it is parsed; it is stored in chunks, beside only what
was parsed (``layang.mail.outbox.StoredPayload``). Requests whose body is over
``LARGE_BODY_BYTES`` are admitted only while their cost fits in ``LAYANG_HTTP_BODY_BUDGET_MB``
with the others in flight; a request waits up to ``WAIT_SECONDS`` for room, then gets 503 with
``Retry-After``. Smaller requests are never held. One request larger than the whole budget is
admitted when nothing else holds any of it.

``layang serve``'s HTTP front (``layang.serving.http_front``) takes the room before it reads a
body, so a waiting request holds no more than its head; the WSGI middleware
(``BodyBudgetMiddleware``) covers every other way a request reaches the application (``layang
run``, a body the front did not buffer).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

MIB = 1024 * 1024
LARGE_BODY_BYTES = 1 * MIB
WAIT_SECONDS = 10.0
RETRY_AFTER_SECONDS = 5
COST_PER_BODY_BYTE = 2
"""Measured on ``layang serve`` (tests/test_body_budget.py, bench/api_memory.py): a send of a
24 MiB body peaks at 2.0 to 2.1 times its body over the process's resident memory before it,
on SQLite and PostgreSQL alike. What is over twice the body is the request's own working
memory, about 2 MiB whatever the body's size, which a process that has just given its memory
back (``_trim_heaps``) takes again."""


class BodyBudget:
    """Bytes of large bodies' cost that one process admits at once. Thread-safe."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_use = 0
        self._room = threading.Condition()

    @staticmethod
    def cost(content_length: int) -> int:
        """What a body of ``content_length`` bytes takes from the budget: 0 when it is small."""
        return COST_PER_BODY_BYTE * content_length if content_length > LARGE_BODY_BYTES else 0

    def _fits(self, cost: int) -> bool:
        return self.in_use + cost <= self.limit or self.in_use == 0

    def try_take(self, cost: int) -> bool:
        """Take ``cost`` if it fits now."""
        with self._room:
            if not self._fits(cost):
                return False
            self.in_use += cost
            return True

    def take(self, cost: int, timeout: float = WAIT_SECONDS) -> bool:
        """Take ``cost``, waiting up to ``timeout`` seconds for room; False if there was none."""
        deadline = time.monotonic() + timeout
        with self._room:
            while not self._fits(cost):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._room.wait(remaining)
            self.in_use += cost
            return True

    def give_back(self, cost: int) -> None:
        """Give back ``cost``; when nothing holds any of the budget any more, the memory the
        large requests freed goes back to the system (``malloc_trim``)."""
        if not cost:
            return
        with self._room:
            self.in_use -= cost
            idle = self.in_use == 0
            self._room.notify_all()
        if idle:
            _trim_heaps()


_budgets: dict[int, BodyBudget] = {}
_budgets_lock = threading.Lock()
_held = threading.local()


def process_budget(limit: int) -> BodyBudget:
    """This process's budget of ``limit`` bytes (the HTTP front and the application share it)."""
    with _budgets_lock:
        return _budgets.setdefault(limit, BodyBudget(limit))


def hold_for_this_thread(cost: int) -> None:
    """Mark the request this thread is about to handle as admitted already (by the front)."""
    _held.cost = cost


def _held_by_front() -> int:
    return getattr(_held, "cost", 0)


def over_budget_answer() -> tuple[str, list[tuple[str, str]], bytes]:
    """The 503 for a request that found no room: (status, headers, body), in docs/api.md's
    error shape."""
    body = json.dumps(
        {
            "error": "service_unavailable",
            "message": (
                "Too many large requests are in progress on this server "
                f"(LAYANG_HTTP_BODY_BUDGET_MB); retry in {RETRY_AFTER_SECONDS} s."
            ),
            "status": 503,
        }
    ).encode()
    headers = [
        ("Content-Type", "application/json"),
        ("Content-Length", str(len(body))),
        ("Retry-After", str(RETRY_AFTER_SECONDS)),
    ]
    return "503 SERVICE UNAVAILABLE", headers, body


class BodyBudgetMiddleware:
    """WSGI middleware admitting large bodies under ``budget``."""

    def __init__(self, app: Callable[..., Iterable[bytes]], budget: BodyBudget) -> None:
        self.app = app
        self.budget = budget

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        cost = self.budget.cost(length)
        if not cost or _held_by_front():
            return self.app(environ, start_response)
        if not self.budget.take(cost, WAIT_SECONDS):
            status, headers, body = over_budget_answer()
            start_response(status, headers)
            return [body]
        try:
            # Flask has handled the request when it returns: what is left is its answer.
            return self.app(environ, start_response)
        finally:
            self.budget.give_back(cost)


_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def return_large_blocks_to_the_os() -> None:
    """Have glibc's malloc serve every block of 1 MiB or more by its own mapping, returned to
    the system when freed. By default the threshold grows with the blocks freed (up to 32 MiB),
    after which request-sized buffers are carved from the heap and a process keeps its peak
    for good. Smaller blocks are returned when the body budget is next idle (``give_back``).
    No-op where the C library is not glibc."""
    name = ctypes.util.find_library("c")
    if name is None:
        return
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, LARGE_BODY_BYTES)
    mallopt(_M_TRIM_THRESHOLD, 4 * LARGE_BODY_BYTES)
    global _malloc_trim
    _malloc_trim = getattr(libc, "malloc_trim", None)


_malloc_trim: Callable[[int], int] | None = None


def _trim_heaps() -> None:
    # What a large request left free in the blocks under 1 MiB (its pieces, the database's
    # pages) stays in each request thread's malloc arena, tens of MiB in all after a few
    # large sends at once; the next large request re-grows what it needs (2 MiB or so).
    if _malloc_trim is not None:
        _malloc_trim(0)
