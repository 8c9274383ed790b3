"""The reputation circuit breaker: per account and per From domain, over a rolling 24 h, a
hard-bounce or complaint rate at a warning threshold raises a ``Warning`` event; at a pause
threshold broadcast sending stops (transactional too with ``LAYANG_PAUSE_TRANSACTIONAL``) until
``layang accounts resume``.

The rates come from the counters written with the events (``layang.mail.reputation``). The
recording of events that move them judges at once (``judge_recorded``, in
``layang.mail.breaker_levels``), and so does a send (``check_sending``); whoever first sees a
level rise records it in ``breaker_state`` (a conditional upsert, so exactly one process does)
and queues the ``Warning`` event for webhooks in the same transaction. A level only rises until
a resume, which also empties the counters: the window starts afresh.
"""

from __future__ import annotations

import threading
import time

from layang.clock import now_ms
from layang.config import Config
from layang.db import write_transaction
from layang.domain.errors import SendingPaused
from layang.mail.breaker_levels import (
    CLEAR,
    LEVEL_NAMES,
    PAUSED,
    WARNED,
    Rates,
    Standing,
    judge,
    judge_recorded,
    rates_of,
    standing,
)
from layang.mail.reputation import ACCOUNT_WIDE
from layang.models import BROADCAST, Account, BreakerCount, BreakerState

__all__ = [
    "CACHE_SECONDS",
    "CLEAR",
    "LEVEL_NAMES",
    "PAUSED",
    "WARNED",
    "Rates",
    "Standing",
    "check_sending",
    "judge",
    "judge_recorded",
    "rates_of",
    "resume",
    "standing",
    "standings",
]

CACHE_SECONDS = 1.0
"""How long a process trusts what it last read of a breaker: a level another process
recorded, or a resume, takes effect here within this time."""

_cache: dict[tuple[int, str], tuple[float, Standing]] = {}
_cache_lock = threading.Lock()


def _cached_standing(account_id: int, domain: str, config: Config) -> Standing:
    key = (account_id, domain)
    now = time.monotonic()
    with _cache_lock:
        found = _cache.get(key)
    if found is not None and found[0] > now:
        return found[1]
    result = standing(account_id, domain, config)
    with _cache_lock:
        _cache[key] = (now + CACHE_SECONDS, result)
    return result


def check_sending(account: Account, from_domain: str, stream: str, config: Config) -> None:
    """Raise ``SendingPaused`` when the breaker of the account or of ``from_domain`` paused
    the mail of ``stream``: broadcast always, transactional with ``LAYANG_PAUSE_TRANSACTIONAL``."""
    if stream != BROADCAST and not config.pause_transactional:
        # Judged anyway, so that a level crossed is recorded and announced by sending.
        for domain in (ACCOUNT_WIDE, from_domain):
            _cached_standing(account.id, domain, config)
        return
    for domain in (ACCOUNT_WIDE, from_domain):
        found = _cached_standing(account.id, domain, config)
        if found.level == PAUSED:
            raise SendingPaused(found.scope, found.reason)


def standings(account: Account, config: Config) -> list[Standing]:
    """Every breaker of ``account`` above clear (judged now), the account's own first: what
    the console's banner shows."""
    domains = [ACCOUNT_WIDE]
    domains += sorted(
        {
            domain
            for (domain,) in BreakerCount.select(BreakerCount.domain)
            .where((BreakerCount.account == account.id) & (BreakerCount.domain != ACCOUNT_WIDE))
            .distinct()
            .tuples()
        }
        | {
            domain
            for (domain,) in BreakerState.select(BreakerState.domain)
            .where((BreakerState.account == account.id) & (BreakerState.domain != ACCOUNT_WIDE))
            .tuples()
        }
    )
    found = [standing(account.id, domain, config) for domain in domains]
    return [item for item in found if item.level > CLEAR]


def resume(account: Account) -> int:
    """Lift every breaker of ``account`` and start its window afresh; returns how many were
    raised."""
    with write_transaction():
        lifted = (
            BreakerState.update(level=CLEAR, reason="", changed_at=now_ms())
            .where((BreakerState.account == account.id) & (BreakerState.level > CLEAR))
            .execute()
        )
        BreakerCount.delete().where(BreakerCount.account == account.id).execute()
    with _cache_lock:
        for key in [key for key in _cache if key[0] == account.id]:
            del _cache[key]
    return lifted
