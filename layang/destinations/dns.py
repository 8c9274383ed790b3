"""The one place Layang builds DNS resolvers: every look-up of the service (MX, A/AAAA, TXT,
TLSA, PTR, the sending-domain checks, webhook hosts) goes through a resolver made here.

A resolver asks the servers of ``LAYANG_DNS_RESOLVER`` (``host:port[,host:port…]``, see
docs/configuration.md) or, when that is empty, the system's resolver (``/etc/resolv.conf``).
Nothing is cached by dnspython: the MX resolver keeps answers itself, with the site, and a
check says what DNS answers now. A query unanswered after ``try_seconds`` is sent again (UDP may
be lost), within ``timeout`` seconds for the whole look-up.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import dns.asyncresolver
import dns.flags
import dns.nameserver
import dns.resolver

from layang.config import Config

Servers = Sequence[tuple[str, int]]
"""Resolver addresses as (host, port), as ``Config.dns_resolvers`` gives them; empty: the
system's resolver."""

# A query unanswered this long is sent again (UDP may be lost), within the look-up's lifetime.
TRY_SECONDS = 2.0
# Queries in flight at once from one resolver in one event loop: a burst of new domains (a
# campaign's first batch) is spread out rather than flooding the resolver, which would drop
# some (each then waiting out a whole timeout).
MAX_QUERIES = 32
# EDNS0 with the DO bit, so that a validating resolver's AD bit comes back (RFC 7672 needs it);
# 1232 bytes is the payload size that avoids IP fragmentation (DNS flag day 2020).
EDNS_PAYLOAD = 1232


class PacedResolver(dns.asyncresolver.Resolver):
    """dnspython's asynchronous resolver with at most ``MAX_QUERIES`` look-ups in flight in
    each event loop it is used from."""

    _limit: asyncio.Semaphore | None = None
    _limit_loop: asyncio.AbstractEventLoop | None = None

    async def resolve(self, *args: Any, **kwargs: Any) -> dns.resolver.Answer:  # type: ignore[override]
        loop = asyncio.get_running_loop()
        if self._limit is None or self._limit_loop is not loop:
            self._limit, self._limit_loop = asyncio.Semaphore(MAX_QUERIES), loop
        async with self._limit:
            return await super().resolve(*args, **kwargs)


def _configure(
    resolver: dns.resolver.BaseResolver, servers: Servers, timeout: float, try_seconds: float
) -> None:
    if servers:
        resolver.nameservers = [dns.nameserver.Do53Nameserver(h, p) for h, p in servers]
    resolver.lifetime = timeout
    resolver.timeout = min(try_seconds, timeout)
    resolver.cache = None


def blocking_resolver(
    servers: Servers, *, timeout: float, try_seconds: float | None = None
) -> dns.resolver.Resolver:
    """A blocking resolver at ``servers`` (empty: the system's; raises
    ``dns.resolver.NoResolverConfiguration`` at the first look-up when there is none).
    ``timeout`` bounds a whole look-up, in seconds; ``try_seconds`` (default: ``timeout``)
    one query before it is sent again."""
    resolver = dns.resolver.Resolver(configure=not servers)
    _configure(resolver, servers, timeout, timeout if try_seconds is None else try_seconds)
    return resolver


def async_resolver(
    servers: Servers,
    *,
    timeout: float,
    try_seconds: float | None = None,
    paced: bool = False,
    dnssec: bool = False,
) -> dns.asyncresolver.Resolver:
    """An asynchronous resolver at ``servers`` (empty: the system's), as
    :func:`blocking_resolver`; ``paced``: at most ``MAX_QUERIES`` look-ups in flight per event
    loop; ``dnssec``: ask for DNSSEC data (EDNS0 DO bit), so that the answers of a validating
    resolver carry the AD bit."""
    resolver = (PacedResolver if paced else dns.asyncresolver.Resolver)(configure=not servers)
    _configure(resolver, servers, timeout, timeout if try_seconds is None else try_seconds)
    if dnssec:
        resolver.use_edns(0, dns.flags.DO, EDNS_PAYLOAD)
    return resolver


def mx_resolver(servers: Servers, timeout: float = 10.0) -> dns.asyncresolver.Resolver:
    """The resolver of MX and host address look-ups: paced, resent after ``TRY_SECONDS``."""
    return async_resolver(servers, timeout=timeout, try_seconds=TRY_SECONDS, paced=True)


def policy_resolver(config: Config, timeout: float = 5.0) -> dns.asyncresolver.Resolver:
    """The resolver of transport policies (MTA-STS TXT records and policy hosts, TLSA): at
    ``LAYANG_DNS_RESOLVER``, asking for DNSSEC data (for DANE), paced, resent after
    ``TRY_SECONDS``, ``timeout`` seconds in all."""
    return async_resolver(
        config.dns_resolvers, timeout=timeout, try_seconds=TRY_SECONDS, paced=True, dnssec=True
    )


def lookup_resolver(config: Config, timeout: float) -> dns.resolver.Resolver:
    """A blocking resolver at ``LAYANG_DNS_RESOLVER`` for one-off look-ups off the event loop
    (sending-domain checks, TLS-RPT policies and report hosts): one query per look-up."""
    return blocking_resolver(config.dns_resolvers, timeout=timeout)
