"""Tracking (link) domains (CONTRACT section 23): an account's own name for its tracked links
and open pixel, ``links.shop.example``, published as a CNAME to the service's public host.

Once the CNAME is found the domain is ``verified``: the account's tracking URLs use
``https://<domain>/…`` and the operator's TLS proxy may get a certificate for it (it asks
``/internal/tls-allowed``, see docs/deploy.md). A domain verified by one account cannot be
verified by another.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import peewee

from layang.clock import now_ms
from layang.config import Config
from layang.db import write_transaction
from layang.domain.dns_lookup import DnsLookup
from layang.domain.errors import Conflict, InvalidInput, NotFound
from layang.domain.sending_domains import normalize_domain
from layang.models import Account, TrackingDomain

PENDING = "pending"
VERIFIED = "verified"
MAX_TRACKING_DOMAINS = 20
"""Tracking domains one account may add."""


@dataclass(frozen=True, slots=True)
class CnameRecord:
    """The record to publish: ``name`` CNAME ``value``."""

    name: str
    value: str
    type: str = "CNAME"
    purpose: str = "tracking"


@dataclass(frozen=True, slots=True)
class TrackingDomainState:
    """A tracking domain as its account sees it: its status, the record to publish, what the
    last check found (None before any) and when (epoch ms)."""

    domain: str
    status: str
    records: tuple[CnameRecord, ...]
    found: str | None
    checked_at: int | None
    created_at: int


def cname_target(config: Config) -> str:
    """The host a tracking domain is a CNAME of: the host of ``LAYANG_PUBLIC_URL``."""
    return (urlsplit(config.public_url).hostname or "").lower()


def _state(row: TrackingDomain, config: Config) -> TrackingDomainState:
    return TrackingDomainState(
        row.domain,
        row.status,
        (CnameRecord(row.domain, cname_target(config)),),
        row.found,
        row.checked_at,
        row.created_at,
    )


def _get(account: Account, domain: str) -> TrackingDomain:
    row = TrackingDomain.get_or_none(
        (TrackingDomain.account == account.id)
        & (TrackingDomain.domain == domain.strip().rstrip(".").lower())
    )
    if row is None:
        raise NotFound(f"No tracking domain {domain!r} in this account.")
    return row


def create_tracking_domain(account: Account, domain: str, config: Config) -> TrackingDomainState:
    """Add ``domain``, ``pending`` until verified. Raises ``InvalidInput`` (field ``domain``)
    for a name that is no domain or is the service's own host, ``Conflict`` when the account
    has it already or has :data:`MAX_TRACKING_DOMAINS`."""
    name = normalize_domain(domain)
    if name == cname_target(config):
        raise InvalidInput("domain", "This is the service's own host; give your own domain.")
    with write_transaction():
        count = TrackingDomain.select().where(TrackingDomain.account == account.id).count()
        if count >= MAX_TRACKING_DOMAINS:
            raise Conflict(f"domain: at most {MAX_TRACKING_DOMAINS} tracking domains.")
        try:
            row = TrackingDomain.create(account=account.id, domain=name, status=PENDING)
        except peewee.IntegrityError:
            raise Conflict(f"domain: {name} is added already.") from None
    return _state(row, config)


def list_tracking_domains(account: Account, config: Config) -> list[TrackingDomainState]:
    """The account's tracking domains, by name."""
    rows = TrackingDomain.select().where(TrackingDomain.account == account.id)
    return [_state(row, config) for row in rows.order_by(TrackingDomain.domain)]


def get_tracking_domain(account: Account, domain: str, config: Config) -> TrackingDomainState:
    """One of the account's tracking domains. Raises ``NotFound``."""
    return _state(_get(account, domain), config)


def delete_tracking_domain(account: Account, domain: str) -> None:
    """Remove one of the account's tracking domains: its links go back to the service's host
    (links already sent keep working while the CNAME stays). Raises ``NotFound``."""
    _get(account, domain).delete_instance()


def verify_tracking_domain(
    account: Account,
    domain: str,
    config: Config,
    lookup: Callable[[Config], DnsLookup] = DnsLookup,
) -> TrackingDomainState:
    """Look the domain's CNAME up now: ``verified`` when it names the service's host (and
    stays so), else it stays as it was with what DNS answered in ``found``. Raises
    ``NotFound``, and ``Conflict`` when another account verified the domain first."""
    row = _get(account, domain)
    target = cname_target(config)
    answer = lookup(config).cname(row.domain)
    found = ", ".join(answer.values) if answer.values else answer.problem
    matches = target in answer.values
    with write_transaction():
        if matches:
            taken = TrackingDomain.select().where(
                (TrackingDomain.domain == row.domain)
                & (TrackingDomain.status == VERIFIED)
                & (TrackingDomain.account != account.id)
            )
            if taken.exists():
                raise Conflict(f"domain: {row.domain} belongs to another account.")
        status = VERIFIED if matches or row.status == VERIFIED else PENDING
        TrackingDomain.update(status=status, found=found, checked_at=now_ms()).where(
            TrackingDomain.id == row.id
        ).execute()
    return _state(TrackingDomain.get_by_id(row.id), config)


def tls_allowed(domain: str) -> bool:
    """Whether a certificate may be obtained for ``domain``: it is some account's verified
    tracking domain."""
    name = domain.strip().rstrip(".").lower()
    return (
        TrackingDomain.select()
        .where((TrackingDomain.domain == name) & (TrackingDomain.status == VERIFIED))
        .exists()
    )
