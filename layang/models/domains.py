"""An account's own domains: sending domains with their DKIM keys, and tracking domains."""

from __future__ import annotations

import peewee

from layang.clock import now_ms
from layang.models.accounts import VERIFIED, Account
from layang.models.base import BaseModel

PENDING = "pending"
ACTIVE = "active"
RETIRED = "retired"


class SendingDomain(BaseModel):
    """A domain an account sends from. Accounts may claim a domain at once while it is
    pending; once verified it belongs to that account alone (one verified row per ``domain``).
    ``status`` turns ``verified`` once one of its DKIM records is found in DNS. ``records``
    keeps the last DNS check, as JSON, so a listing needs no look-ups."""

    account = peewee.ForeignKeyField(Account, backref="sending_domains", on_delete="CASCADE")
    domain = peewee.CharField(max_length=253)
    return_path_domain = peewee.CharField(max_length=253)
    status = peewee.CharField(max_length=16, default=PENDING)
    records = peewee.TextField(default="[]")
    created_at = peewee.BigIntegerField(default=now_ms)
    checked_at = peewee.BigIntegerField(null=True)
    verified_at = peewee.BigIntegerField(null=True)

    class Meta:
        indexes = ((("account", "domain"), True),)


SendingDomain.add_index(
    SendingDomain.index(
        SendingDomain.domain,
        unique=True,
        where=SendingDomain.status == VERIFIED,
        name="sending_domain_verified_domain",
    )
)


class DkimKey(BaseModel):
    """One DKIM key pair of a sending domain. Only the key that is ``active`` signs; a
    ``pending`` one takes over once its record is found, and the one it replaces is
    ``retired`` (kept, with its record, until deleted). ``private_key`` is encrypted."""

    sending_domain = peewee.ForeignKeyField(SendingDomain, backref="keys", on_delete="CASCADE")
    selector = peewee.CharField(max_length=63)
    algorithm = peewee.CharField(max_length=16)
    bits = peewee.IntegerField()
    status = peewee.CharField(max_length=16, default=PENDING)
    public_key = peewee.TextField()
    private_key = peewee.BlobField()
    created_at = peewee.BigIntegerField(default=now_ms)
    activated_at = peewee.BigIntegerField(null=True)

    class Meta:
        indexes = ((("sending_domain", "selector"), True),)


class TrackingDomain(BaseModel):
    """An account's own domain for its tracked links and pixel (CONTRACT section 23):
    ``pending`` until its CNAME to the service is found, then ``verified``. ``found`` is what
    the last check saw."""

    account = peewee.ForeignKeyField(Account, on_delete="CASCADE", index=False)
    domain = peewee.CharField(max_length=253)
    status = peewee.CharField(max_length=16)
    created_at = peewee.BigIntegerField(default=now_ms)
    checked_at = peewee.BigIntegerField(null=True)
    found = peewee.TextField(null=True)

    class Meta:
        indexes = (
            (("account", "domain"), True),
            (("domain", "status"), False),
        )
