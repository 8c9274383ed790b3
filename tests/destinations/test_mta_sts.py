"""MTA-STS (RFC 8461) as sessions meet it: the policy looked up, fetched over HTTPS, cached and
refreshed, and enforced (or only reported in testing mode) with real MX servers, including one
behind a STARTTLS-stripping proxy; the MX pattern matching of RFC 8461 section 4.1."""

from __future__ import annotations

from pathlib import Path

import pytest

from layang.destinations.mta_sts import mx_matches
from layang.mail.message import TLS_OPTIONAL
from tests.conftest import BACKENDS
from tests.destinations.transport import (
    DOMAIN,
    ENFORCE,
    MX1,
    World,
    mx_server,
    run_session,
)
from tests.support.stripping_proxy import StrippingProxy
from tests.support.upstream import make_self_signed_cert, server_tls_context


def test_enforce_with_a_valid_certificate_delivers_under_mta_sts(world: World) -> None:
    world.publish_sts(ENFORCE)
    policy = world.policy(MX1)
    assert (policy.kind, policy.mode, policy.mx_hosts) == ("mta-sts", "enforce", (MX1,))
    assert policy.requires_verified_tls
    assert world.policy_server.hosts == [f"mta-sts.{DOMAIN}"]
    with mx_server(world.ca.server_context(MX1)) as mx:
        check = run_session(world, policy, MX1, mx.port)
        assert check.ok and check.failure_type is None
        assert check.tls["policy"] == "mta-sts" and check.tls["verified"] is True
        assert check.tls["version"].startswith("TLS") and check.tls["cipher"]
        assert b"The PIN is 4711." in mx.wait_for(1)[0].data


@pytest.mark.parametrize("certificate", ["wrong name", "self-signed", "expired"])
def test_enforce_refuses_a_certificate_not_valid_for_the_mx(
    world: World, certificate: str, tmp_path: Path
) -> None:
    world.publish_sts(ENFORCE)
    policy = world.policy(MX1)
    if certificate == "wrong name":
        context = world.ca.server_context("mx.elsewhere.test")
    elif certificate == "expired":
        context = world.ca.server_context(MX1, expired=True)
    else:
        context = server_tls_context(*make_self_signed_cert(tmp_path / "self", MX1))
    with mx_server(context) as mx:
        check = run_session(world, policy, MX1, mx.port)
        assert not check.ok and not check.bounce
        assert check.reply.startswith("451 4.7.5 ")
        assert "MTA-STS policy of bank.test, mode enforce" in check.reply
        expected = {
            "wrong name": ("certificate-host-mismatch", "not valid for that name"),
            "expired": ("certificate-expired", "expired"),
            "self-signed": ("certificate-not-trusted", "not trusted"),
        }[certificate]
        assert check.failure_type == expected[0] and expected[1] in check.reply
        assert check.tls["verified"] is False
        assert [verb for verb, _ in mx.attempts if verb == "MAIL"] == []
        assert mx.received == []


def test_enforce_refuses_a_session_whose_starttls_was_stripped(world: World) -> None:
    world.publish_sts(ENFORCE)
    policy = world.policy(MX1)
    with mx_server(world.ca.server_context(MX1)) as mx:
        proxy = StrippingProxy(("127.0.0.1", mx.port))
        try:
            check = run_session(world, policy, MX1, proxy.port)
        finally:
            proxy.stop()
        assert not check.ok
        assert check.failure_type == "starttls-not-supported"
        assert check.reply == (
            "451 4.7.5 mx1.bank.test does not offer STARTTLS "
            "(MTA-STS policy of bank.test, mode enforce)"
        )
        assert check.tls == {"version": None, "cipher": None, "verified": False, "policy": "none"}
        assert b"MAIL FROM" not in bytes(proxy.from_client)
        assert b"PIN" not in bytes(proxy.from_client)
        assert mx.received == []


def test_without_a_policy_a_stripped_session_goes_in_plaintext(world: World) -> None:
    policy = world.policy(MX1)
    assert (policy.kind, policy.mode) == ("opportunistic", "none")
    with mx_server(world.ca.server_context(MX1)) as mx:
        proxy = StrippingProxy(("127.0.0.1", mx.port))
        try:
            check = run_session(world, policy, MX1, proxy.port)
        finally:
            proxy.stop()
        assert check.ok and check.tls["policy"] == "none"
        assert b"PIN" in bytes(proxy.from_client)


def test_opportunistic_tls_records_an_unverified_certificate(world: World, tmp_path: Path) -> None:
    policy = world.policy(MX1)
    context = server_tls_context(*make_self_signed_cert(tmp_path / "self", MX1))
    with mx_server(context) as mx:
        check = run_session(world, policy, MX1, mx.port)
        assert check.ok and check.failure_type is None
        assert check.tls["policy"] == "opportunistic" and check.tls["verified"] is False
        assert len(mx.wait_for(1)) == 1


def test_testing_mode_delivers_and_records_the_failure(world: World) -> None:
    world.publish_sts(ENFORCE.replace("enforce", "testing"))
    policy = world.policy(MX1)
    assert (policy.kind, policy.mode) == ("mta-sts", "testing")
    assert not policy.requires_verified_tls
    with mx_server(world.ca.server_context("mx.elsewhere.test")) as mx:
        check = run_session(world, policy, MX1, mx.port)
        assert check.ok
        assert check.tls["policy"] == "mta-sts" and check.tls["verified"] is False
        assert "not valid for that name" in check.tls["failure"]
        assert check.failure_type == "certificate-host-mismatch"
        assert len(mx.wait_for(1)) == 1


def test_tls_required_no_relaxes_an_enforced_policy(world: World) -> None:
    world.publish_sts(ENFORCE)
    policy = world.policy(MX1)
    with mx_server(world.ca.server_context("mx.elsewhere.test")) as mx:
        check = run_session(world, policy, MX1, mx.port, requirement=TLS_OPTIONAL)
        assert check.ok and check.tls["failure"]
        assert len(mx.wait_for(1)) == 1


def test_mx_hosts_not_matching_the_policy_are_skipped(world: World) -> None:
    world.publish_sts(ENFORCE)
    policy = world.policy("mx0.other.test", MX1, "a.backup.test", "a.b.backup.test")
    assert policy.mx_hosts == (MX1, "a.backup.test")
    assert policy.skipped == ("mx0.other.test", "a.b.backup.test")
    assert not policy.allows("mx0.other.test")
    with mx_server(world.ca.server_context("mx0.other.test")) as mx:
        check = run_session(world, policy, "mx0.other.test", mx.port)
        assert not check.ok and "does not match the MTA-STS policy" in check.reply
        assert mx.connections == 1 and mx.received == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_policy_is_cached_and_refreshed_when_the_id_changes(world: World) -> None:
    world.publish_sts(ENFORCE)
    assert world.policy().mode == "enforce"
    world.policy_server.serve(ENFORCE.replace("enforce", "testing"))
    assert world.policy().mode == "enforce"  # cached for max_age
    assert world.policy_server.requests == 1
    world.publish_sts(ENFORCE.replace("enforce", "testing"), record_id="20261126")
    assert world.policy().mode == "testing"
    assert world.policy_server.requests == 2
    # The TXT record gone: the cached policy still holds until it expires.
    world.zone.remove(f"_mta-sts.{DOMAIN}")
    assert world.policy().mode == "testing"


def test_an_expired_cached_policy_is_fetched_again(world: World) -> None:
    world.publish_sts(ENFORCE.replace("max_age: 86400", "max_age: 0"))
    assert world.policy().mode == "enforce"
    world.policy_server.serve(ENFORCE.replace("enforce", "testing"))
    assert world.policy().mode == "testing"
    assert world.policy_server.requests == 2


@pytest.mark.parametrize(
    ("serve", "result_type"),
    [
        ({"status": 301, "headers": {"Location": "https://evil.test/"}}, "sts-policy-fetch-error"),
        ({"status": 404}, "sts-policy-fetch-error"),
        ({"content_type": "text/html"}, "sts-policy-invalid"),
        ({"body": b"version: STSv1\nmode: enforce\n" + b"x" * 70000}, "sts-policy-invalid"),
        ({"body": b"version: STSv1\nmode: sometimes\nmx: a\nmax_age: 1\n"}, "sts-policy-invalid"),
    ],
)
def test_a_policy_that_cannot_be_fetched_is_no_policy(
    world: World, serve: dict[str, object], result_type: str
) -> None:
    world.publish_sts(ENFORCE)
    world.policy_server.serve(ENFORCE, **serve)
    policy = world.policy(MX1)
    assert policy.kind == "opportunistic" and policy.mx_hosts == (MX1,)
    assert policy.fetch_failure[0] == result_type
    assert world.policy_server.requests == 1  # a redirect is not followed


def test_the_policy_host_certificate_must_be_trusted(world: World) -> None:
    world.publish_sts(ENFORCE)
    policy = world.policy(MX1, cafile="")  # without LAYANG_TLS_CAFILE the local CA is unknown
    assert policy.kind == "opportunistic"
    assert policy.fetch_failure[0] == "sts-webpki-invalid"
    assert "certificate" in policy.fetch_failure[1]


def test_a_fetch_failure_keeps_the_cached_policy(world: World) -> None:
    world.publish_sts(ENFORCE)
    assert world.policy().mode == "enforce"
    world.publish_sts(ENFORCE, record_id="20261126")
    world.policy_server.serve("", status=500)
    policy = world.policy()
    assert (policy.kind, policy.mode) == ("mta-sts", "enforce")


def test_mx_pattern_matching() -> None:
    assert mx_matches("*.example.net", "mx1.example.net")
    assert not mx_matches("*.example.net", "a.b.example.net")
    assert not mx_matches("*.example.net", "example.net")
    assert mx_matches("MX.Example.NET.", "mx.example.net")
