"""The circuit breaker's levels: an account's or From domain's rates over 24 h judged, and a
level that rose recorded with its ``Warning`` event for webhooks, in one transaction.

In the mail layer so that whoever records the events that move the rates (the delivery
engine, the inbound report reader) can judge at once: an account whose hard-bounce rate
crosses a threshold and then stops sending still hears of it. ``layang.domain.breaker``
stops paused sending and lifts levels.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from peewee import fn

from layang.clock import iso_ms, now_ms
from layang.config import Config
from layang.db import database, is_postgresql, write_transaction
from layang.ids import new_id
from layang.mail.reputation import ACCOUNT_WIDE, WINDOW_MS, bucket_of
from layang.models import (
    BOUNCE,
    COMPLAINT,
    DELIVERY,
    WARNING,
    BreakerCount,
    BreakerState,
    Recipient,
    Transmission,
)

log = logging.getLogger("layang.breaker")

CLEAR, WARNED, PAUSED = 0, 1, 2
LEVEL_NAMES = {CLEAR: "clear", WARNED: "warning", PAUSED: "paused"}


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
        """``clear``, ``warning`` or ``paused``: what the console's banner shows."""
        return LEVEL_NAMES[self.level]


def _percent(rate: float) -> str:
    return f"{rate * 100:.2f}".rstrip("0").rstrip(".") + " %"


def judge(rates: Rates, config: Config, ceiling: int = PAUSED) -> tuple[int, str]:
    """The level ``rates`` call for, at most ``ceiling``, and, above clear, the sentence naming
    the rate."""
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
        level = min(ceiling, PAUSED if rate >= pause else WARNED if rate >= warn else CLEAR)
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


def standing(account_id: int, domain: str, config: Config, ceiling: int = PAUSED) -> Standing:
    """Judge one breaker now, recording (and announcing) a level that rose, to at most
    ``ceiling``."""
    rates = rates_of(account_id, domain)
    level, reason = judge(rates, config, ceiling)
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


# Recording judges at once when a bounce or complaint is recorded (what raises a rate); after
# deliveries alone (which only lower it, or bring the volume to the minimum) at most this
# often per account and domain in one process.
_DELIVERY_JUDGING_SECONDS = 1.0
_judged: dict[tuple[int, str], float] = {}
_judged_lock = threading.Lock()


def judge_recorded(
    recorded: Iterable[tuple[str, str]],
    config: Config,
    senders: Mapping[str, tuple[int, str]] | None = None,
) -> list[Standing]:
    """Judge the breakers of the accounts and From domains of ``recorded`` (recipient id,
    event status) pairs just stored (their transaction committed), recording and announcing
    every level that rose; returns those raised. ``senders`` gives, by recipient id, the
    (account id, From domain) the caller knows already; the others are looked up.

    Call it after every batch of ``Delivery``, ``Bounce`` or ``Complaint`` events is stored:
    the ``Warning`` goes out with the event that crossed the threshold, not with a later send.
    It raises a breaker to a warning at most; pausing is decided when mail is sent.
    Costs nothing when every sender is known and judged within the last second after
    deliveries alone; at most one query for the unknown senders and three per account and
    domain judged. Never raises: the events are stored already, and a breaker left unjudged is
    judged by the next recording or send.
    """
    try:
        return _judge_recorded(recorded, config, senders or {})
    except Exception:
        log.exception("could not judge the circuit breaker after recording")
        return []


def _judge_recorded(
    recorded: Iterable[tuple[str, str]], config: Config, senders: Mapping[str, tuple[int, str]]
) -> list[Standing]:
    keys: dict[tuple[int, str], bool] = {}

    def count(account_id: int, from_domain: str, urgent: bool) -> None:
        for key in ((account_id, ACCOUNT_WIDE), (account_id, from_domain or ACCOUNT_WIDE)):
            keys[key] = keys.get(key, False) or urgent

    unknown: dict[str, bool] = {}
    for recipient_id, status in recorded:
        if status not in (BOUNCE, COMPLAINT, DELIVERY):
            continue
        urgent = status != DELIVERY
        sender = senders.get(recipient_id)
        if sender is None:
            unknown[recipient_id] = unknown.get(recipient_id, False) or urgent
        else:
            count(*sender, urgent)
    if unknown:
        rows = (
            Recipient.select(Recipient.id, Transmission.account, Transmission.from_domain)
            .join(Transmission)
            .where(Recipient.id.in_(list(unknown)))
            .tuples()
        )
        for recipient_id, account_id, from_domain in rows:
            count(account_id, from_domain, unknown[recipient_id])
    now = time.monotonic()
    raised = []
    for key, urgent in keys.items():
        with _judged_lock:
            if not urgent and _judged.get(key, 0.0) > now:
                continue
            _judged[key] = now + _DELIVERY_JUDGING_SECONDS
        before = BreakerState.get_or_none(
            (BreakerState.account == key[0]) & (BreakerState.domain == key[1])
        )
        # Only up to a warning here: the rates a batch sees depend on which outcomes were
        # recorded first (another domain's clean deliveries may be a batch behind), and a pause
        # stays until an operator lifts it; the next send is judged on everything and pauses.
        found = standing(key[0], key[1], config, ceiling=WARNED)
        if found.level > (before.level if before is not None else CLEAR):
            raised.append(found)
    return raised
