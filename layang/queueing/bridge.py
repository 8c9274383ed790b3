"""The bridge of every sender: a synchronous claimer feeding an event loop in its own thread.

A worker (mail) or dispatcher (webhooks) claims work from the database in its own thread,
where blocking is fine, and hands it to coroutines on an event loop, where thousands of network
conversations wait at once for the cost of a few. :class:`LoopThread` is that loop and its
thread: work goes in with :meth:`~LoopThread.call_soon` (a plain function run on the loop, no
task) or :meth:`~LoopThread.start` (a coroutine, whose result the claimer collects from the
future); :meth:`~LoopThread.stop` ends it. :class:`Backlog` counts what was handed over and is
not finished, so the claimer can wait until there is room for more (``wait_below``) instead of
claiming what it cannot send soon. :class:`LoopSignal` wakes a coroutine from another thread
(the mail engine's cap on unrecorded outcomes waits on the recorder with one).

Nothing on the loop touches the database: what must (recording, site state) runs in threads
and reaches the loop only through these.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """An event loop running in a daemon thread named ``name`` from construction to
    :meth:`stop`."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    def call_soon(self, function: Callable[..., object], *args: Any) -> None:
        """Run ``function(*args)`` on the loop, from any thread (no task is made)."""
        self.loop.call_soon_threadsafe(function, *args)

    def start(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run ``coroutine`` on the loop; its future may be waited on from any thread."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def call(self, coroutine: Coroutine[Any, Any, T], timeout: float) -> T:
        """Run ``coroutine`` on the loop and wait up to ``timeout`` seconds for its result;
        raises what it raises, or :class:`TimeoutError`."""
        return self.start(coroutine).result(timeout)

    def stop(self, last: Coroutine[Any, Any, object] | None = None, timeout: float = 15.0) -> None:
        """Run ``last`` (if given, for up to ``timeout`` seconds), then end the loop and its
        thread. Safe to call more than once."""
        if self.loop.is_closed():
            if last is not None:
                last.close()
            return
        if last is not None:
            with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
                self.call(last, timeout)
        with contextlib.suppress(RuntimeError):  # closed meanwhile
            self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)


class Backlog:
    """How many items were handed to the loop and are not finished: counted up by the claimer
    (:meth:`add`), down by the loop (:meth:`done`), waited on by the claimer. Thread-safe."""

    def __init__(self) -> None:
        self.count = 0
        self._changed = threading.Condition()

    def add(self, count: int) -> None:
        with self._changed:
            self.count += count

    def done(self, count: int = 1) -> None:
        with self._changed:
            self.count -= count
            self._changed.notify_all()

    def wait_below(self, count: int, timeout: float) -> None:
        """Block until fewer than ``count`` items are unfinished, or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self.count >= count:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._changed.wait(left)


class LoopSignal:
    """Set from any thread, awaited on one loop (bound by the first :meth:`wait`)."""

    def __init__(self) -> None:
        self._event: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def set(self) -> None:
        """Wake whoever waits (a no-op before anyone waited, or once the loop is closed)."""
        loop, event = self._loop, self._event
        if loop is not None and event is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed between the check and the call
                loop.call_soon_threadsafe(event.set)

    async def wait(self, timeout: float) -> None:
        """Wait until set (after this call began) or ``timeout`` seconds pass."""
        loop = asyncio.get_running_loop()
        if self._event is None or self._loop is not loop:  # first, or a new loop
            self._event = asyncio.Event()
            self._loop = loop
        self._event.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._event.wait(), timeout)
