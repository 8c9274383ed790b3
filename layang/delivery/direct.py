"""Direct to MX: the transport of the ``mx:`` route, which opens sessions to a recipient's site.

The engine resolves each recipient domain (:mod:`layang.destinations.mx`) to its site and MX hosts,
looks up its transport policy, queues the copy on the site, and asks :class:`MxTransport` for
sessions (:func:`open_session`): the hosts in the order RFC 5321 gives (equal preferences
shuffled), each address of a host in turn, the next one after a refused connection, a timeout
or a greeting that is not 220. Sessions leave from the configured source addresses in turn,
each announcing its own EHLO name. The site's shared state (:mod:`layang.destinations.sites`)
decides whether a session may start at all.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dns.asyncresolver

from layang.config import Config
from layang.delivery.smtp import SmtpSession
from layang.delivery.transports import Refused
from layang.destinations import policy as tls_policy
from layang.destinations.certificates import ssl_context
from layang.destinations.dns import policy_resolver
from layang.destinations.mx import Destination, MxHost, MxResolver
from layang.destinations.policy import TlsSettings, TransportPolicy
from layang.destinations.result_types import DNSSEC_INVALID
from layang.destinations.shaping import Shaping
from layang.mail.message import REQUIRETLS

CONNECT_TIMEOUT = 30.0
REPLY_TIMEOUT = 120.0


@dataclass(frozen=True)
class Source:
    """An address sessions leave from (None: the system's choice) and its EHLO name."""

    address: str | None
    ehlo_name: str


class MxTransport:
    """The transport of the ``mx:`` route: the shaping rules, the source addresses, the MX
    port, the TLS settings; opens sessions to the MX hosts of a job's resolved domain."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.shaping = Shaping.load(config.shaping_file or None)
        self.port = config.mx_port
        ehlo = config.helo_name
        self.sources = tuple(Source(s.address, s.ehlo_name) for s in config.sources) or (
            Source(None, ehlo),
        )
        self._turn = itertools.cycle(self.sources)
        # LAYANG_SOURCE_POOLS: each stream leaves from its own addresses (of the sources above;
        # an address not among them gets the default EHLO name).
        names = {source.address: source.ehlo_name for source in self.sources}
        self.pools = {
            stream: itertools.cycle([Source(a, names.get(a, ehlo)) for a in addresses])
            for stream, addresses in config.source_pools
            if addresses
        }
        self.resolver: MxResolver | None = None  # made on the engine's loop
        self._dns: dns.asyncresolver.Resolver | None = None
        self.tls_settings = TlsSettings.from_config(config)
        # STARTTLS whenever offered; the certificate is checked afterwards, by the policy.
        self.tls_context = ssl_context(False, config.tls_cafile or None)

    def __repr__(self) -> str:
        return f"<MxTransport port={self.port} sources={len(self.sources)}>"

    def resolver_for_loop(self) -> MxResolver:
        if self.resolver is None:
            self.resolver = MxResolver.from_config(self.config, self.shaping)
        return self.resolver

    def dns_resolver(self) -> dns.asyncresolver.Resolver:
        """The resolver of transport policies (asks for DNSSEC data, for DANE)."""
        if self._dns is None:
            self._dns = policy_resolver(self.config)
        return self._dns

    def next_source(self, stream: str = "transactional") -> Source:
        """The address the next session leaves from: the stream's pool in turn, else every
        source address in turn."""
        pool = self.pools.get(stream)
        return next(pool) if pool is not None else next(self._turn)

    async def open(self, job: Any) -> SmtpSession:
        """A session to one of the MX hosts of ``job.mx`` (a resolved
        :class:`~layang.destinations.mx.Destination`) that meets ``job.policy`` (its domain's
        :class:`~layang.destinations.policy.TransportPolicy`); raises the last
        :class:`Refused` when none does. What each session's TLS showed, for TLS-RPT (RFC
        8460), is left in ``reports`` of the session or the refusal (see :class:`TlsReport`),
        for the caller to record: this runs on the event loop, recording does not."""
        resolved: Destination = job.mx
        policy: TransportPolicy = job.policy or TransportPolicy(
            resolved.domain, mx_hosts=tuple(h.name for h in resolved.hosts)
        )
        reports: list[TlsReport] = []

        def check(smtp: SmtpSession) -> str | None:
            outcome = tls_policy.check_session(
                policy,
                smtp.host,
                None if smtp.closed else smtp.ssl_object,
                smtp.offered_starttls,
                error=smtp.tls_error,
                cafile=self.config.tls_cafile or None,
            )
            smtp.tls_info = outcome.tls
            # Every session is counted, whatever its TLS: the Security page shows them all
            # (plaintext ones as "no TLS"); only TLS-RPT reports are subject to LAYANG_TLSRPT.
            reports.append(
                TlsReport(
                    resolved.domain,
                    policy,
                    smtp.host,
                    outcome.ok and outcome.succeeded,
                    outcome.failure_type,
                    outcome.failure,
                )
            )
            return None if outcome.ok else outcome.reply

        for host, reason in policy.host_failures.items():
            # A host left out is a session that could not be had.
            reports.append(TlsReport(resolved.domain, policy, host, False, DNSSEC_INVALID, reason))
        if not any(policy.allows(host.name) for host in resolved.hosts):
            # Said in the policy's words, and as a TLS refusal: it says nothing of the site.
            refused = Refused("tls", 451, f"451 4.7.5 {policy.no_host_reason()}")
            refused.reports = reports
            raise refused
        try:
            session = await open_session(
                self,
                resolved,
                context=self.tls_context,
                hosts=policy.mx_hosts,
                plaintext_fallback=not policy.requires_verified_tls,
                check=check,
                stream=job.stream,
            )
        except Refused as refused:
            refused.reports = reports
            raise
        session.reports = reports
        return session

    def close(self) -> None:
        """Nothing to release: the engine owns the sessions."""

    def refusal(self, session: SmtpSession, job: Any) -> str | None:
        """Why a REQUIRETLS message may not go over ``session`` (RFC 8689: verified TLS, by
        MTA-STS, DANE or the MX name's certificate, to a server offering REQUIRETLS)."""
        policy = job.policy or TransportPolicy(session.host, mx_hosts=(session.host,))
        outcome = tls_policy.check_session(
            policy,
            session.host,
            session.ssl_object,
            session.offered_starttls,
            requirement=REQUIRETLS,
            requiretls_advertised=session.has("REQUIRETLS"),
            cafile=self.config.tls_cafile or None,
        )
        return None if outcome.ok else outcome.reply


@dataclass(frozen=True)
class TlsReport:
    """What one session's TLS showed, as TLS-RPT counts it (``tlsrpt.record_session``'s
    arguments)."""

    domain: str
    policy: TransportPolicy
    host: str
    succeeded: bool
    failure_type: str | None
    failure: str | None


_OPPORTUNISTIC = ssl_context(False)


async def open_session(
    route: MxTransport,
    destination: Destination,
    *,
    tls: str = "may",
    context: ssl.SSLContext | None = None,
    hosts: tuple[str, ...] | None = None,
    plaintext_fallback: bool = True,
    check: Callable[[SmtpSession], str | None] | None = None,
    stream: str = "transactional",
) -> SmtpSession:
    """A session to the first MX host of ``destination`` that takes one; raises the last
    :class:`Refused` when none does. ``hosts`` limits the MX names tried (a policy's);
    ``check`` looks at each session set up (its TLS) and returns why it may not carry the
    mail, or None (then it is used)."""
    allowed = None if hosts is None else {h.lower().rstrip(".") for h in hosts}
    last: Refused | None = None
    for host in _in_order(destination.hosts):
        if allowed is not None and host.name.lower().rstrip(".") not in allowed:
            continue
        for address in host.addresses:
            source = route.next_source(stream)
            session = SmtpSession(
                host.name,
                route.port,
                address=address,
                helo_name=source.ehlo_name,
                tls=tls,
                context=context or _OPPORTUNISTIC,
                server_hostname=host.name,
                timeout=REPLY_TIMEOUT,
                connect_timeout=CONNECT_TIMEOUT,
                source_address=_family_match(source.address, address),
                plaintext_fallback=plaintext_fallback,
            )
            try:
                await session.open()
            except asyncio.CancelledError:  # the set-up's deadline: leave no connection behind
                session.abort()
                raise
            except Refused as refused:
                if refused.kind == "tls" and check is not None:
                    refusal = check(session)
                    if refusal is not None:
                        refused = Refused("tls", 451, refusal)
                last = refused
                continue
            if check is not None:
                refusal = check(session)
                if refusal is not None:
                    await session.close()
                    last = Refused("tls", 451, refusal)
                    continue
            return session
    if last is None:
        # The domain's own policy ruled out every host: nothing was said of the hosts.
        raise Refused("policy", 0, f"no MX host of {destination.domain} may be tried")
    raise last


def _in_order(hosts: tuple[MxHost, ...]) -> list[MxHost]:
    """``hosts`` by preference, equal preferences shuffled afresh for each session, so that
    every host of an equal group gets its share (RFC 5321 section 5.1)."""
    groups: dict[int, list[MxHost]] = {}
    for host in hosts:
        groups.setdefault(host.preference, []).append(host)
    ordered: list[MxHost] = []
    for preference in sorted(groups):
        group = groups[preference]
        random.shuffle(group)
        ordered.extend(group)
    return ordered


def _family_match(source: str | None, address: str) -> str | None:
    """``source`` if it can reach ``address`` (same IP version), else the system's choice."""
    if source is None:
        return None
    return source if (":" in source) == (":" in address) else None
