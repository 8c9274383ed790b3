"""The run loop of every background process: call one step after another until stopped.

A step returns how long to wait before the next (0: at once). A database that stops answering
is logged and waited out; any other failure is logged with its traceback and waited out too, so
a bug in one round never ends the process. ``chores`` run every ``chore_seconds`` between steps
(the worker's housekeeping).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from layang.db import UNAVAILABLE_ERRORS, discard_connection, error_summary


def run_until(
    stop: threading.Event,
    step: Callable[[], float],
    *,
    log: logging.Logger,
    idle_seconds: float,
    after_failure: Callable[[], None] | None = None,
    chores: Sequence[Callable[[], object]] = (),
    chore_seconds: float = 300.0,
) -> None:
    """Run ``step`` until ``stop`` is set. After a failed step, ``after_failure`` runs and the
    loop waits ``idle_seconds``."""
    next_chores = time.monotonic()
    while not stop.is_set():
        try:
            if chores and time.monotonic() >= next_chores:
                next_chores = time.monotonic() + chore_seconds
                for chore in chores:
                    chore()
            wait = step()
        except UNAVAILABLE_ERRORS as error:
            log.warning("database unavailable; retrying shortly: %s", error_summary(error))
            wait = _failed(after_failure, idle_seconds)
        except Exception:
            log.exception("round failed; retrying shortly")
            wait = _failed(after_failure, idle_seconds)
        if wait > 0:
            stop.wait(wait)


def _failed(after_failure: Callable[[], None] | None, idle_seconds: float) -> float:
    discard_connection()
    if after_failure is not None:
        after_failure()
    return idle_seconds
