"""Reading what a server's reply means beyond its code."""

from __future__ import annotations

import re

_SLOW_DOWN = re.compile(
    r"\b4\.7\.(?:0|28|500|\d+)\b.*\b(?:rate|limit|throttl|too many|slow|volume|deferred|TS0\d)"
    r"|\b(?:rate|limit|throttl|too many|slow down|volume|TS0\d)",
    re.IGNORECASE,
)


def is_slow_down(code: int, reply: str) -> bool:
    """Whether a 4xx reply asks the sender to slow down (Gmail ``421 4.7.28``, Microsoft
    ``451 4.7.500``, Yahoo ``421 4.7.0 [TS01]``, or any 421/4.7.x naming a rate or volume)."""
    if not 400 <= code < 500:
        return False
    if code != 421 and "4.7." not in reply:
        return False
    return bool(_SLOW_DOWN.search(reply))
