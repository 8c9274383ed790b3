"""Blocking calls made for the event loop: the database never runs on it.

The engine's site state (slots, rates, slow-downs), TLS-RPT counts and learned sites are short
database transactions; :class:`OffLoop` runs them in a few threads of their own. A database that
does not answer leaves the engine to its own limits: the call returns its ``default``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable
from typing import Any

from layang.db import UNAVAILABLE_ERRORS, database, discard_connection, error_summary

log = logging.getLogger("layang.engine")

THREADS = 4


class OffLoop:
    """Runs blocking database calls in ``THREADS`` threads (one connection each)."""

    def __init__(self) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=THREADS, thread_name_prefix="site-state"
        )

    async def call(
        self, function: Callable[..., Any], *args: Any, default: Any = None, **kwargs: Any
    ) -> Any:
        """``function(*args, **kwargs)`` in a thread; ``default`` when the database is
        unavailable (logged). Other errors are raised."""

        def call() -> Any:
            try:
                database.connect(reuse_if_open=True)
                return function(*args, **kwargs)
            except UNAVAILABLE_ERRORS as error:
                discard_connection()
                log.warning("site state unavailable: %s", error_summary(error))
                return default

        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
