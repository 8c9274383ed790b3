"""The resolver factory: every kind of look-up the service makes (MX and host addresses, the
transport policies' TXT records, TLS-RPT's TXT record, the sending-domain checks' TXT, MX and
PTR, webhook hosts) asks the servers of LAYANG_DNS_RESOLVER, here the suite's dnslib server,
which alone knows the ``.test`` names."""

from __future__ import annotations

import asyncio
import ipaddress
from dataclasses import replace

import dns.asyncresolver
import dns.flags
import pytest

from layang.config import Config
from layang.destinations import tlsrpt
from layang.destinations.dns import (
    MAX_QUERIES,
    TRY_SECONDS,
    async_resolver,
    blocking_resolver,
    mx_resolver,
    policy_resolver,
)
from layang.destinations.mx import MxHost, MxResolver
from layang.destinations.shaping import Shaping
from layang.domain.dns_lookup import DnsLookup
from layang.webhooks.wire import Resolver as WebhookResolver
from tests.support.dns_server import Zone

DOMAIN = "rcpt.test"
MX = "mx.rcpt.test"


@pytest.fixture
def configured(config: Config, dns_zone: Zone) -> Config:
    dns_zone.add_mx(DOMAIN, 10, MX)
    dns_zone.add_a(MX, "192.0.2.7")
    dns_zone.add_ptr("192.0.2.7", MX)
    dns_zone.add_txt(DOMAIN, "v=spf1 ip4:192.0.2.7 -all")
    dns_zone.add_txt(f"_smtp._tls.{DOMAIN}", "v=TLSRPTv1; rua=mailto:tls@rcpt.test")
    dns_zone.add_txt(f"_mta-sts.{DOMAIN}", "v=STSv1; id=20261129")
    dns_zone.add_a(f"hooks.{DOMAIN}", "192.0.2.8")
    return replace(config, dns_resolver=dns_zone.address)


def test_every_look_up_asks_the_configured_resolver(configured: Config, dns_zone: Zone):
    lookup = DnsLookup(configured)
    assert lookup.mx(DOMAIN).values == (f"10 {MX}",)
    assert lookup.txt(DOMAIN).values == ("v=spf1 ip4:192.0.2.7 -all",)
    assert lookup.ptr("192.0.2.7").values == (MX,)

    mx = MxResolver.from_config(configured, Shaping.load(None))
    destination = asyncio.run(mx.resolve(DOMAIN))
    assert destination.hosts == (MxHost(MX, 10, ("192.0.2.7",)),)

    assert tlsrpt.reporting_addresses(DOMAIN, configured) == ["mailto:tls@rcpt.test"]

    async def policy_record() -> list[str]:
        answer = await policy_resolver(configured).resolve(f"_mta-sts.{DOMAIN}", "TXT")
        return [b"".join(r.strings).decode() for r in answer]

    assert asyncio.run(policy_record()) == ["v=STSv1; id=20261129"]

    hooks = WebhookResolver(configured.dns_resolvers)
    addresses = asyncio.run(hooks.addresses(f"hooks.{DOMAIN}", 443))
    assert addresses == [ipaddress.ip_address("192.0.2.8")]

    asked = {
        rtype for name, rtype in dns_zone.queries if name.endswith(DOMAIN) or "in-addr" in name
    }
    assert asked == {"MX", "A", "AAAA", "TXT", "PTR"}


def test_policy_look_ups_ask_for_dnssec_data_and_others_do_not(configured: Config):
    # Only DANE needs the AD bit; asking for DNSSEC data elsewhere only makes answers larger.
    assert policy_resolver(configured).ednsflags & dns.flags.DO
    assert not mx_resolver(configured.dns_resolvers).ednsflags & dns.flags.DO
    assert not blocking_resolver(configured.dns_resolvers, timeout=1).ednsflags & dns.flags.DO


def test_a_lost_query_is_sent_again_within_the_look_ups_time(configured: Config):
    # UDP may be lost: MX and policy look-ups send a query again after TRY_SECONDS rather than
    # waiting out the whole look-up; a one-off look-up asks once for its whole time.
    for resolver in (mx_resolver(configured.dns_resolvers), policy_resolver(configured)):
        assert resolver.timeout == TRY_SECONDS < resolver.lifetime
    one_off = blocking_resolver(configured.dns_resolvers, timeout=3.0)
    assert one_off.timeout == one_off.lifetime == 3.0
    assert [(n.address, n.port) for n in one_off.nameservers] == list(configured.dns_resolvers)


def test_a_paced_resolver_keeps_at_most_max_queries_in_flight(dns_zone: Zone):
    # The silent name is never answered: every look-up that got its turn stays in flight.
    dns_zone.silent.add("slow.test")
    host, _, port = dns_zone.address.rpartition(":")
    servers = [(host, int(port))]

    async def burst(resolver) -> int:
        dns_zone.queries.clear()
        asking = asyncio.gather(
            *(resolver.resolve("slow.test", "A") for _ in range(MAX_QUERIES + 8)),
            return_exceptions=True,
        )
        await asyncio.sleep(0.5)  # well within the look-ups' time: none has given up
        asking.cancel()
        await asyncio.sleep(0.2)  # what was sent has reached the server
        return len(dns_zone.queries)

    assert asyncio.run(burst(async_resolver(servers, timeout=5.0, paced=True))) == MAX_QUERIES
    assert asyncio.run(burst(async_resolver(servers, timeout=5.0))) == MAX_QUERIES + 8


def test_policy_look_ups_are_paced_and_resent(monkeypatch):
    # A campaign's first batch asks about hundreds of new domains at once: at most MAX_QUERIES
    # go out together, and a lost query is sent again after TRY_SECONDS, not after the whole
    # look-up's time (a flooded resolver drops queries; each once cost 5 s of that domain's
    # mail).
    resolver = policy_resolver(Config(secret_key="x", dns_resolver="127.0.0.1:53"))
    assert resolver.timeout == TRY_SECONDS < resolver.lifetime == 5.0
    in_flight = most = 0

    async def slow_answer(self, *args, **kwargs):
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await asyncio.sleep(0.01)
        in_flight -= 1
        return None

    monkeypatch.setattr(dns.asyncresolver.Resolver, "resolve", slow_answer)

    async def burst():
        await asyncio.gather(
            *(resolver.resolve(f"_mta-sts.d{n}.example", "TXT") for n in range(200))
        )

    asyncio.run(burst())
    assert most == MAX_QUERIES
    asyncio.run(burst())  # a second event loop gets its own limit
    assert most == MAX_QUERIES
