"""Time as the service stores and shows it: integer epoch milliseconds, ISO 8601 UTC on the wire.

No dependencies, so that ``templates_store`` can share it.
"""

from __future__ import annotations

import time


def now_ms() -> int:
    """Current time as integer milliseconds since the epoch (how every timestamp is stored)."""
    return time.time_ns() // 1_000_000


def iso_ms(ms: int) -> str:
    """``2026-11-21T10:00:00.123Z`` for a timestamp in epoch milliseconds."""
    seconds, millis = divmod(ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"
