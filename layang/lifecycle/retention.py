"""Retention (docs/deploy.md, "What is kept, and for how long"): what Layang removes as it ages.

Each account keeps its activity records (recipients), their events (engagement included) and its
webhook history ``retention_days``, and a message's stored content (the request, the MIME bytes,
the payload's chunks) ``content_days`` after its last recipient reached a final state; the
record then says its content expired (``Transmission.content_expired_at``). An account without
``store_content`` keeps content 0 days. Mail still queued (``next_attempt_at`` set) is never
removed, whatever its age, and neither is a message with a recipient still queued.

Every kind is removed ``BATCH`` rows per write transaction, so a run never holds the database
for long however much has piled up; the worker runs :func:`apply` every few minutes with a time
budget, ``layang retention run`` until nothing is left.

On PostgreSQL the history tables are partitioned by week (``layang.lifecycle.partitions``): a run
first drops the weeks past the longest retention any account has (the service's or an
account's own), whole, never row by row. What an account keeps for less time still goes row by
row from the partitions that stay; so does a week that still holds queued mail (its other rows
go, the queued ones stay, and the week is dropped once they are final) and whatever sits in a
default partition. For the accounts that keep the longest, rows go row by row only from whole
weeks past the horizon (which a drop normally took first): the week the horizon falls in waits
for its drop, so their records live up to a week longer than ``retention_days``.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, fields

import peewee

from layang.clock import now_ms
from layang.config import MAX_RETENTION_DAYS, Config
from layang.db import write_transaction
from layang.domain.errors import InvalidInput
from layang.ids import id_floor
from layang.lifecycle import partitions
from layang.models import (
    WEBHOOK_PENDING,
    Account,
    Event,
    PayloadChunk,
    Recipient,
    Transmission,
    TransmissionTag,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookEvent,
)
from layang.team import audit

log = logging.getLogger("layang.retention")

DAY_MS = 86_400_000
BATCH = 1000
"""Rows of one kind removed per write transaction."""
WORKER_BUDGET_SECONDS = 2.0
"""How long one of the worker's runs may keep removing before it leaves the rest for the next:
sending waits meanwhile, so a backlog (after a settings change) is worked off over several runs."""


@dataclass(frozen=True, slots=True)
class Policy:
    """What one account keeps: days of records, events and webhook history; days of content
    after the last recipient is final (0 when ``store_content`` is off)."""

    retention_days: int
    content_days: int
    store_content: bool


def policy_of(account: Account, config: Config) -> Policy:
    """The account's own settings where it has them, else the service's
    (``LAYANG_RETENTION_DAYS``, ``LAYANG_CONTENT_RETENTION_DAYS``)."""
    retention = account.retention_days or config.retention_days
    content = (
        config.content_retention_days if account.content_days is None else account.content_days
    )
    store = account.store_content is not False
    return Policy(
        retention_days=retention, content_days=content if store else 0, store_content=store
    )


@dataclass(slots=True)
class Removed:
    """How many of each kind a run removed (or, shown, would remove). ``messages`` are messages
    removed whole (every record of theirs had gone); ``contents`` are messages whose content
    expired while their records stay."""

    records: int = 0
    events: int = 0
    messages: int = 0
    contents: int = 0
    webhook_deliveries: int = 0

    def add(self, other: Removed) -> None:
        for name in (f.name for f in fields(self)):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def as_json(self) -> dict[str, int]:
        """``{"records", "events", "messages", "contents", "webhookDeliveries"}``."""
        return {
            "records": self.records,
            "events": self.events,
            "messages": self.messages,
            "contents": self.contents,
            "webhookDeliveries": self.webhook_deliveries,
        }


class _Budget:
    def __init__(self, seconds: float | None) -> None:
        self.ends = None if seconds is None else time.monotonic() + seconds

    def left(self) -> bool:
        return self.ends is None or time.monotonic() < self.ends


def apply(
    config: Config, now: int | None = None, *, budget_seconds: float | None = None
) -> Removed:
    """Remove, for every account, what its policy no longer keeps at ``now`` (epoch ms; default
    the current time); returns what went. ``budget_seconds`` stops starting new batches after
    that long (the rest goes on the next run); None runs until nothing is left. Safe to run from
    several processes at once: each batch is its own transaction and removes what is still
    there."""
    now = now_ms() if now is None else now
    budget = _Budget(budget_seconds)
    removed = Removed()
    accounts = list(_accounts())
    if budget_seconds is not None:
        # Runs cut short by the budget start each time elsewhere, so that one account's backlog
        # never holds back the others'.
        random.shuffle(accounts)
    policies = [(account, policy_of(account, config)) for account in accounts]
    # Content first, as on SQLite: a message whose content expired before its week was dropped
    # counts under both.
    for account, policy in policies:
        if not budget.left():
            break
        removed.contents += _expire_content(account, policy, now, budget)
    horizon = _drop_horizon(config, accounts, now)
    if horizon is not None:
        dropped = partitions.drop_before(horizon)
        removed.records += dropped.records
        removed.events += dropped.events
        removed.messages += dropped.messages
        removed.webhook_deliveries += dropped.webhook_deliveries
    for account, policy in policies:
        if not budget.left():
            break
        floor = _floor(policy, now, horizon)
        removed.add(_remove_records(account, floor, budget))
        removed.webhook_deliveries += _remove_webhook_history(account, floor, budget)
    if any(removed.as_json().values()):
        log.info("retention removed %s", " ".join(f"{k}={v}" for k, v in removed.as_json().items()))
    return removed


def show(config: Config, now: int | None = None) -> Removed:
    """What :func:`apply` would remove at ``now`` (epoch ms), counted without removing it."""
    now = now_ms() if now is None else now
    shown = Removed()
    accounts = list(_accounts())
    horizon = _drop_horizon(config, accounts, now)
    for account in accounts:
        policy = policy_of(account, config)
        shown.contents += _content_due(account, policy, now).count()
        floor = _floor(policy, now, horizon)
        old = _old_records(account, floor)
        shown.records += old.count()
        shown.events += Event.select().where(Event.recipient.in_(old.select(Recipient.id))).count()
        kept = Recipient.select(Recipient.id).where(
            (Recipient.transmission == Transmission.id)
            & (Recipient.next_attempt_at.is_null(False) | (Recipient.id >= floor))
        )
        shown.messages += (
            Transmission.select()
            .where(
                (Transmission.account == account.id)
                & (Transmission.id < floor)
                & ~peewee.fn.EXISTS(kept)
            )
            .count()
        )
        endpoints = _endpoint_ids(account)
        if endpoints:
            shown.webhook_deliveries += _old_deliveries(endpoints, floor).count()
    return shown


def _drop_horizon(config: Config, accounts: list[Account], now: int) -> int | None:
    """Where whole weeks of history may be dropped (epoch ms): the longest retention of any
    account ago. None where the tables are not partitioned (SQLite)."""
    if not partitions.partitioned():
        return None
    longest = max((policy_of(a, config).retention_days for a in accounts), default=0)
    return now - max(longest, config.retention_days) * DAY_MS


def _floor(policy: Policy, now: int, horizon: int | None) -> str:
    """The id below which the account's records and webhook deliveries go row by row: its own
    retention ago; for the accounts that keep the longest, the start of the week the drop
    horizon falls in (that week and the later ones go only by dropping partitions)."""
    cutoff = now - policy.retention_days * DAY_MS
    if horizon is not None and cutoff <= horizon:
        cutoff = partitions.week_of(horizon)
    return id_floor(cutoff)


def _accounts() -> Iterator[Account]:
    yield from Account.select(
        Account.id, Account.retention_days, Account.content_days, Account.store_content
    ).order_by(Account.id)


def _content_due(account: Account, policy: Policy, now: int) -> peewee.ModelSelect:
    """The account's messages whose content is still kept though every recipient has been
    final since before ``now - content_days``. A message is made before any of its recipients
    is final, so only ids older than the cut-off can qualify: the partial index
    ``transmission_content_kept`` reads just those."""
    cutoff = now - policy.content_days * DAY_MS
    unsettled = Recipient.select(Recipient.id).where(
        (Recipient.transmission == Transmission.id)
        & (Recipient.next_attempt_at.is_null(False) | (Recipient.updated_at > cutoff))
    )
    return Transmission.select(Transmission.id).where(
        (Transmission.account == account.id)
        & Transmission.content_expired_at.is_null()
        & (Transmission.id < id_floor(cutoff + 1))
        & ~peewee.fn.EXISTS(unsettled)
    )


def _expire_content(account: Account, policy: Policy, now: int, budget: _Budget) -> int:
    expired = 0
    after = ""
    while budget.left():
        with write_transaction(durable=False):
            due = _content_due(account, policy, now)
            ids = [
                r.id
                for r in due.where(Transmission.id > after).order_by(Transmission.id).limit(BATCH)
            ]
            if not ids:
                break
            after = ids[-1]
            PayloadChunk.delete().where(PayloadChunk.transmission.in_(ids)).execute()
            expired += (
                Transmission.update(payload=None, raw=None, content_expired_at=now)
                .where(Transmission.id.in_(ids) & Transmission.content_expired_at.is_null())
                .execute()
            )
        if len(ids) < BATCH:
            break
    return expired


def _old_records(account: Account, floor: str) -> peewee.ModelSelect:
    # Record ids are time-ordered, so "made before" is a range of the (account, id) index.
    return Recipient.select(Recipient.id, Recipient.transmission).where(
        (Recipient.account == account.id)
        & (Recipient.id < floor)
        & Recipient.next_attempt_at.is_null()
    )


def _remove_records(account: Account, floor: str, budget: _Budget) -> Removed:
    removed = Removed()
    while budget.left():
        with write_transaction(durable=False):
            rows = list(_old_records(account, floor).order_by(Recipient.id).limit(BATCH))
            if not rows:
                break
            batch = remove_records([r.id for r in rows], {r.transmission_id for r in rows})
        removed.add(batch)
        if len(rows) < BATCH:
            break
    return removed


def remove_records(record_ids: list[str], transmission_ids: set[str]) -> Removed:
    """Delete the records ``record_ids`` with their events, then those of ``transmission_ids``
    left without any record (their content and chunks with them). Call inside a write
    transaction; returns what went (``contents`` stays 0)."""
    removed = Removed()
    removed.events = Event.delete().where(Event.recipient.in_(record_ids)).execute()
    removed.records = Recipient.delete().where(Recipient.id.in_(record_ids)).execute()
    still = {
        r.transmission_id
        for r in Recipient.select(Recipient.transmission)
        .where(Recipient.transmission.in_(list(transmission_ids)))
        .distinct()
    }
    orphans = sorted(transmission_ids - still)
    if orphans:
        # Deleted here, not by a foreign key: on PostgreSQL these tables are partitioned and
        # have none between them (migration 34).
        TransmissionTag.delete().where(TransmissionTag.transmission.in_(orphans)).execute()
        PayloadChunk.delete().where(PayloadChunk.transmission.in_(orphans)).execute()
        removed.messages = Transmission.delete().where(Transmission.id.in_(orphans)).execute()
    return removed


def _endpoint_ids(account: Account) -> list[str]:
    return [
        e.id
        for e in WebhookEndpoint.select(WebhookEndpoint.id).where(
            WebhookEndpoint.account == account.id
        )
    ]


def _old_deliveries(endpoints: list[str], floor: str) -> peewee.ModelSelect:
    # Delivery ids are time-ordered; pending ones stay whatever their age.
    return WebhookDelivery.select(WebhookDelivery.id).where(
        WebhookDelivery.endpoint.in_(endpoints)
        & (WebhookDelivery.id < floor)
        & (WebhookDelivery.status != WEBHOOK_PENDING)
    )


def _remove_webhook_history(account: Account, floor: str, budget: _Budget) -> int:
    endpoints = _endpoint_ids(account)
    if not endpoints:
        return 0
    removed = 0
    while budget.left():
        with write_transaction(durable=False):
            query = _old_deliveries(endpoints, floor).order_by(WebhookDelivery.id).limit(BATCH)
            ids = [row.id for row in query]
            if not ids:
                break
            WebhookAttempt.delete().where(WebhookAttempt.delivery.in_(ids)).execute()
            WebhookEvent.delete().where(WebhookEvent.delivery_id.in_(ids)).execute()
            removed += WebhookDelivery.delete().where(WebhookDelivery.id.in_(ids)).execute()
        if len(ids) < BATCH:
            break
    return removed


@dataclass(frozen=True, slots=True)
class AccountRetention:
    """An account's retention as ``GET /v1/layang/account`` shows it: the days in force (its own
    or the service's), and whether it stores content at all."""

    name: str
    mode: str
    retention_days: int
    content_days: int
    store_content: bool


UNCHANGED = object()


def account_retention(account: Account, config: Config) -> AccountRetention:
    """The retention in force for ``account`` (read afresh from the database)."""
    stored = Account.get_by_id(account.id)
    policy = policy_of(stored, config)
    content = config.content_retention_days if stored.content_days is None else stored.content_days
    return AccountRetention(
        name=stored.name,
        mode=stored.mode,
        retention_days=policy.retention_days,
        content_days=content,
        store_content=policy.store_content,
    )


def change_retention(
    account: Account,
    config: Config,
    *,
    retention_days: int | object | None = UNCHANGED,
    content_days: int | object | None = UNCHANGED,
    store_content: bool | object = UNCHANGED,
    actor: str,
    source: str,
) -> AccountRetention:
    """Set the account's own retention: ``retention_days`` (1 to ``MAX_RETENTION_DAYS``),
    ``content_days`` (0 to ``MAX_RETENTION_DAYS``), ``None`` for the service's setting; leave a
    keyword out to keep it. Recorded in the audit log as ``account.retention_changed``. Raises
    ``InvalidInput`` naming ``retentionDays`` or ``contentDays`` for a number out of range."""
    changes: dict[peewee.Field, object] = {}
    if retention_days is not UNCHANGED:
        if retention_days is not None and not 1 <= retention_days <= MAX_RETENTION_DAYS:
            raise InvalidInput("retentionDays", f"Use 1 to {MAX_RETENTION_DAYS} days, or null.")
        changes[Account.retention_days] = retention_days
    if content_days is not UNCHANGED:
        if content_days is not None and not 0 <= content_days <= MAX_RETENTION_DAYS:
            raise InvalidInput("contentDays", f"Use 0 to {MAX_RETENTION_DAYS} days, or null.")
        changes[Account.content_days] = content_days
    if store_content is not UNCHANGED:
        changes[Account.store_content] = bool(store_content)
    if changes:
        with write_transaction():
            Account.update(changes).where(Account.id == account.id).execute()
            audit.record(
                account.id,
                actor,
                "account.retention_changed",
                f"account:{account.id}",
                source=source,
                detail={field.name: value for field, value in changes.items()},
            )
    return account_retention(account, config)
