"""The sender requirements check (docs/api.md, "Sender requirements"): the rules Gmail, Yahoo
and Microsoft set for bulk senders since 2024, each checked for one sending domain against DNS
and Layang's own figures.

Rule ids: ``spf`` and ``dkim`` (aligned with the From domain), ``dmarc`` (published),
``ptr`` (forward-confirmed reverse DNS for every source address), ``tls`` (to the provider's
MX), ``unsubscribe`` (one-click, RFC 8058, on broadcast mail), ``complaint_rate`` (under
0.3 %, 0.1 % the target). Each says ``ok``, ``fail`` or ``unknown`` (Layang cannot tell), what
was found, and the fix.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from layang.config import Config
from layang.domain import breaker
from layang.domain.dns_lookup import DnsLookup
from layang.domain.sending_domains import (
    OK,
    DnsRecord,
    _check_dkim,
    _check_dmarc,
    _check_spf,
    _get,
    _keys,
    expected_records,
    spf_mechanism,
)
from layang.mail.dkim import ALGORITHM
from layang.mail.unsubscribe import ONE_CLICK, UNSUBSCRIBE_PATH
from layang.models import ACTIVE, Account, SendingDomain

OK_STATUS, FAIL, UNKNOWN = "ok", "fail", "unknown"
COMPLAINT_LIMIT = 0.003
COMPLAINT_TARGET = 0.001


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    title: str
    status: str
    found: str
    fix: str


@dataclass(frozen=True, slots=True)
class Compliance:
    domain: str
    rules: tuple[Rule, ...]


def check_compliance(account: Account, domain: str, config: Config) -> Compliance:
    """Every rule for the account's sending domain ``domain``, checked now. Raises
    ``NotFound`` for a domain the account does not have."""
    row = _get(account, domain)
    lookup = DnsLookup(config)
    records = {r.purpose: r for r in expected_records(row, _keys(row), config)}
    rules = (
        _spf(row.domain, records["spf"], lookup, config),
        _dkim(row, lookup, config),
        _dmarc(records["dmarc"], lookup),
        _ptr(lookup, config),
        _tls(config),
        _unsubscribe(config),
        _complaint_rate(account, row.domain),
    )
    return Compliance(row.domain, rules)


def _spf(domain: str, record: DnsRecord, lookup: DnsLookup, config: Config) -> Rule:
    title = "SPF passes and aligns with the From domain"
    status, found = _check_spf(record, lookup.txt(record.name), spf_mechanism(config))
    if status == OK:
        return Rule(
            "spf",
            title,
            OK_STATUS,
            f"{record.name} (the envelope sender, under {domain}, so aligned): {found}",
            "",
        )
    return Rule(
        "spf",
        title,
        FAIL,
        found,
        f"Publish TXT {record.name} = {record.value} (or add "
        f"{spf_mechanism(config)} to the SPF record there).",
    )


def _dkim(row: SendingDomain, lookup: DnsLookup, config: Config) -> Rule:
    title = "DKIM signs with the From domain (d= aligned)"
    # The RSA key: every receiver checks it (an Ed25519 signature comes only beside it).
    keys = [key for key in _keys(row) if key.status == ACTIVE and key.algorithm == ALGORITHM]
    wanted = [r for r in expected_records(row, keys, config) if r.purpose == "dkim"]
    if not wanted:
        return Rule(
            "dkim",
            title,
            FAIL,
            f"No DKIM key of {row.domain} is active yet: mail is not signed with d={row.domain}.",
            "Publish the DKIM record the domain lists, then verify the domain.",
        )
    record = wanted[0]
    status, found = _check_dkim(record, lookup.txt(record.name))
    if status == OK:
        return Rule("dkim", title, OK_STATUS, f"{record.name}: the active key is published.", "")
    return Rule("dkim", title, FAIL, found, f"Publish TXT {record.name} = {record.value}")


def _dmarc(record: DnsRecord, lookup: DnsLookup) -> Rule:
    title = "DMARC is published"
    status, found = _check_dmarc(record, lookup)
    if status == OK:
        return Rule("dmarc", title, OK_STATUS, found, "")
    return Rule("dmarc", title, FAIL, found, f"Publish TXT {record.name} = {record.value}")


def _source_addresses(config: Config) -> list[str]:
    """Layang's own source addresses: ``LAYANG_SOURCE_ADDRESSES`` and the pools."""
    addresses = [address for address, _ in config.source_addresses]
    addresses += [a for _, pool in config.source_pools for a in pool]
    return list(dict.fromkeys(addresses))


# Networks whose addresses receivers never see (RFC 1918, shared NAT, loopback, link-local,
# unique local): mail from them reaches the internet by another address.
_INTERNAL = tuple(
    ipaddress.ip_network(net)
    for net in (
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "::1/128",
        "fc00::/7",
        "fe80::/10",
    )
)


def _internal(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return any(ip.version == net.version and ip in net for net in _INTERNAL)


def _relay_host(config: Config) -> str | None:
    """The smarthost of ``LAYANG_RELAY_URL`` (``smtp://`` or ``smtps://``), else None."""
    if "://" not in config.relay_url:
        return None
    return urlsplit(config.relay_url).hostname


def _relay_addresses(host: str, lookup: DnsLookup) -> tuple[list[str], str | None]:
    """The smarthost's own addresses (its name looked up, or the address it is), or none and
    why not."""
    try:
        return [str(ipaddress.ip_address(host))], None
    except ValueError:
        pass
    answer = lookup.addresses(host)
    return list(answer.values), answer.problem or f"{host} has no A or AAAA record."


def _ptr(lookup: DnsLookup, config: Config) -> Rule:
    title = "Every source address has forward-confirmed reverse DNS"
    # Receivers see Layang's own addresses (direct to MX), or the smarthost's: check both.
    checked = [(address, "") for address in _source_addresses(config)]
    found: list[str] = []
    failing: list[str] = []
    unknown = False
    host = _relay_host(config)
    if host is not None:
        relay, problem = _relay_addresses(host, lookup)
        if not relay:
            unknown = True
            found.append(f"the relay {host}: {problem}")
        checked += [(address, f"the relay {host}: ") for address in relay]
    if not checked and not found:
        return Rule(
            "ptr",
            title,
            UNKNOWN,
            "No source address is configured (LAYANG_SOURCE_ADDRESSES).",
            "List the addresses mail leaves from in LAYANG_SOURCE_ADDRESSES.",
        )
    for address, origin in checked:
        if _internal(address):
            # A private address is not what receivers see; the address it leaves by is.
            unknown = True
            found.append(f"{origin}{address} is not a public address: its PTR is not checked")
            continue
        names = lookup.ptr(address)
        if not names.values:
            failing.append(address)
            found.append(f"{origin}{address}: {names.problem or 'no PTR record'}")
            continue
        name = names.values[0]
        forward = lookup.addresses(name)
        if address in forward.values:
            found.append(f"{origin}{address} → {name} → {address}")
        else:
            failing.append(address)
            listed = ", ".join(forward.values) or forward.problem or "nothing"
            found.append(f"{origin}{address} → {name}, which resolves to {listed}")
    if failing:
        return Rule(
            "ptr",
            title,
            FAIL,
            "; ".join(found),
            "Give " + ", ".join(failing) + " a PTR record naming a host whose A/AAAA record "
            "is that same address (ask the owner of the address block, or the relay's "
            "operator for its addresses).",
        )
    if unknown:
        return Rule(
            "ptr",
            title,
            UNKNOWN,
            "; ".join(found),
            "List the public addresses mail leaves from in LAYANG_SOURCE_ADDRESSES, or ask "
            "the relay's operator for its reverse DNS.",
        )
    return Rule("ptr", title, OK_STATUS, "; ".join(found), "")


def _tls(config: Config) -> Rule:
    title = "Mail travels over TLS to the provider's MX"
    url = config.relay_url
    scheme = url.split(":", 1)[0].lower()
    if scheme == "mx":
        return Rule("tls", title, OK_STATUS, "Direct to MX with STARTTLS whenever offered.", "")
    if scheme == "smtps":
        return Rule("tls", title, OK_STATUS, "The relay is reached over implicit TLS.", "")
    if scheme == "smtp":
        tls = parse_qs(urlsplit(url).query).get("tls", [""])[0].lower()
        if tls == "off":
            return Rule(
                "tls",
                title,
                FAIL,
                "LAYANG_RELAY_URL turns TLS off (?tls=off).",
                "Remove ?tls=off, or use ?tls=required.",
            )
        how = "required" if tls == "required" else "used whenever the relay offers STARTTLS"
        return Rule(
            "tls",
            title,
            OK_STATUS,
            f"STARTTLS to the relay {urlsplit(url).hostname} is {how}; the relay carries the "
            "mail on to the provider's MX.",
            "",
        )
    return Rule(
        "tls",
        title,
        UNKNOWN,
        "Mail is captured to files (LAYANG_RELAY_URL=capture:…), not sent.",
        "Set LAYANG_RELAY_URL to mx: or an SMTP relay.",
    )


def _unsubscribe(config: Config) -> Rule:
    # Layang writes the headers into every copy of broadcast mail, through the API and over
    # SMTP alike, so what is left to check is the link: RFC 8058 asks for an HTTPS URI.
    title = "Broadcast mail carries one-click unsubscribe (RFC 8058)"
    link = f"{config.public_url}{UNSUBSCRIBE_PATH}…"
    if urlsplit(config.public_url).scheme.lower() != "https":
        return Rule(
            "unsubscribe",
            title,
            FAIL,
            f"The unsubscribe link in broadcast mail is {link}: mailbox providers offer "
            "one-click unsubscribe only for an https link.",
            "Serve Layang's links over https and set LAYANG_PUBLIC_URL to that address.",
        )
    return Rule(
        "unsubscribe",
        title,
        OK_STATUS,
        f"Each copy of broadcast mail, sent through the API or over SMTP, gets "
        f"List-Unsubscribe (<{link}> and a mailto:) and List-Unsubscribe-Post: {ONE_CLICK}, "
        "signed with DKIM when the domain's key is active.",
        "",
    )


def _percent(rate: float) -> str:
    return f"{rate * 100:.2f} %"


def _complaint_rate(account: Account, domain: str) -> Rule:
    title = "Spam complaint rate under 0.3 % (target 0.1 %)"
    rates = breaker.rates_of(account.id, domain)
    if rates.sent == 0:
        return Rule(
            "complaint_rate",
            title,
            UNKNOWN,
            f"No mail from {domain} reached a final answer in the last 24 h.",
            "",
        )
    rate = rates.complaint_rate
    found = f"{_percent(rate)} over 24 h ({rates.complaints} complaints, {rates.sent} messages)"
    if rate >= COMPLAINT_LIMIT:
        return Rule(
            "complaint_rate",
            title,
            FAIL,
            found,
            "Send only to recipients who asked for the mail, and honour unsubscribes at once.",
        )
    fix = "" if rate < COMPLAINT_TARGET else "Above the 0.1 % target: prune unengaged recipients."
    return Rule("complaint_rate", title, OK_STATUS, found, fix)
