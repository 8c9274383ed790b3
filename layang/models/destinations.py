"""What every process shares about where mail goes: the site each recipient domain resolves
to, each site's state and open sessions, MTA-STS policies, and TLS-RPT's session results
and reports."""

from __future__ import annotations

import peewee

from layang.clock import now_ms
from layang.ids import new_id
from layang.models.base import BaseModel


class MxDomain(BaseModel):
    """The site a recipient domain resolved to, kept until its DNS answer expires, so that
    waiting mail can be grouped by site."""

    domain = peewee.CharField(primary_key=True, max_length=253)
    site = peewee.TextField(index=True)
    expires_at = peewee.BigIntegerField()


OK = "ok"
THROTTLED = "throttled"
SUSPENDED = "suspended"
SITE_STATES = (OK, THROTTLED, SUSPENDED)


class SiteState(BaseModel):
    """What every sender process agrees about one destination site: its connection limit
    while throttled (None: the rule's), whether new sessions wait until ``until_ms`` and why,
    the current pause (``pause_ms``, doubling while the site keeps refusing), the consecutive
    connection failures, and the rate limiter's theoretical arrival time (GCRA, microseconds)."""

    site = peewee.CharField(primary_key=True, max_length=1000)
    connection_limit = peewee.IntegerField(null=True)
    rule_limit = peewee.IntegerField(null=True)
    state = peewee.CharField(max_length=16, default=OK)
    until_ms = peewee.BigIntegerField(null=True)
    reason = peewee.TextField(null=True)
    last_reply = peewee.TextField(null=True)
    pause_ms = peewee.BigIntegerField(default=0)
    signal_at = peewee.BigIntegerField(null=True)
    failures = peewee.IntegerField(default=0)
    rate_tat_us = peewee.BigIntegerField(null=True)
    updated_at = peewee.BigIntegerField(default=now_ms)
    wanted_at = peewee.BigIntegerField(null=True)  # a process was last refused a slot
    wanted_by = peewee.CharField(max_length=64, null=True)  # which one

    def shown(self, now: int) -> tuple[str, int | None]:
        """The state as people are told it, and until when: a pause that has run out shows
        as ``throttled`` (no end) while the limit is still below the rule's, else ``ok``; a
        suspension without an end lasts until resumed."""
        if self.state == SUSPENDED and (self.until_ms is None or self.until_ms > now):
            return SUSPENDED, self.until_ms
        if self.state == THROTTLED and self.until_ms is not None and self.until_ms > now:
            return THROTTLED, self.until_ms
        if self.connection_limit is not None:
            return THROTTLED, None
        return OK, None

    @classmethod
    def holding_back(cls) -> peewee.ModelSelect:
        """The rows that may show a state other than ``ok`` (a few, however many sites)."""
        return cls.select().where((cls.state != OK) | cls.connection_limit.is_null(False))

    def limit(self) -> int | None:
        """The sessions allowed now: the throttled limit, else the rule's (None: unknown)."""
        if self.connection_limit is not None:
            return self.connection_limit
        return self.rule_limit


class SiteSlot(BaseModel):
    """One open (or opening) session to a site, held by ``owner`` (a worker) until
    ``expires_at`` unless renewed: a dead worker's sessions stop counting."""

    id = peewee.CharField(primary_key=True, max_length=26, default=new_id)
    site = peewee.CharField(max_length=1000)
    owner = peewee.CharField(max_length=64, index=True)
    expires_at = peewee.BigIntegerField()

    class Meta:
        indexes = ((("site", "expires_at"), False),)


class MtaStsPolicy(BaseModel):
    """A recipient domain's MTA-STS policy, cached for every worker until ``expires_at``
    (see ``layang.destinations.mta_sts``)."""

    domain = peewee.CharField(primary_key=True, max_length=255)
    policy_id = peewee.CharField(max_length=32)
    mode = peewee.CharField(max_length=16)
    mx = peewee.TextField()
    max_age = peewee.IntegerField()
    text = peewee.TextField()
    fetched_at = peewee.BigIntegerField()
    expires_at = peewee.BigIntegerField()


class TlsSessionResult(BaseModel):
    """How many sessions of one UTC ``day`` to one MX host under one policy ended one way
    (``result_type`` empty: success), for TLS-RPT. ``row_key`` identifies the combination."""

    id = peewee.AutoField()
    row_key = peewee.CharField(max_length=64, unique=True)
    day = peewee.CharField(max_length=10)
    policy_domain = peewee.CharField(max_length=255)
    policy_type = peewee.CharField(max_length=16)
    policy_strings = peewee.TextField()
    mx_host = peewee.CharField(max_length=255)
    result_type = peewee.CharField(max_length=40)
    detail = peewee.TextField()
    sessions = peewee.IntegerField()
    updated_at = peewee.BigIntegerField()

    class Meta:
        indexes = ((("day", "policy_domain"), False),)


class TlsReport(BaseModel):
    """One TLS-RPT report of a ``day`` for a policy domain: claimed by the first worker to
    send it (``status`` ``sending``, then ``sent`` or ``failed``)."""

    id = peewee.AutoField()
    day = peewee.CharField(max_length=10)
    policy_domain = peewee.CharField(max_length=255)
    status = peewee.CharField(max_length=16)
    report_id = peewee.CharField(max_length=200)
    rua = peewee.TextField()
    detail = peewee.TextField()
    created_at = peewee.BigIntegerField()

    class Meta:
        indexes = ((("day", "policy_domain"), True),)
