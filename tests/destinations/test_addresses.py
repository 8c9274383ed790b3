"""Hosts a recipient domain names are connected to only at public addresses (docs/delivery.md,
"Transport security"; the rules of docs/api.md "Webhooks"): MX hosts, the MTA-STS policy host
and TLS-RPT ``https:`` endpoints, unless ``LAYANG_MX_ALLOW_PRIVATE`` allows private networks
(which the suite's simulated internet, on loopback, needs: tests/conftest.py sets it)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import pytest

from layang.config import Config
from layang.destinations import tlsrpt
from layang.destinations.addresses import address_refusal
from layang.destinations.mx import MxFailure, MxResolver
from layang.destinations.shaping import Shaping
from layang.models import Event, Recipient
from tests.delivery.test_direct import Running, last_event, send_to, wait_until
from tests.destinations.test_tlsrpt import DOMAIN as REPORTED_DOMAIN
from tests.destinations.test_tlsrpt import record_the_day
from tests.destinations.transport import ENFORCE, MX1, World
from tests.support.dns_server import Zone
from tests.support.policy_server import PolicyServer
from tests.support.tls_pki import LocalCA

# Every kind of address a domain could point Layang at inside its own network.
INTERNAL = [
    "127.0.0.1",
    "127.0.0.2",
    "0.0.0.0",
    "::1",
    "::",
    "10.1.2.3",
    "172.16.0.1",
    "192.168.1.1",
    "100.64.0.1",
    "fd12:3456::1",
    "169.254.0.7",
    "fe80::1",
    "169.254.169.254",
    "fd00:ec2::254",
    "::ffff:7f00:1",  # IPv4-mapped 127.0.0.1
    "64:ff9b::a9fe:a9fe",  # NAT64 form of 169.254.169.254
]
NEVER = ["169.254.0.7", "169.254.169.254", "fd00:ec2::254", "64:ff9b::a9fe:a9fe"]
PUBLIC = "203.0.113.7"  # TEST-NET-3: refused too (not public)
REAL_PUBLIC = "8.8.8.8"  # never connected to: the tests below stop at the look-up


@pytest.mark.parametrize("address", INTERNAL)
def test_the_rule_refuses_every_internal_address_and_metadata_even_when_private_is_allowed(
    address: str,
) -> None:
    assert address_refusal(address, False) is not None
    assert (address_refusal(address, True) is not None) is (address in NEVER)
    assert address_refusal(REAL_PUBLIC, False) is None
    assert address_refusal(PUBLIC, False) is not None


# -- MX hosts -----------------------------------------------------------------------------


def resolve(resolver: MxResolver, domain: str):
    return asyncio.run(resolver.resolve(domain))


@pytest.fixture
def strict(dns_zone: Zone) -> MxResolver:
    return MxResolver(dns_zone.address, Shaping.load(None), timeout=2.0)


@pytest.mark.parametrize("address", INTERNAL)
def test_an_mx_host_on_an_internal_address_is_not_used(
    dns_zone: Zone, strict: MxResolver, address: str
) -> None:
    dns_zone.add_address("mx.inside.example", address)
    dns_zone.add_mx("inside.example", 10, "mx.inside.example")
    dns_zone.add_address("implicit.example", address)  # no MX: its own address
    for domain, host in (("inside.example", "mx.inside.example"), ("implicit.example", None)):
        with pytest.raises(MxFailure) as raised:
            resolve(strict, domain)
        failure = raised.value
        assert (failure.kind, failure.code) == ("temporary", 451)  # a Delay, as for no address
        named = host or domain
        assert failure.reply == (
            f"451 4.4.4 No usable mail server for {domain}: {named} resolves to a private "
            "address only; will retry"
        )
        assert address not in failure.reply


def test_only_the_public_hosts_and_addresses_are_kept(dns_zone: Zone, strict: MxResolver) -> None:
    dns_zone.add_address("mx1.mixed.example", "10.0.0.5")
    dns_zone.add_a("mx2.mixed.example", "127.0.0.1", REAL_PUBLIC)
    dns_zone.add_mx("mixed.example", 10, "mx1.mixed.example")
    dns_zone.add_mx("mixed.example", 20, "mx2.mixed.example")
    destination = resolve(strict, "mixed.example")
    assert [(h.name, h.addresses) for h in destination.hosts] == [
        ("mx2.mixed.example", (REAL_PUBLIC,))
    ]


def test_private_networks_when_allowed_but_never_metadata(dns_zone: Zone) -> None:
    allowed = MxResolver(dns_zone.address, Shaping.load(None), timeout=2.0, allow_private=True)
    dns_zone.add_address("private.example", "10.0.0.5")
    dns_zone.add_address("metadata.example", "169.254.169.254")
    assert resolve(allowed, "private.example").hosts[0].addresses == ("10.0.0.5",)
    with pytest.raises(MxFailure):
        resolve(allowed, "metadata.example")


@pytest.mark.parametrize("ipv6", [False, True])
def test_a_worker_never_connects_to_an_internal_mx_and_shows_its_own_words(
    client, auth, config: Config, internet, ipv6: bool
) -> None:
    mx = internet.server("mx.inside.example", ipv6=ipv6)  # 127.0.0.x or ::1
    internet.domain("inside.example", (10, "mx.inside.example"))
    strict = internet.configure(replace(config, mx_allow_private=False, retry_base_seconds=60))
    send_to(client, auth, ["ana@inside.example"])
    running = Running(strict)
    try:
        wait_until(lambda: Recipient.get().status != "Injection")
    finally:
        running.stop()
    status, detail = last_event("ana@inside.example")
    assert status == "Delay", detail
    assert detail["reply"].startswith("451 4.4.4 No usable mail server for inside.example")
    assert mx.peers == [] and mx.attempts == []  # not even connected to
    assert Event.select().where(Event.status == "Delivery").count() == 0


# -- the MTA-STS policy host ----------------------------------------------------------------


def test_the_policy_is_not_fetched_from_an_internal_address(world: World) -> None:
    world.publish_sts(ENFORCE)  # mta-sts.bank.test is on a loopback address
    policy = world.policy(MX1, allow_private=False)
    assert world.policy_server.requests == 0
    assert policy.kind == "opportunistic" and policy.sts is None
    result_type, reason = policy.fetch_failure
    assert result_type == "sts-policy-fetch-error"
    assert reason == "not fetched: mta-sts.bank.test resolves to a private address"
    assert world.policy(MX1).kind == "mta-sts"  # allowed (as the suite's config says)
    assert world.policy_server.requests == 1


# -- TLS-RPT https: endpoints -------------------------------------------------------------


@pytest.fixture
def report_server(dns_zone: Zone, tmp_path):
    ca = LocalCA(tmp_path / "ca")
    server = PolicyServer(ca.server_context("reports.bank.test"))
    dns_zone.add_address("reports.bank.test", server.address)
    yield server, ca
    server.stop()


@pytest.mark.parametrize(
    "rua",
    [
        "https://reports.bank.test/tlsrpt",  # a name on a loopback address
        "https://127.0.0.1:8443/admin",
        "https://[::1]/r",
        "https://169.254.169.254/latest/meta-data",
        "https://2130706433/r",  # 127.0.0.1 in a numeric form
        "https://user:pw@reports.bank.test/r",
    ],
)
def test_a_report_is_never_posted_to_an_internal_endpoint(
    app, config: Config, dns_zone: Zone, report_server, rua: str
) -> None:
    server, ca = report_server
    dns_zone.add_txt(f"_smtp._tls.{REPORTED_DOMAIN}", f"v=TLSRPTv1; rua={rua}")
    record_the_day()
    strict = replace(
        config,
        dns_resolver=dns_zone.address,
        tlsrpt_from="tlsrpt@layang.test",
        tls_cafile=str(ca.cafile),
        mx_allow_private=False,
    )
    (outcome, _) = tlsrpt.send_reports(strict, "2026-11-24")
    assert outcome.status == "failed", outcome
    assert server.posted == []
    assert server.address not in outcome.detail
    assert json.dumps(outcome.detail)  # says why, in Layang's words
