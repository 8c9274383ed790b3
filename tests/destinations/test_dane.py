"""DANE (RFC 7672) as sessions meet it: TLSA records of a DNSSEC-authenticated zone (the
dnslib zone sets the AD bit), DANE-EE and DANE-TA matching, and no DANE without a validating
resolver."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from layang.config import Config
from layang.destinations.policy import (
    TlsSettings,
)
from layang.models import Event
from tests.delivery import test_direct_tls as direct_tls
from tests.delivery.test_direct_tls import DOMAIN, deliver_one
from tests.destinations.transport import (
    ENFORCE,
    MX1,
    MX2,
    World,
    mx_server,
    run_session,
    server_context,
    tlsa_data,
)
from tests.support.upstream import make_self_signed_cert

mx_config = direct_tls.mx_config  # fixture


@pytest.mark.parametrize(("selector", "matching"), [(0, 0), (1, 1), (0, 2), (1, 2)])
def test_dane_ee_match_delivers_even_with_a_self_signed_certificate(
    world: World, tmp_path: Path, selector: int, matching: int
) -> None:
    world.zone.authenticated = True
    certfile, keyfile = make_self_signed_cert(tmp_path / "dane", "unrelated.name")
    world.zone.add_tlsa(
        f"_25._tcp.{MX1}", 3, selector, matching, tlsa_data(certfile, selector, matching)
    )
    world.publish_sts(ENFORCE)  # DANE outranks it
    policy = world.policy(MX1, dane=True)
    assert (policy.kind, policy.mode) == ("dane", "enforce")
    assert policy.report_type == "tlsa"
    with mx_server(server_context(certfile, keyfile)) as mx:
        check = run_session(world, policy, MX1, mx.port)
        assert check.ok, check.reply
        assert check.tls["policy"] == "dane" and check.tls["verified"] is True
        assert len(mx.wait_for(1)) == 1


def test_dane_ee_mismatch_is_refused(world: World, tmp_path: Path) -> None:
    world.zone.authenticated = True
    published, _ = make_self_signed_cert(tmp_path / "published", MX1)
    world.zone.add_tlsa(f"_25._tcp.{MX1}", 3, 1, 1, tlsa_data(published, 1, 1))
    policy = world.policy(MX1, dane=True)
    with mx_server(world.ca.server_context(MX1)) as mx:  # valid for WebPKI, not for DANE
        check = run_session(world, policy, MX1, mx.port)
        assert not check.ok and check.failure_type == "tlsa-invalid"
        assert check.reply == (
            "451 4.7.5 the certificate of mx1.bank.test matches none of its TLSA records "
            "(DANE of bank.test)"
        )
        assert mx.received == []


def test_dane_ta_matches_the_issuing_ca(world: World) -> None:
    world.zone.authenticated = True
    world.zone.add_tlsa(f"_25._tcp.{MX1}", 2, 0, 1, tlsa_data(world.ca.cafile, 0, 1))
    policy = world.policy(MX1, dane=True, cafile="")
    certfile, keyfile, _ = world.ca.issue(MX1)
    chained = certfile.read_bytes() + world.ca.cafile.read_bytes()
    certfile.write_bytes(chained)  # a DANE-TA server sends its anchor in the chain
    with mx_server(server_context(certfile, keyfile)) as mx:
        check = run_session(world, policy, MX1, mx.port)
        assert check.ok, check.reply
        assert check.tls["verified"] is True


def test_dane_needs_the_ad_bit(world: World, tmp_path: Path) -> None:
    published, _ = make_self_signed_cert(tmp_path / "published", MX1)
    world.zone.add_tlsa(f"_25._tcp.{MX1}", 3, 1, 1, tlsa_data(published, 1, 1))
    assert world.policy(MX1, dane=True).kind == "opportunistic"  # insecure: DANE ignored
    world.zone.authenticated = True
    assert world.policy(MX1, dane=False).kind == "opportunistic"  # not opted in
    assert world.policy(MX1, dane=True).kind == "dane"


def test_a_secure_answer_without_tlsa_is_opportunistic(world: World) -> None:
    world.zone.authenticated = True
    policy = world.policy(MX1, dane=True)
    assert policy.kind == "opportunistic" and policy.tlsa == {}


def test_dane_needs_a_configured_resolver(config: Config) -> None:
    assert not TlsSettings.from_config(replace(config, dane=True)).dane
    assert TlsSettings.from_config(replace(config, dane=True, dns_resolver="127.0.0.1:53")).dane


# -- a TLSA look-up that fails in a signed zone (RFC 7672 section 2.2) -------------------------


def fail(zone, name: str, how: str) -> None:
    (zone.servfail if how == "SERVFAIL" else zone.silent).add(name)


@pytest.mark.parametrize("how", ["SERVFAIL", "timeout"])
def test_a_host_whose_tlsa_look_up_fails_is_not_used(world: World, how: str) -> None:
    world.zone.authenticated = True
    fail(world.zone, f"_25._tcp.{MX1}", how)
    policy = world.policy(MX1, MX2, dane=True)
    assert not policy.allows(MX1) and policy.allows(MX2)
    assert f"_25._tcp.{MX1}" in policy.host_failures[MX1]
    with mx_server(None) as mx:  # plaintext: what a downgrade would have used
        check = run_session(world, policy, MX1, mx.port)
        assert not check.ok and check.failure_type == "dnssec-invalid"
        assert check.reply.startswith("451 4.7.5 TLSA look-up of _25._tcp.mx1.bank.test")
        assert mx.received == []


@pytest.mark.parametrize("how", ["SERVFAIL", "timeout"])
def test_with_every_host_unusable_the_recipient_waits_with_the_reason(
    client, auth, internet, mx_config, how
):
    internet.zone.authenticated = True
    fail(internet.zone, f"_{internet.port}._tcp.mx1.{DOMAIN}", how)
    internet.domain(DOMAIN, (10, f"mx1.{DOMAIN}"))
    mx = internet.server(f"mx1.{DOMAIN}")  # offers no STARTTLS
    status, detail = deliver_one(client, auth, replace(mx_config, dane=True))
    assert status == "Delay", detail
    assert detail["reply"].startswith("451 4.7.5 no MX host of bank.test may be used"), detail
    assert f"TLSA look-up of _{internet.port}._tcp.mx1.{DOMAIN}" in detail["reply"]
    assert mx.received == [] and mx.attempts == []  # not even connected to
    assert Event.select().where(Event.status == "Delivery").count() == 0


def test_the_other_hosts_still_take_the_mail(client, auth, internet, mx_config):
    internet.zone.authenticated = True
    fail(internet.zone, f"_{internet.port}._tcp.mx1.{DOMAIN}", "SERVFAIL")
    internet.domain(DOMAIN, (10, f"mx1.{DOMAIN}"), (20, f"mx2.{DOMAIN}"))
    first = internet.server(f"mx1.{DOMAIN}")
    second = internet.server(f"mx2.{DOMAIN}")  # a secure answer with no TLSA: opportunistic
    status, detail = deliver_one(client, auth, replace(mx_config, dane=True))
    assert status == "Delivery", detail
    assert detail["host"] == f"mx2.{DOMAIN}"
    assert first.attempts == [] and len(second.received) == 1
