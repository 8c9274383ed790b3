"""Where a recipient domain's mail goes: its MX hosts, in the order to try them (RFC 5321 §5.1).

MX records sorted by preference, equal preferences in random order; no MX record means the
domain's own A/AAAA records (the implicit MX); a null MX (``0 .``, RFC 7505) means the domain
takes no mail. A domain that does not exist, or whose every MX host name does not exist or has
no address record, bounces (``550 5.1.2``); a look-up that fails (SERVFAIL, timeout) is only a
delay, never a reason to fall back to the A record. Answers are kept as long as
their TTL allows. The site a domain belongs to, the set of its MX host names, is named by the
shaping rule that matches it (``layang.destinations.shaping``) and remembered in ``mx_domain``
so that waiting mail can be grouped by site (docs/delivery.md).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterable
from dataclasses import dataclass

import dns.exception
import dns.name
import dns.resolver

from layang.clock import now_ms
from layang.config import Config, parse_resolvers
from layang.db import write_transaction
from layang.destinations.addresses import REFUSED_ADDRESS, allowed_addresses
from layang.destinations.dns import mx_resolver
from layang.destinations.shaping import Shaping, SiteRule
from layang.mail.idn import InvalidDomain, to_ascii
from layang.models import MxDomain

NULL_MX = "null_mx"
NO_DOMAIN = "no_domain"
TEMPORARY = "temporary"
# How long a domain that does not exist, or a failed look-up, is believed without asking again.
NEGATIVE_TTL = 60
FAILURE_TTL = 5
MAX_CACHED = 100_000


@dataclass(frozen=True)
class MxHost:
    """One MX host: its name, preference and addresses (IPv4 first, then IPv6)."""

    name: str
    preference: int
    addresses: tuple[str, ...]


@dataclass(frozen=True)
class Destination:
    """A recipient domain resolved: its ``site`` (the shaping rule's name, or its MX host
    names joined by ``+``), the ``hosts`` in the order to try, the site's ``rule``, and when
    the answer expires (epoch ms)."""

    domain: str
    site: str
    hosts: tuple[MxHost, ...]
    rule: SiteRule
    expires_at: int = 0


class MxFailure(Exception):
    """The domain cannot be delivered to: ``kind`` is ``null_mx`` (556, hard), ``no_domain``
    (550, hard) or ``temporary`` (451, a Delay); ``reply`` is the text the recipient's event
    carries."""

    def __init__(self, kind: str, code: int, reply: str) -> None:
        super().__init__(reply)
        self.kind = kind
        self.code = code
        self.reply = reply
        # The MX host names found, when the MX records were known but no host is usable
        # (no address yet, or none allowed): the domain's site is known all the same.
        self.mx_names: tuple[str, ...] = ()


def null_mx(domain: str) -> MxFailure:
    return MxFailure(
        NULL_MX, 556, f"556 5.1.10 Recipient domain {domain} does not accept mail (null MX)"
    )


def no_domain(domain: str, why: str = "does not exist (NXDOMAIN)") -> MxFailure:
    return MxFailure(NO_DOMAIN, 550, f"550 5.1.2 Recipient domain {domain} {why}")


def unusable(domain: str, why: str) -> MxFailure:
    """No MX host of ``domain`` has an address Layang may connect to (a ``Delay``, like a
    domain whose hosts have no address at all); ``why`` never names a refused address."""
    return MxFailure(
        TEMPORARY, 451, f"451 4.4.4 No usable mail server for {domain}: {why}; will retry"
    )


def temporary(domain: str, why: str) -> MxFailure:
    return MxFailure(
        TEMPORARY, 451, f"451 4.4.3 The DNS look-up of {domain} failed ({why}); will retry"
    )


class _Unresolved(Exception):
    """A look-up that failed for now (SERVFAIL, timeout, no server)."""


@dataclass(frozen=True)
class _Cached:
    expires: float  # time.monotonic()
    expires_at: int  # epoch ms
    groups: tuple[tuple[MxHost, ...], ...] = ()  # hosts by preference, before shuffling
    failure: MxFailure | None = None
    mx_names: tuple[str, ...] = ()  # with a failure: the MX host names, when known


class MxResolver:
    """Resolves recipient domains with dnspython's async resolver at ``nameserver``
    (``host:port[,host:port…]``, as ``LAYANG_DNS_RESOLVER``; None: the system's resolver).
    One instance serves an event loop; answers are cached here per TTL, with the site."""

    def __init__(
        self,
        nameserver: str | None,
        shaping: Shaping,
        timeout: float = 10.0,
        *,
        allow_private: bool = False,
    ) -> None:
        self.shaping = shaping
        # Addresses outside the public internet are left out of every host (``allow_private``:
        # LAYANG_MX_ALLOW_PRIVATE), as if the host did not have them.
        self.allow_private = allow_private
        servers = parse_resolvers(nameserver, "LAYANG_DNS_RESOLVER") if nameserver else ()
        self.resolver = mx_resolver(servers, timeout)
        self._cache: dict[str, _Cached] = {}
        # An MX host's addresses, asked once for every domain it serves (a site's hosts serve
        # many), and looked up once while several domains wait for them.
        self._addresses_of: dict[str, tuple[float, tuple[tuple[str, ...], int, None]]] = {}
        self._asking: dict[str, asyncio.Future[tuple[tuple[str, ...], int, str | None]]] = {}
        self._learned: dict[str, tuple[str, int]] = {}
        self._random = random.Random()

    @classmethod
    def from_config(cls, config: Config, shaping: Shaping) -> MxResolver:
        return cls(config.dns_resolver or None, shaping, allow_private=config.mx_allow_private)

    async def resolve(self, domain: str) -> Destination:
        """The destination of ``domain``; raises ``MxFailure`` when it has none (null MX,
        no such domain) or none can be known now (``temporary``)."""
        try:
            domain = to_ascii(domain)  # looked up by its A-labels (IDNA 2008)
        except InvalidDomain as error:
            raise no_domain(domain, f"is not a valid domain name ({error})") from None
        cached = self._cache.get(domain)
        if cached is None or cached.expires <= time.monotonic():
            cached = await self._look_up(domain)
            if len(self._cache) >= MAX_CACHED:
                self._forget_expired()
            self._cache[domain] = cached
        if cached.failure is not None:
            if cached.mx_names:
                # The MX records are known though no host can be reached: the site is known.
                rule = self.shaping.rule_for(list(cached.mx_names))
                self._learned[domain] = (rule.name, cached.expires_at)
            raise cached.failure
        hosts: list[MxHost] = []
        for group in cached.groups:
            shuffled = list(group)
            self._random.shuffle(shuffled)
            hosts.extend(shuffled)
        rule = self.shaping.rule_for([host.name for host in hosts])
        self._learned[domain] = (rule.name, cached.expires_at)
        return Destination(domain, rule.name, tuple(hosts), rule, cached.expires_at)

    def _forget_expired(self) -> None:
        now = time.monotonic()
        self._cache = {d: c for d, c in self._cache.items() if c.expires > now}
        if len(self._cache) >= MAX_CACHED:
            self._cache.clear()

    def learned_sites(self) -> list[tuple[str, str, int]]:
        """(domain, site, expires_at) of the domains resolved since the last call, for
        ``remember_sites``."""
        learned, self._learned = self._learned, {}
        return [(domain, site, expires) for domain, (site, expires) in learned.items()]

    async def _look_up(self, domain: str) -> _Cached:
        try:
            return await self._hosts(domain)
        except MxFailure as failure:
            ttl = FAILURE_TTL if failure.kind == TEMPORARY else NEGATIVE_TTL
            return _cached(ttl, failure=failure, mx_names=failure.mx_names)

    async def _hosts(self, domain: str) -> _Cached:
        try:
            answer = await self._query(domain, "MX")
        except dns.resolver.NXDOMAIN:
            raise no_domain(domain) from None
        except _Unresolved as error:
            raise temporary(domain, str(error)) from None
        if answer is None or answer.rrset is None:
            # No MX: the domain itself is the mail server (RFC 5321 §5.1), if it has an address.
            addresses, ttl, problem = await self._addresses(domain)
            usable = allowed_addresses(addresses, self.allow_private)
            if usable:
                return _cached(min(ttl, _ttl(answer)), groups=((MxHost(domain, 0, usable),),))
            if problem:
                raise temporary(domain, problem)
            if addresses:
                raise unusable(domain, f"{domain} resolves to {REFUSED_ADDRESS} only")
            raise no_domain(domain, "has no mail server (no MX, A or AAAA record)")
        # A null MX stands alone (RFC 7505 §3); beside real ones it is a mistake, skipped.
        records = sorted(
            (
                (r.preference, r.exchange.to_text(omit_final_dot=True).lower())
                for r in answer.rrset
                if r.exchange != dns.name.root
            ),
            key=lambda record: record[0],
        )
        if not records:
            raise null_mx(domain)
        ttl = answer.rrset.ttl
        looked_up = await asyncio.gather(*(self._addresses(name) for _, name in records))
        groups: dict[int, list[MxHost]] = {}
        problems, refused = [], []
        for (preference, name), (addresses, host_ttl, problem) in zip(
            records, looked_up, strict=True
        ):
            if problem:
                problems.append(f"{name}: {problem}")
            usable = allowed_addresses(addresses, self.allow_private)
            if usable:
                groups.setdefault(preference, []).append(MxHost(name, preference, usable))
                ttl = min(ttl, host_ttl)
            elif addresses:
                refused.append(f"{name} resolves to {REFUSED_ADDRESS} only")
        if not groups:
            if problems:
                failure = temporary(domain, "; ".join(problems + refused))
            elif refused:
                failure = unusable(domain, "; ".join(refused))
            else:
                # Every MX host name is NXDOMAIN or has no address record: an error to report,
                # not a condition to wait out (RFC 5321 section 5.1).
                failure = no_domain(
                    domain, f"has no usable mail server ({_unusable_hosts(records)})"
                )
            # The site is named by these hosts even though none could be used (queue views).
            failure.mx_names = tuple(name for _, name in records)
            raise failure
        return _cached(ttl, groups=tuple(tuple(groups[p]) for p in sorted(groups)))

    async def _addresses(self, name: str) -> tuple[tuple[str, ...], int, str | None]:
        """The IPv4 then IPv6 addresses of ``name``, the smallest TTL, and why a look-up
        failed for now (None: the answers are what they are, perhaps none). Answers found are
        kept for their TTL; a look-up in progress is shared."""
        now = time.monotonic()
        kept = self._addresses_of.get(name)
        if kept is not None and kept[0] > now:
            return kept[1]
        asking = self._asking.get(name)
        if asking is not None:
            return await asyncio.shield(asking)
        asking = asyncio.get_running_loop().create_future()
        self._asking[name] = asking
        try:
            found = await self._look_up_addresses(name)
        except Exception as error:
            asking.set_exception(error)
            asking.exception()  # retrieved: the waiters (if any) get it too
            raise
        except BaseException:
            asking.cancel()
            raise
        finally:
            del self._asking[name]
        asking.set_result(found)
        addresses, ttl, problem = found
        if problem is None:
            if len(self._addresses_of) >= MAX_CACHED:
                self._addresses_of.clear()
            self._addresses_of[name] = (now + ttl, (addresses, ttl, None))
        return found

    async def _look_up_addresses(self, name: str) -> tuple[tuple[str, ...], int, str | None]:
        results = await asyncio.gather(
            self._query(name, "A"), self._query(name, "AAAA"), return_exceptions=True
        )
        addresses: list[str] = []
        ttl = 86400
        problem = None
        for result in results:
            if isinstance(result, dns.resolver.NXDOMAIN):
                continue
            if isinstance(result, _Unresolved):
                problem = str(result)
                continue
            if isinstance(result, BaseException):
                raise result
            if result is not None and result.rrset is not None:
                addresses.extend(r.address for r in result.rrset)
                ttl = min(ttl, result.rrset.ttl)
        return tuple(addresses), ttl, None if addresses else problem

    async def _query(self, name: str, rdtype: str) -> dns.resolver.Answer | None:
        try:
            return await self.resolver.resolve(name, rdtype, raise_on_no_answer=False, search=False)
        except dns.resolver.NXDOMAIN:
            raise
        except dns.resolver.NoNameservers:
            raise _Unresolved(f"SERVFAIL for {name} {rdtype}") from None
        except dns.exception.Timeout:
            raise _Unresolved(f"timeout for {name} {rdtype}") from None
        except dns.resolver.NoResolverConfiguration:
            raise _Unresolved("no DNS resolver configured; set LAYANG_DNS_RESOLVER") from None
        except dns.exception.DNSException as error:
            raise _Unresolved(f"{name} {rdtype}: {error}") from None


def _unusable_hosts(records: list[tuple[int, str]]) -> str:
    names = ", ".join(name for _, name in records[:5])
    more = f" and {len(records) - 5} more" if len(records) > 5 else ""
    return f"no address for MX host {names}{more}"


def _ttl(answer: dns.resolver.Answer | None) -> int:
    """The TTL of a no-data answer: its SOA's minimum when given, else the negative TTL."""
    if answer is None:
        return NEGATIVE_TTL
    for rrset in answer.response.authority:
        for record in rrset:
            minimum = getattr(record, "minimum", None)
            if minimum is not None:
                return min(rrset.ttl, minimum)
    return NEGATIVE_TTL


def _cached(
    ttl: int,
    groups: tuple[tuple[MxHost, ...], ...] = (),
    failure: MxFailure | None = None,
    mx_names: tuple[str, ...] = (),
) -> _Cached:
    ttl = max(ttl, 0)
    return _Cached(time.monotonic() + ttl, now_ms() + ttl * 1000, groups, failure, mx_names)


def remember_sites(entries: Iterable[tuple[str, str, int]]) -> int:
    """Record each ``(domain, site, expires_at)`` in ``mx_domain`` (replacing what was
    there), so that queue views can group waiting mail by site; returns how many."""
    # In one order everywhere, so that two processes' upserts never deadlock.
    rows = [{"domain": d, "site": s, "expires_at": e} for d, s, e in sorted(entries)]
    if not rows:
        return 0
    with write_transaction(durable=False):
        for start in range(0, len(rows), 200):
            MxDomain.insert_many(rows[start : start + 200]).on_conflict(
                conflict_target=[MxDomain.domain],
                preserve=[MxDomain.site, MxDomain.expires_at],
            ).execute()
    return len(rows)


def site_of(domain: str) -> str | None:
    """The site ``domain`` last resolved to (as ``remember_sites`` recorded it), if any."""
    row = MxDomain.get_or_none(MxDomain.domain == domain.strip().rstrip(".").lower())
    return row.site if row is not None else None


def sites_of(domains: Iterable[str]) -> dict[str, str]:
    """The site each of ``domains`` last resolved to, for those that have one."""
    wanted = sorted(set(domains))
    found: dict[str, str] = {}
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        query = MxDomain.select(MxDomain.domain, MxDomain.site).where(MxDomain.domain.in_(chunk))
        found.update(dict(query.tuples()))
    return found
