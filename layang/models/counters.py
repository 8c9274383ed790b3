"""Figures kept per account as mail is recorded: the overview's activity counts (per hour,
and per tag) and the circuit breaker's counters and levels."""

from __future__ import annotations

import peewee

from layang.clock import now_ms
from layang.models.accounts import Account
from layang.models.base import BaseModel
from layang.models.mail import TRANSACTIONAL


class ActivityCount(BaseModel):
    """How many events of one ``kind`` an account's mail of one ``stream`` from one sending
    ``domain`` had in one ``hour`` (epoch ms at its start): the overview's figures. Written only
    by the database's triggers as recipients and events are stored (docs/schema.sql),
    never by the code; ``kind`` is an event status, with a Bounce's class after a colon
    (``Bounce:hard``)."""

    id = peewee.AutoField()
    account = peewee.ForeignKeyField(Account, on_delete="CASCADE", index=False)
    hour = peewee.BigIntegerField()
    domain = peewee.CharField(max_length=253)
    kind = peewee.CharField(max_length=32)
    count = peewee.BigIntegerField()
    stream = peewee.CharField(
        max_length=16, default=TRANSACTIONAL, constraints=[peewee.SQL("DEFAULT 'transactional'")]
    )

    class Meta:
        indexes = ((("account", "hour", "domain", "stream", "kind"), True),)


class ActivityTagCount(BaseModel):
    """As :class:`ActivityCount`, per tag of the mail (one recipient with two tags counts
    under each): the overview's figures per tag, written only by the database's triggers."""

    id = peewee.AutoField()
    account = peewee.ForeignKeyField(Account, on_delete="CASCADE", index=False)
    hour = peewee.BigIntegerField()
    tag = peewee.CharField(max_length=64)
    kind = peewee.CharField(max_length=32)
    count = peewee.BigIntegerField()

    class Meta:
        indexes = ((("account", "hour", "tag", "kind"), True),)


class BreakerCount(BaseModel):
    """The circuit breaker's counters (docs/api.md, "Streams and the circuit breaker"): messages
    that reached a final answer, hard bounces and complaints of one account, in one ``bucket`` of
    ``BUCKET_MS``. ``domain`` is the From domain, or '' for the account as a whole. Written with the
    events they count (``layang.mail.events``), so every process sees the same rates."""

    account = peewee.ForeignKeyField(Account, on_delete="CASCADE", index=False)
    domain = peewee.CharField(max_length=253)
    bucket = peewee.BigIntegerField()
    sent = peewee.IntegerField(default=0)
    hard_bounces = peewee.IntegerField(default=0)
    complaints = peewee.IntegerField(default=0)

    class Meta:
        indexes = ((("account", "domain", "bucket"), True),)


class BreakerState(BaseModel):
    """Where the breaker of an account (``domain`` '') or of one of its From domains stands:
    ``level`` 0 clear, 1 warned, 2 broadcast paused. It only rises until
    ``layang accounts resume``; ``reason`` names the rate that raised it."""

    account = peewee.ForeignKeyField(Account, on_delete="CASCADE", index=False)
    domain = peewee.CharField(max_length=253)
    level = peewee.IntegerField(default=0)
    reason = peewee.TextField(default="")
    changed_at = peewee.BigIntegerField(default=now_ms)

    class Meta:
        indexes = ((("account", "domain"), True),)
