"""The reputation circuit breaker (contract 17): per account and per From domain, over a
rolling 24 h, a hard-bounce or complaint rate at a warning threshold raises a ``Warning`` event;
at a pause threshold broadcast sending stops (transactional too with
``LAYANG_PAUSE_TRANSACTIONAL``) until ``layang accounts resume``.

The rates come from the counters written with the events (``layang.mail.reputation``). A send
judges its account and domain (``check_sending``); whoever first sees a level rise records it
in ``breaker_state`` (a conditional upsert, so exactly one process does, whichever it is) and
queues the ``Warning`` event for webhooks in the same transaction. A level only rises until a
resume, which also empties the counters: the window starts afresh.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass

from peewee import fn

from layang.clock import iso_ms, now_ms
from layang.config import Config
from layang.db import database, is_postgresql, new_id, write_transaction
from layang.domain.errors import SendingPaused
from layang.mail.reputation import ACCOUNT_WIDE, WINDOW_MS, bucket_of
from layang.models import BROADCAST, WARNING, Account, BreakerCount, BreakerState

CLEAR, WARNED, PAUSED = 0, 1, 2
LEVEL_NAMES = {CLEAR: "clear", WARNED: "warning", PAUSED: "paused"}
CACHE_SECONDS = 1.0
"""How long a process trusts what it last read of a breaker: a level another process
recorded, or a resume, takes effect here within this time."""


@dataclass(frozen=True, slots=True)
class Rates:
    """An account's or domain's figures over the window."""

    sent: int
    hard_bounces: int
    complaints: int

    @property
    def bounce_rate(self) -> float:
        return self.hard_bounces / self.sent if self.sent else 0.0

    @property
    def complaint_rate(self) -> float:
        return self.complaints / self.sent if self.sent else 0.0


@dataclass(frozen=True, slots=True)
class Standing:
    """Where one breaker stands: ``domain`` is '' for the account's own."""

    account_id: int
    domain: str
    level: int
    reason: str
    rates: Rates

    @property
    def scope(self) -> str:
        return f"the domain {self.domain}" if self.domain else "this account"

    @property
    def level_name(self) -> str:
        return LEVEL_NAMES[self.level]


def _percent(rate: float) -> str:
    return f"{rate * 100:.2f}".rstrip("0").rstrip(".") + " %"


def judge(rates: Rates, config: Config) -> tuple[int, str]:
    """The level ``rates`` call for and, above clear, the sentence naming the rate."""
    if rates.sent < config.breaker_min_messages:
        return CLEAR, ""
    found = []
    for name, rate, count, warn, pause in (
        (
            "hard-bounce",
            rates.bounce_rate,
            rates.hard_bounces,
            config.breaker_bounce_warn,
            config.breaker_bounce_pause,
        ),
        (
            "complaint",
            rates.complaint_rate,
            rates.complaints,
            config.breaker_complaint_warn,
            config.breaker_complaint_pause,
        ),
    ):
        level = PAUSED if rate >= pause else WARNED if rate >= warn else CLEAR
        if level:
            threshold = pause if level == PAUSED else warn
            found.append(
                (
                    level,
                    f"{name} rate {_percent(rate)} ({count} of {rates.sent} messages in 24 h) "
                    f"is at or above the {_percent(threshold)} "
                    f"{'pause' if level == PAUSED else 'warning'} threshold",
                )
            )
    if not found:
        return CLEAR, ""
    return max(found, key=lambda item: item[0])


def rates_of(account_id: int, domain: str, now: int | None = None) -> Rates:
    """The counters of one account (``domain`` '') or one of its From domains over 24 h."""
    since = bucket_of((now or now_ms()) - WINDOW_MS)
    row = (
        BreakerCount.select(
            fn.SUM(BreakerCount.sent),
            fn.SUM(BreakerCount.hard_bounces),
            fn.SUM(BreakerCount.complaints),
        )
        .where(
            (BreakerCount.account == account_id)
            & (BreakerCount.domain == domain)
            & (BreakerCount.bucket >= since)
        )
        .tuples()
        .first()
    )
    return Rates(*(int(value or 0) for value in (row or (0, 0, 0))))


def standing(account_id: int, domain: str, config: Config) -> Standing:
    """Judge one breaker now, recording (and announcing) a level that rose."""
    rates = rates_of(account_id, domain)
    level, reason = judge(rates, config)
    stored = BreakerState.get_or_none(
        (BreakerState.account == account_id) & (BreakerState.domain == domain)
    )
    if stored is not None and stored.level >= level:
        return Standing(account_id, domain, stored.level, stored.reason, rates)
    if level == CLEAR:
        return Standing(account_id, domain, CLEAR, "", rates)
    if _raise_level(account_id, domain, level, reason, rates):
        return Standing(account_id, domain, level, reason, rates)
    # Another process recorded first: take what it recorded.
    stored = BreakerState.get(
        (BreakerState.account == account_id) & (BreakerState.domain == domain)
    )
    return Standing(account_id, domain, stored.level, stored.reason, rates)


def _raise_level(account_id: int, domain: str, level: int, reason: str, rates: Rates) -> bool:
    """Record ``level`` unless it is already that high; on success queue the ``Warning`` for
    the account's webhooks in the same transaction. True when this call raised it."""
    param = database.obj.param
    now = now_ms()
    with write_transaction():
        cursor = database.execute_sql(
            'INSERT INTO "breaker_state" '  # noqa: S608 - placeholders and names only
            '("account_id", "domain", "level", "reason", "changed_at") '
            f"VALUES ({param}, {param}, {param}, {param}, {param}) "
            'ON CONFLICT ("account_id", "domain") DO UPDATE SET "level" = excluded."level", '
            '"reason" = excluded."reason", "changed_at" = excluded."changed_at" '
            'WHERE "breaker_state"."level" < excluded."level" RETURNING "id"',
            [account_id, domain, level, reason, now],
        )
        if cursor.fetchone() is None:
            return False
        detail = {
            "scope": "domain" if domain else "account",
            "domain": domain or None,
            "level": LEVEL_NAMES[level],
            "reason": reason,
            "messages": rates.sent,
            "hardBounces": rates.hard_bounces,
            "complaints": rates.complaints,
            "hardBounceRate": round(rates.bounce_rate, 6),
            "complaintRate": round(rates.complaint_rate, 6),
            "at": iso_ms(now),
        }
        _queue_warning(account_id, now, json.dumps(detail))
    return True


def _queue_warning(account_id: int, at: int, detail: str) -> None:
    postgresql = is_postgresql()
    param = database.obj.param
    percent = "%%" if postgresql else "%"
    database.execute_sql(
        'INSERT INTO "webhook_event" '  # noqa: S608 - placeholders and constants only
        '("event_id", "endpoint_id", "recipient_id", "status", '
        '"created_at", "detail") '
        f'SELECT {param}, w."id", NULL, {param}, {param}, {param} FROM "webhook_endpoint" w '
        f'WHERE w."account_id" = {param} AND w."disabled_at" IS NULL '
        f"""AND (w."events" = '*' OR w."events" LIKE '{percent},{WARNING},{percent}')""",
        [new_id(), WARNING, at, detail, account_id],
    )


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
