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
from tests.destinations.transport import (
    ENFORCE,
    MX1,
    World,
    mx_server,
    run_session,
    server_context,
    tlsa_data,
)
from tests.support.upstream import make_self_signed_cert


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
