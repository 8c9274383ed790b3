"""DMARC aggregate reports (RFC 7489) received for the domains sending here, and their rows."""

from __future__ import annotations

import peewee

from layang.clock import now_ms
from layang.models.accounts import Account
from layang.models.base import BaseModel


class DmarcReport(BaseModel):
    """One DMARC aggregate report (RFC 7489) received for a domain: who sent it, which
    period it covers. Unique per reporter and report id, so a report sent twice counts once."""

    domain = peewee.CharField(max_length=253, index=True)
    org_name = peewee.TextField()
    report_id = peewee.CharField(max_length=255)
    begins_at = peewee.BigIntegerField()
    ends_at = peewee.BigIntegerField()
    received_at = peewee.BigIntegerField(default=now_ms)
    # The account that had ``domain`` verified when the report came: only it sees the figures.
    account = peewee.ForeignKeyField(Account, null=True, on_delete="CASCADE")

    class Meta:
        indexes = ((("org_name", "report_id"), True),)


class DmarcRecord(BaseModel):
    """One row of a DMARC report: ``count`` messages from ``source_ip`` with their results.
    ``dkim_domains`` are the DKIM signing domains that passed, between commas."""

    report = peewee.ForeignKeyField(DmarcReport, on_delete="CASCADE")
    domain = peewee.CharField(max_length=253)
    begins_at = peewee.BigIntegerField()
    source_ip = peewee.CharField(max_length=45)
    count = peewee.IntegerField()
    disposition = peewee.CharField(max_length=16)
    dkim = peewee.CharField(max_length=16)
    spf = peewee.CharField(max_length=16)
    dkim_aligned = peewee.IntegerField()
    spf_aligned = peewee.IntegerField()
    header_from = peewee.CharField(max_length=253)
    dkim_domains = peewee.TextField(default="")

    class Meta:
        indexes = ((("domain", "begins_at"), False),)
