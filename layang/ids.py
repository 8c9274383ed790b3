"""Record ids: 26 characters, time-ordered and unguessable (the ULID layout in lowercase
Crockford base32), so "newest first" is the primary key's order and "older than" a range of it
(retention, partitions by time)."""

from __future__ import annotations

import secrets
import threading

from layang.clock import now_ms

_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"


_last_id = [0]
_id_lock = threading.Lock()


def new_id() -> str:
    """A 26-character, time-ordered, unguessable identifier (ULID layout, lowercase Crockford).

    Monotonic within a process: ids made in the same millisecond still sort in creation order,
    so "newest first" holds for the rows of one request.
    """
    candidate = (now_ms() << 80) | secrets.randbits(80)
    with _id_lock:
        value = max(candidate, _last_id[0] + 1)
        _last_id[0] = value
    return _encode(value)


def id_floor(at_ms: int) -> str:
    """The smallest ``new_id`` made at ``at_ms``: every id made earlier sorts below it, so
    "older than" is a range of the primary key."""
    return _encode(at_ms << 80)


def id_ms(value: str) -> int:
    """The epoch ms a time-ordered id (:func:`new_id`) was made at: its first 10 characters."""
    ms = 0
    for char in value[:10].lower():
        ms = ms * 32 + max(_CROCKFORD.find(char), 0)
    return ms


def _encode(value: int) -> str:
    """A 130-bit ``value`` as 26 lowercase Crockford base32 characters, most significant first."""
    chars = []
    for _ in range(26):
        value, digit = divmod(value, 32)
        chars.append(_CROCKFORD[digit])
    return "".join(reversed(chars))
