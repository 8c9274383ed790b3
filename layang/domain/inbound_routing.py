"""Inbound routing: the domains an account receives mail for, and where each address's mail goes.

An inbound domain is ``pending`` until its MX record names this service's inbound host
(``LAYANG_INBOUND_HOSTNAME``), checked in DNS as sending domains are; the first account to
verify a domain owns it. A ``.localhost`` name (RFC 6761: never in DNS, only this machine)
verifies without a look-up, for development. A route matches ``local@domain`` exactly or
``*@domain`` (any local part); the exact match wins. A ``+hash`` after the local part is
matched without it and given to the endpoint as ``mailboxHash``. Actions: ``webhook`` posts
the message as JSON (through a webhook endpoint of the route's own, whose ``whsec_`` secret is
shown once, when the route is made or its secret rotated), ``hold`` keeps it for the console
and the API, ``reject`` refuses it at RCPT with ``550``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass

import peewee

from layang.clock import now_ms
from layang.config import Config
from layang.db import write_transaction
from layang.domain.dns_lookup import DnsLookup
from layang.domain.errors import Conflict, InvalidInput, NotFound
from layang.domain.sending_domains import DnsRecord, check_records, normalize_domain
from layang.domain.webhooks import replace_secret, sealed_secret
from layang.ids import new_id
from layang.models import (
    INBOUND_ACTIONS,
    INBOUND_WEBHOOK,
    PENDING,
    VERIFIED,
    Account,
    InboundDomain,
    InboundRoute,
    SendingDomain,
    WebhookDelivery,
    WebhookEndpoint,
)
from layang.pagination import Page, keyset_page
from layang.webhooks.wire import new_secret, url_problem

INBOUND_KIND = "inbound"
# Never matches an activity event's type: a route's endpoint receives only its route's mail.
INBOUND_EVENTS = ",layang.inbound,"
WILDCARD = "*"
MX_PREFERENCE = 10
MAX_LOCAL_PART = 64


@dataclass(frozen=True, slots=True)
class InboundDomainState:
    """An inbound domain as its account sees it: the MX record to publish, as last checked."""

    domain: str
    status: str
    records: tuple[DnsRecord, ...]
    created_at: int
    checked_at: int | None
    verified_at: int | None


@dataclass(frozen=True, slots=True)
class Route:
    """A route as shown; ``secret`` only right after it was made or its secret rotated."""

    id: str
    match: str
    action: str
    url: str | None
    spam_threshold: float | None
    created_at: int
    secret: str | None = None


@dataclass(frozen=True, slots=True)
class RouteTarget:
    """What mail to one address does: the route, and the ``+hash`` it carried ("" if none)."""

    route_id: str
    account_id: int
    match: str
    action: str
    endpoint_id: str | None
    spam_threshold: float | None
    mailbox_hash: str
    address: str


def inbound_hostname(config: Config) -> str:
    """The host the MX records of inbound domains name."""
    from layang.domain.sending_domains import inbound_host

    return (config.inbound_hostname or inbound_host(config)).rstrip(".").lower()


def _expected(domain: str, config: Config) -> list[DnsRecord]:
    value = f"{MX_PREFERENCE} {inbound_hostname(config)}"
    return [DnsRecord("mx", "MX", domain, value)]


def _state(row: InboundDomain, config: Config) -> InboundDomainState:
    stored = {
        tuple(r[k] for k in ("purpose", "type", "name", "value")): r
        for r in json.loads(row.records)
    }
    records = []
    for record in _expected(row.domain, config):
        seen = stored.get(record.key)
        records.append(
            DnsRecord(*record.key, status=seen["status"], found=seen["found"]) if seen else record
        )
    return InboundDomainState(
        domain=row.domain,
        status=row.status,
        records=tuple(records),
        created_at=row.created_at,
        checked_at=row.checked_at,
        verified_at=row.verified_at,
    )


def _owner(name: str, account: Account) -> InboundDomain | None:
    return InboundDomain.get_or_none(
        (InboundDomain.domain == name)
        & (InboundDomain.status == VERIFIED)
        & (InboundDomain.account != account.id)
    )


def _get_domain(account: Account, domain: str) -> InboundDomain:
    try:
        name = normalize_domain(domain)
    except InvalidInput:
        name = domain
    row = InboundDomain.get_or_none(
        (InboundDomain.domain == name) & (InboundDomain.account == account.id)
    )
    if row is None:
        raise NotFound(f"No inbound domain {domain!r}.")
    return row


def create_domain(account: Account, domain: str, config: Config) -> InboundDomainState:
    """Add ``domain`` (``pending``) to ``account``; its state lists the MX record to publish.
    ``InvalidInput`` for a bad name; ``Conflict`` when already added, verified by another
    account, or the service's bounce domain or another account's return-path domain."""
    name = normalize_domain(domain)
    if name == config.bounce_domain:
        raise Conflict(f"domain: {name} is this service's bounce domain.")
    try:
        with write_transaction():
            if _owner(name, account) is not None:
                raise Conflict(f"domain: {name} belongs to another account.")
            # A return-path domain's MX names the inbound host too: it is not another
            # account's to receive (its bounces would go astray).
            if SendingDomain.get_or_none(
                (SendingDomain.return_path_domain == name) & (SendingDomain.account != account.id)
            ):
                raise Conflict(f"domain: {name} is another account's return-path domain.")
            row = InboundDomain.create(account=account.id, domain=name, status=PENDING)
    except peewee.IntegrityError:
        raise Conflict(f"domain: {name} is already added.") from None
    return _state(row, config)


def list_domains(
    account: Account, config: Config, *, limit: int = 50, cursor: str | None = None
) -> Page[InboundDomainState]:
    """One page of the account's inbound domains, newest first."""
    query = InboundDomain.select().where(InboundDomain.account == account.id)
    page = keyset_page(query, InboundDomain.id, limit=limit, cursor=cursor)
    return page.map(lambda row: _state(row, config))


def get_domain(account: Account, domain: str, config: Config) -> InboundDomainState:
    """The domain as of its last check. ``NotFound`` unless ``account`` has it."""
    return _state(_get_domain(account, domain), config)


def verify_domain(
    account: Account,
    domain: str,
    config: Config,
    lookup: Callable[[Config], DnsLookup] = DnsLookup,
) -> InboundDomainState:
    """Look the MX record up now and record it; ``verified`` once it names the inbound host
    (and stays so). ``NotFound``; ``Conflict`` when another account verified it first."""
    row = _get_domain(account, domain)
    if row.status != VERIFIED and _owner(row.domain, account) is not None:
        raise Conflict(f"domain: {row.domain} was verified by another account first.")
    if row.domain == "localhost" or row.domain.endswith(".localhost"):
        # RFC 6761: such a name is this machine's only, never in DNS; it serves development.
        records = [
            DnsRecord(*r.key, status="ok", found="a .localhost name: this machine only")
            for r in _expected(row.domain, config)
        ]
    else:
        records = check_records(_expected(row.domain, config), lookup(config), config)
    now = now_ms()
    try:
        with write_transaction():
            row = _get_domain(account, domain)
            if row.status != VERIFIED and all(r.status == "ok" for r in records):
                row.status, row.verified_at = VERIFIED, now
            row.records = json.dumps([asdict(r) for r in records])
            row.checked_at = now
            row.save()
    except peewee.IntegrityError:
        raise Conflict(f"domain: {row.domain} belongs to another account.") from None
    return _state(row, config)


def delete_domain(account: Account, domain: str) -> None:
    """Delete the domain and its routes (mail already received stays). ``NotFound``."""
    with write_transaction():
        row = _get_domain(account, domain)
        endpoints = [r.endpoint_id for r in row.routes if r.endpoint_id]
        InboundRoute.delete().where(InboundRoute.domain == row.id).execute()
        _delete_endpoints(endpoints)
        row.delete_instance()


def _delete_endpoints(endpoint_ids: list[str]) -> None:
    if not endpoint_ids:
        return
    # Mail not posted yet is kept (retry from the API); its pending deliveries go.
    WebhookEndpoint.delete().where(WebhookEndpoint.id.in_(endpoint_ids)).execute()


# -- routes -----------------------------------------------------------------------------------


def _parse_match(value: str) -> tuple[str, str]:
    """(local part or ``*``, domain) of a route's ``match``. Raises ``InvalidInput``."""
    local, at, domain = value.strip().rpartition("@")
    if not at or not local:
        raise InvalidInput("match", "Give an address (support@in.example.com) or *@domain.")
    local = local.lower()
    if local != WILDCARD and (
        len(local) > MAX_LOCAL_PART or any(c in local for c in '+ \t"<>@,;:\\()[]')
    ):
        raise InvalidInput(
            "match", "The local part may not hold '+', spaces or quotes; use * for any."
        )
    return local, normalize_domain(domain, "match")


def _shown(row: InboundRoute, domain: str, url: str | None, secret: str | None = None) -> Route:
    return Route(
        id=row.id,
        match=f"{row.local_part}@{domain}",
        action=row.action,
        url=url,
        spam_threshold=row.spam_threshold,
        created_at=row.created_at,
        secret=secret,
    )


def _route_query(account: Account) -> peewee.ModelSelect:
    return (
        InboundRoute.select(InboundRoute, InboundDomain, WebhookEndpoint)
        .join(InboundDomain)
        .switch(InboundRoute)
        .join(WebhookEndpoint, peewee.JOIN.LEFT_OUTER)
        .where(InboundRoute.account == account.id)
    )


def _row_shown(row: InboundRoute, secret: str | None = None) -> Route:
    url = row.endpoint.url if row.endpoint_id else None
    return _shown(row, row.domain.domain, url, secret)


def _get_route(account: Account, route_id: str) -> InboundRoute:
    row = _route_query(account).where(InboundRoute.id == route_id).first()
    if row is None:
        raise NotFound(f"No inbound route {route_id!r}.")
    return row


def _checked_url(action: str, url: str | None, config: Config) -> str | None:
    if action != INBOUND_WEBHOOK:
        if url:
            raise InvalidInput("url", f"A {action} route posts nowhere; leave url out.")
        return None
    if not url:
        raise InvalidInput("url", "A webhook route needs the https:// URL to post to.")
    url = url.strip()
    problem = url_problem(url, config.webhook_allow_private)
    if problem:
        raise InvalidInput("url", problem)
    return url


def _checked_threshold(value: float | None) -> float | None:
    if value is not None and not 0 <= value <= 100:
        raise InvalidInput("spamThreshold", "Give a SpamAssassin score from 0 to 100.")
    return value


def create_route(
    account: Account,
    match: str,
    action: str,
    url: str | None,
    spam_threshold: float | None,
    config: Config,
) -> Route:
    """A new route on one of the account's inbound domains; a ``webhook`` route comes with
    its signing secret (shown this once). ``InvalidInput`` (a bad match, an unknown action, a
    URL missing, refused or given to a route that posts nowhere, a threshold out of 0 to 100);
    ``NotFound`` when the domain is not the account's; ``Conflict`` when the match is taken."""
    local, domain = _parse_match(match)
    if action not in INBOUND_ACTIONS:
        raise InvalidInput("action", f"Use one of {', '.join(INBOUND_ACTIONS)}.")
    url = _checked_url(action, url, config)
    spam_threshold = _checked_threshold(spam_threshold)
    secret = new_secret() if url else None
    try:
        with write_transaction():
            domain_row = InboundDomain.get_or_none(
                (InboundDomain.domain == domain) & (InboundDomain.account == account.id)
            )
            if domain_row is None:
                raise InvalidInput("match", f"Add {domain} as an inbound domain first.")
            endpoint_id = None
            if url and secret:
                endpoint_id = new_id()
                WebhookEndpoint.create(
                    id=endpoint_id,
                    account=account.id,
                    url=url,
                    description=f"inbound route {local}@{domain}",
                    events=INBOUND_EVENTS,
                    secret=sealed_secret(secret, endpoint_id, config),
                    kind=INBOUND_KIND,
                )
            row = InboundRoute.create(
                account=account.id,
                domain=domain_row.id,
                local_part=local,
                action=action,
                endpoint=endpoint_id,
                spam_threshold=spam_threshold,
            )
    except peewee.IntegrityError:
        raise Conflict(f"match: a route for {local}@{domain} exists already.") from None
    return _shown(row, domain, url, secret)


def list_routes(account: Account, *, limit: int = 50, cursor: str | None = None) -> Page[Route]:
    """One page of the account's routes, newest first."""
    page = keyset_page(_route_query(account), InboundRoute.id, limit=limit, cursor=cursor)
    return page.map(_row_shown)


def get_route(account: Account, route_id: str) -> Route:
    """The route (without its secret). ``NotFound`` unless ``account`` has it."""
    return _row_shown(_get_route(account, route_id))


def update_route(
    account: Account,
    route_id: str,
    config: Config,
    *,
    url: str | None = None,
    spam_threshold: float | None = None,
) -> Route:
    """Change a route's URL (webhook routes only) or spam threshold. ``NotFound``,
    ``InvalidInput``."""
    row = _get_route(account, route_id)
    if url is not None:
        url = _checked_url(row.action, url, config)
    spam_threshold = _checked_threshold(spam_threshold)
    with write_transaction():
        if url is not None and row.endpoint_id:
            WebhookEndpoint.update(url=url, updated_at=now_ms()).where(
                WebhookEndpoint.id == row.endpoint_id
            ).execute()
        if spam_threshold is not None:
            InboundRoute.update(spam_threshold=spam_threshold).where(
                InboundRoute.id == row.id
            ).execute()
    return get_route(account, route_id)


def rotate_route_secret(account: Account, route_id: str, config: Config) -> Route:
    """A new signing secret (returned this once); the old one signs beside it for 24 hours.
    ``NotFound``; ``InvalidInput`` for a route that posts nowhere."""
    row = _get_route(account, route_id)
    if not row.endpoint_id:
        raise InvalidInput("action", "Only a webhook route has a signing secret.")
    with write_transaction():
        secret = replace_secret(WebhookEndpoint.get_by_id(row.endpoint_id), config)
    return _row_shown(_get_route(account, route_id), secret)


def delete_route(account: Account, route_id: str) -> None:
    """Delete the route; its mail already received stays. ``NotFound``."""
    with write_transaction():
        row = _get_route(account, route_id)
        row.delete_instance()
        if row.endpoint_id:
            _delete_endpoints([row.endpoint_id])


# -- at RCPT ------------------------------------------------------------------------------------


def split_address(address: str) -> tuple[str, str, str] | None:
    """(local part without its ``+hash``, the hash, domain), all lower case, or None for
    something that is not an address."""
    local, at, domain = address.strip().strip("<>").rpartition("@")
    if not at or not local or not domain:
        return None
    base, _, mailbox_hash = local.partition("+")
    return base.lower(), mailbox_hash, domain.rstrip(".").lower()


def route_for(address: str) -> RouteTarget | bool | None:
    """Where mail to ``address`` goes: its route; ``False`` when the address is on a verified
    inbound domain that has no route for it (refuse it); ``None`` when no verified inbound
    domain has it (not inbound routing's mail). The exact local part wins over ``*``."""
    parts = split_address(address)
    if parts is None:
        return None
    local, mailbox_hash, domain = parts
    domain_row = InboundDomain.get_or_none(
        (InboundDomain.domain == domain) & (InboundDomain.status == VERIFIED)
    )
    if domain_row is None:
        return None
    routes = {
        r.local_part: r
        for r in InboundRoute.select().where(
            (InboundRoute.domain == domain_row.id)
            & (InboundRoute.local_part.in_([local, WILDCARD]))
        )
    }
    row = routes.get(local) or routes.get(WILDCARD)
    if row is None:
        return False
    return RouteTarget(
        route_id=row.id,
        account_id=domain_row.account_id,
        match=f"{row.local_part}@{domain}",
        action=row.action,
        endpoint_id=row.endpoint_id,
        spam_threshold=row.spam_threshold,
        mailbox_hash=mailbox_hash,
        address=address.strip().strip("<>"),
    )


def pending_delivery(endpoint_id: str, body: str, now: int, message_id: str) -> str:
    """Queue ``body`` (received message ``message_id``) as one delivery to a route's endpoint,
    inside the caller's write transaction; returns its id, which is the ``webhook-id`` of every
    attempt (``msg_<id>``)."""
    delivery_id = new_id()
    WebhookDelivery.insert(
        id=delivery_id,
        endpoint=endpoint_id,
        event_ids=json.dumps([message_id]),
        body=body,
        attempts=0,
        created_at=now,
        next_attempt_at=now,
    ).execute()
    return delivery_id
