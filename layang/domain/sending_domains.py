"""Sending domains: the DNS records an account publishes for a domain it sends from, checking
them, and the DKIM keys that sign its mail (made, rotated, retired, deleted).

Several accounts may claim a domain while it is ``pending``, each with its own keys; the first
to verify it owns it (one verified row per domain, which the database enforces), and the
others' claims then answer ``Conflict`` on verify until the owner deletes it. A claim is
``pending`` until one of its DKIM records is found in DNS with the right key; that key becomes
``active`` and the domain ``verified`` from then on. ``rotate`` adds a ``pending`` key: once
its record is found it becomes the active key and the one it replaces is ``retired`` (it still
has its record published, for mail already on its way, until it is deleted). The worker signs
with the active key (``layang.mail.dkim``).

The records to publish:

- DKIM: ``TXT <selector>._domainkey.<domain>`` with the public key, one per key.
- SPF: ``TXT <returnPathDomain>``: the envelope sender lives there (docs/delivery.md, "Bounces and
  complaints"), so the domain's own SPF record, often shared with other mail services, is left
  alone.
- DMARC: ``TXT _dmarc.<domain>``, a ``p=none`` starter whose aggregate reports go to
  ``dmarc@<returnPathDomain>``, where ``layang inbound`` reads them (``layang.domain.dmarc``);
  any DMARC record the domain (or a parent) already has is fine.
- Return path: ``MX <returnPathDomain>`` naming ``LAYANG_INBOUND_HOST``, where bounces and
  complaints come back to.
"""

from __future__ import annotations

import ipaddress
import json
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from urllib.parse import urlsplit

import peewee

from layang import sealing
from layang.clock import now_ms
from layang.config import Config
from layang.db import write_transaction
from layang.domain.dns_lookup import Answer, DnsLookup
from layang.domain.errors import Conflict, InvalidInput, NotFound, SenderDomainNotVerified
from layang.mail import dkim
from layang.mail.idn import InvalidDomain, to_ascii
from layang.models import ACTIVE, PENDING, RETIRED, VERIFIED, Account, DkimKey, SendingDomain
from layang.pagination import Page, keyset_page

OK = "ok"
MISSING = "missing"
MISMATCH = "mismatch"

_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_SELECTOR_ALPHABET = "abcdefghijkmnpqrstuvwxyz23456789"


@dataclass(frozen=True)
class DnsRecord:
    """One record to publish, and what the last check found (``found`` is None before any)."""

    purpose: str
    type: str
    name: str
    value: str
    status: str = MISSING
    found: str | None = None

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.purpose, self.type, self.name, self.value)


@dataclass(frozen=True)
class DomainState:
    """A sending domain as the account sees it: its records (with the last check's results)
    and its DKIM keys, oldest first. Never holds a private key."""

    domain: str
    status: str
    return_path_domain: str
    records: tuple[DnsRecord, ...]
    dkim: tuple[DkimKey, ...]
    checked_at: int | None
    created_at: int


# -- names ------------------------------------------------------------------------------------


def normalize_domain(value: str, field: str = "domain") -> str:
    """``value`` as a lower-case ASCII domain name (IDNA 2008 A-labels,
    :func:`layang.mail.idn.to_ascii`). ``InvalidInput`` naming ``field`` if it is not one."""
    try:
        name = to_ascii(value)
    except InvalidDomain as error:
        raise InvalidInput(field, str(error)) from None
    labels = name.split(".")
    if len(name) > 253 or len(labels) < 2 or not all(_LABEL.match(label) for label in labels):
        raise InvalidInput(field, f"{value!r} is not a valid domain name.")
    if labels[-1].isdigit():
        raise InvalidInput(field, f"{value!r} is an address, not a domain name.")
    return name


def _new_selector(year: int, taken: set[str]) -> str:
    while True:
        selector = f"lyg{year}" + "".join(secrets.choice(_SELECTOR_ALPHABET) for _ in range(4))
        if selector not in taken:
            return selector


def _host_of(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()


def _mechanism(host: str) -> str:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return f"a:{host}"
    return f"ip{address.version}:{address}"


def spf_mechanism(config: Config) -> str:
    """The SPF mechanism that authorises the servers Layang's mail leaves from: the relay's
    host when the relay is an SMTP server, else this service's own host."""
    if config.relay_url.strip() == "mx:" and config.source_addresses:
        # Direct to MX: mail leaves from the source addresses themselves.
        return " ".join(_mechanism(address) for address, _ in config.source_addresses)
    relay_host = _host_of(config.relay_url) if "://" in config.relay_url else ""
    return _mechanism(relay_host or _host_of(config.public_url) or "localhost")


def inbound_host(config: Config) -> str:
    return (config.inbound_host or _host_of(config.public_url) or "localhost").rstrip(".")


def _local(host: str) -> bool:
    """Whether ``host`` only makes sense on this machine or its private network."""
    host = host.rstrip(".").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host.removeprefix("bounces."))
    except ValueError:
        return False
    return not address.is_global


def development_values(config: Config) -> str | None:
    """What the suggested records and return path take from a development configuration
    (a loopback or private host), and which settings make them real; None when nothing does."""
    found = []
    mx_host = inbound_host(config)
    if _local(mx_host):
        found.append(f"MX 10 {mx_host}")
    mechanism = spf_mechanism(config)
    if _local(mechanism.split(":", 1)[1]):
        found.append(mechanism)
    if _local(config.bounce_domain):
        found.append(config.bounce_domain)
    if not found:
        return None
    return (
        f"Development values: {', '.join(found)} work only on this machine. Set "
        "LAYANG_PUBLIC_URL to this service's public https:// address (or LAYANG_INBOUND_HOST, "
        "LAYANG_BOUNCE_DOMAIN and an smtp:// LAYANG_RELAY_URL) to make them real."
    )


def expected_records(row: SendingDomain, keys: list[DkimKey], config: Config) -> list[DnsRecord]:
    """What the operator publishes for ``row``, unchecked."""
    records = [
        DnsRecord(
            "dkim",
            "TXT",
            dkim.key_context(key.selector, row.domain),
            dkim.record_value(key.public_key, key.algorithm),
        )
        for key in keys
    ]
    return [
        *records,
        DnsRecord("spf", "TXT", row.return_path_domain, f"v=spf1 {spf_mechanism(config)} ~all"),
        DnsRecord(
            "dmarc",
            "TXT",
            f"_dmarc.{row.domain}",
            f"v=DMARC1; p=none; rua=mailto:dmarc@{row.return_path_domain}",
        ),
        DnsRecord("return-path", "MX", row.return_path_domain, f"10 {inbound_host(config)}"),
    ]


def split_txt(value: str, size: int = 255) -> list[str]:
    """``value`` as the strings of one TXT record: DNS caps each string at 255 bytes, and
    resolvers join them back, so some DNS providers want a long record given this way."""
    data = value.encode()
    return [data[i : i + size].decode() for i in range(0, len(data), size)] or [""]


# -- checks -----------------------------------------------------------------------------------


def _tags(value: str) -> dict[str, str]:
    tags = {}
    for part in value.split(";"):
        name, sep, tag_value = part.partition("=")
        if sep:
            tags[name.strip().lower()] = re.sub(r"\s+", "", tag_value)
    return tags


def _check_dkim(record: DnsRecord, answer: Answer) -> tuple[str, str]:
    if not answer.values:
        return MISSING, answer.problem or f"{record.name} has no TXT record."
    wanted = _tags(record.value)["p"]
    keys = [value for value in answer.values if "p" in _tags(value)]
    if any(_tags(value)["p"] == wanted for value in keys):
        return OK, next(v for v in keys if _tags(v)["p"] == wanted)
    found = " | ".join(keys or answer.values)
    return MISMATCH, f"A different key is published: {found}"


def _check_spf(record: DnsRecord, answer: Answer, mechanism: str) -> tuple[str, str]:
    spf = [v for v in answer.values if v.lower().split(" ", 1)[0] == "v=spf1"]
    if not spf:
        return MISSING, answer.problem or f"{record.name} has no v=spf1 record."
    if len(spf) > 1:
        return MISMATCH, "More than one SPF record; merge them into one: " + " | ".join(spf)
    published = spf[0].lower().split()
    if any(part not in published for part in mechanism.lower().split()):
        return MISMATCH, f"Add {mechanism} to it: {spf[0]}"
    return OK, spf[0]


def _check_dmarc(record: DnsRecord, lookup: DnsLookup) -> tuple[str, str]:
    name = record.name
    problem = None
    while name.count(".") >= 2:
        answer = lookup.txt(name)
        dmarc = [v for v in answer.values if v.replace(" ", "").lower().startswith("v=dmarc1")]
        if len(dmarc) > 1:
            return MISMATCH, f"More than one DMARC record at {name}: " + " | ".join(dmarc)
        if dmarc:
            if "p" not in _tags(dmarc[0]):
                return MISMATCH, f"The DMARC record has no p= policy: {dmarc[0]}"
            if name == record.name:
                return OK, dmarc[0]
            return OK, f"Inherited from {name}: {dmarc[0]}"
        problem = problem or answer.problem
        # A subdomain without its own record falls under its organisational domain's.
        name = "_dmarc." + name.split(".", 2)[2]
    return MISSING, problem or f"{record.name} has no v=DMARC1 record."


def _check_mx(record: DnsRecord, answer: Answer) -> tuple[str, str]:
    if not answer.values:
        return MISSING, answer.problem or f"{record.name} has no MX record."
    host = record.value.split()[-1]
    if any(value.split()[-1] == host for value in answer.values):
        return OK, " | ".join(answer.values)
    return MISMATCH, "The MX names other hosts: " + " | ".join(answer.values)


def check_records(records: list[DnsRecord], lookup: DnsLookup, config: Config) -> list[DnsRecord]:
    """Each record with its ``status`` and ``found`` from DNS now."""
    checked = []
    for record in records:
        if record.purpose == "dkim":
            status, found = _check_dkim(record, lookup.txt(record.name))
        elif record.purpose == "spf":
            status, found = _check_spf(record, lookup.txt(record.name), spf_mechanism(config))
        elif record.purpose == "dmarc":
            status, found = _check_dmarc(record, lookup)
        else:
            status, found = _check_mx(record, lookup.mx(record.name))
        checked.append(DnsRecord(*record.key, status=status, found=found))
    return checked


# -- the domain's life ------------------------------------------------------------------------


def _keys(row: SendingDomain) -> list[DkimKey]:
    return list(
        DkimKey.select()
        .where(DkimKey.sending_domain == row.id)
        .order_by(DkimKey.created_at, DkimKey.id)
    )


def _state(row: SendingDomain, config: Config, keys: list[DkimKey] | None = None) -> DomainState:
    keys = _keys(row) if keys is None else keys
    last = {DnsRecord(**r).key: DnsRecord(**r) for r in json.loads(row.records)}
    records = tuple(last.get(r.key, r) for r in expected_records(row, keys, config))
    return DomainState(
        domain=row.domain,
        status=row.status,
        return_path_domain=row.return_path_domain,
        records=records,
        dkim=tuple(keys),
        checked_at=row.checked_at,
        created_at=row.created_at,
    )


def _get(account: Account, domain: str) -> SendingDomain:
    try:
        name = normalize_domain(domain)
    except InvalidInput:
        name = domain
    row = SendingDomain.get_or_none(
        (SendingDomain.domain == name) & (SendingDomain.account == account.id)
    )
    if row is None:
        raise NotFound(f"No sending domain {domain!r}.")
    return row


def _add_key(
    row: SendingDomain, config: Config, taken: set[str], algorithm: str = dkim.ALGORITHM
) -> DkimKey:
    if algorithm == dkim.ED25519:
        private_pem, public_key = dkim.generate_ed25519_key()
        bits = dkim.ED25519_BITS
    else:
        private_pem, public_key = dkim.generate_key()
        bits = dkim.KEY_BITS
    selector = _new_selector(time.gmtime(now_ms() // 1000).tm_year, taken)
    taken.add(selector)
    return DkimKey.create(
        sending_domain=row.id,
        selector=selector,
        algorithm=algorithm,
        bits=bits,
        status=PENDING,
        public_key=public_key,
        private_key=sealing.seal(
            private_pem, config.secret_key, dkim.key_context(selector, row.domain)
        ),
    )


def create_domain(
    account: Account, domain: str, return_path_domain: str | None, config: Config
) -> DomainState:
    """Add ``domain`` to ``account``, ``pending``, with a fresh RSA-2048 key (``pending`` too),
    and an Ed25519 one beside it with ``LAYANG_DKIM_ED25519``.

    ``return_path_domain`` defaults to ``bounces.<domain>`` and must be a subdomain of it (so
    that SPF aligns). Raises ``InvalidInput`` for a bad name and ``Conflict`` when the domain
    is already added to this account or verified by another (another's pending claim is no
    obstacle: the first to verify owns the domain).
    """
    name = normalize_domain(domain)
    if return_path_domain is None:
        return_path = f"bounces.{name}"
    else:
        return_path = normalize_domain(return_path_domain, "return_path_domain")
        if not return_path.endswith("." + name):
            raise InvalidInput("return_path_domain", f"Must be a subdomain of {name}.")
    try:
        with write_transaction():
            if _owner(name, account) is not None:
                raise Conflict(f"domain: {name} belongs to another account.")
            row = SendingDomain.create(
                account=account.id, domain=name, return_path_domain=return_path, status=PENDING
            )
            taken: set[str] = set()
            _add_key(row, config, taken)
            if config.dkim_ed25519:
                _add_key(row, config, taken, dkim.ED25519)
    except peewee.IntegrityError:
        raise Conflict(f"domain: {name} is already added.") from None
    return _state(row, config)


def _owner(name: str, account: Account) -> SendingDomain | None:
    """Another account's verified row for the domain ``name``, if any."""
    return SendingDomain.get_or_none(
        (SendingDomain.domain == name)
        & (SendingDomain.status == VERIFIED)
        & (SendingDomain.account != account.id)
    )


def list_domains(
    account: Account, config: Config, *, limit: int = 50, cursor: str | None = None
) -> Page[DomainState]:
    """One page of the account's sending domains, newest first, as of their last check."""
    query = SendingDomain.select().where(SendingDomain.account == account.id)
    page = keyset_page(query, SendingDomain.id, limit=limit, cursor=cursor)
    return page.map(lambda row: _state(row, config))


def get_domain(account: Account, domain: str, config: Config) -> DomainState:
    """The domain as of its last check. ``NotFound`` unless ``account`` has it."""
    return _state(_get(account, domain), config)


def verify_domain(
    account: Account,
    domain: str,
    config: Config,
    lookup: Callable[[Config], DnsLookup] = DnsLookup,
) -> DomainState:
    """Check every record in DNS now and record the results.

    Of each algorithm, the newest key whose record matches becomes the active key (the one
    before it is retired); the domain is ``verified`` once an RSA key is active. A domain once
    verified stays so; its records show what DNS says now. ``NotFound`` unless ``account`` has
    the domain; ``Conflict`` when another account verified it first (this claim stays pending,
    unchanged). With ``LAYANG_DKIM_ED25519`` a domain that has no Ed25519 key gets one here
    (``pending``, its record among those to publish).
    """
    row = _get(account, domain)
    _refuse_if_owned(row, account)
    if config.dkim_ed25519:
        _add_ed25519_if_missing(account, domain, config)
    records = check_records(expected_records(row, _keys(row), config), lookup(config), config)
    published = {r.name.split(".", 1)[0] for r in records if r.purpose == "dkim" and r.status == OK}
    try:
        return _record_check(account, domain, records, published, config)
    except peewee.IntegrityError:
        # Another account's verification committed between the check above and this one.
        raise Conflict(f"domain: {row.domain} belongs to another account.") from None


def _add_ed25519_if_missing(account: Account, domain: str, config: Config) -> None:
    with write_transaction():
        row = _get(account, domain)
        keys = _keys(row)
        if not any(k.algorithm == dkim.ED25519 and k.status != RETIRED for k in keys):
            _add_key(row, config, {k.selector for k in keys}, dkim.ED25519)


def _refuse_if_owned(row: SendingDomain, account: Account) -> None:
    if row.status != VERIFIED and _owner(row.domain, account) is not None:
        raise Conflict(
            f"domain: {row.domain} was verified by another account first; it belongs to it."
        )


def _record_check(
    account: Account,
    domain: str,
    records: list[DnsRecord],
    published: set[str],
    config: Config,
) -> DomainState:
    now = now_ms()
    with write_transaction():
        row = _get(account, domain)  # as it is now, inside the write lock
        _refuse_if_owned(row, account)
        keys = _keys(row)
        for algorithm in {k.algorithm for k in keys}:
            family = [k for k in keys if k.algorithm == algorithm]
            candidates = [k for k in family if k.selector in published and k.status != RETIRED]
            if not candidates:
                continue
            signing = candidates[-1]
            for key in family:
                if key.id == signing.id and key.status != ACTIVE:
                    key.status, key.activated_at = ACTIVE, now
                    key.save()
                elif key.id != signing.id and key.status == ACTIVE:
                    key.status = RETIRED
                    key.save()
                    # Older pending keys stay pending: published later, they are still usable.
        rsa_active = any(k.status == ACTIVE and k.algorithm == dkim.ALGORITHM for k in keys)
        if rsa_active and row.status != VERIFIED:
            row.status, row.verified_at = VERIFIED, now
        row.records = json.dumps([asdict(r) for r in records])
        row.checked_at = now
        row.save()
    return _state(row, config, keys)


def rotate_key(account: Account, domain: str, config: Config) -> DomainState:
    """Add a second RSA key, ``pending``: signing moves to it once its record verifies; and a
    second Ed25519 key where the domain signs with one (or ``LAYANG_DKIM_ED25519`` asks for
    one) and none is pending. ``Conflict`` while another RSA key is still pending."""
    with write_transaction():
        row = _get(account, domain)
        keys = _keys(row)
        waiting = [k.selector for k in keys if k.status == PENDING and k.algorithm != dkim.ED25519]
        if waiting:
            raise Conflict(
                f"Key {waiting[0]} is still pending: publish its record and verify, "
                "or delete it, before rotating again."
            )
        taken = {k.selector for k in keys}
        _add_key(row, config, taken)
        ed25519 = [k for k in keys if k.algorithm == dkim.ED25519 and k.status != RETIRED]
        if (ed25519 or config.dkim_ed25519) and not any(k.status == PENDING for k in ed25519):
            _add_key(row, config, taken, dkim.ED25519)
    return _state(row, config)


def delete_key(account: Account, domain: str, selector: str) -> None:
    """Delete one key. ``Conflict`` for the only active RSA key (without it the domain's mail
    goes unsigned: rotate and verify first); an Ed25519 key, only ever a second signature,
    may always go. ``NotFound`` for an unknown selector."""
    with write_transaction():
        row = _get(account, domain)
        key = DkimKey.get_or_none(
            (DkimKey.sending_domain == row.id) & (DkimKey.selector == selector)
        )
        if key is None:
            raise NotFound(f"No DKIM key {selector!r} on {row.domain}.")
        others = DkimKey.select().where(
            (DkimKey.sending_domain == row.id)
            & (DkimKey.status == ACTIVE)
            & (DkimKey.algorithm == key.algorithm)
            & (DkimKey.id != key.id)
        )
        if key.algorithm == dkim.ED25519:
            key.delete_instance()
            return
        if key.status == ACTIVE and not others.exists():
            raise Conflict(
                f"{selector} is the only active key of {row.domain}; rotate and verify first."
            )
        key.delete_instance()


def delete_domain(account: Account, domain: str) -> None:
    """Delete the domain and its keys; its mail is no longer signed."""
    with write_transaction():
        row = _get(account, domain)
        DkimKey.delete().where(DkimKey.sending_domain == row.id).execute()
        row.delete_instance()


# -- sending from a domain --------------------------------------------------------------------


def verified_domain_for(account: Account, sender: str) -> str | None:
    """The account's verified domain covering ``sender``'s domain (itself or a parent)."""
    from_domain = sender.rpartition("@")[2]
    domains = SendingDomain.select(SendingDomain.domain).where(
        (SendingDomain.account == account.id) & (SendingDomain.status == VERIFIED)
    )
    return dkim.covering_domain((row.domain for row in domains), from_domain)


def check_sender_domain(account: Account, sender: str, config: Config) -> None:
    """With ``LAYANG_REQUIRE_VERIFIED_DOMAIN``, ``SenderDomainNotVerified`` when a live
    account sends from a domain it has not verified. Sandbox accounts have their own rule."""
    if not config.require_verified_domain or account.is_sandbox:
        return
    if verified_domain_for(account, sender) is None:
        raise SenderDomainNotVerified(sender)
