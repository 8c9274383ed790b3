"""MTA-STS and DANE, with real TLS and DNS: a local CA issuing the MX and policy hosts'
certificates, the dnslib zone (TXT, A, TLSA, the AD bit), an HTTPS policy server on port 443
of a loopback address, real aiosmtpd MX servers and a STARTTLS-stripping proxy.

The delivery engine drives sessions; here a small SMTP client does what it does: STARTTLS when
offered, ``check_session`` before MAIL, the message only when the check says so."""

from __future__ import annotations

import asyncio
import hashlib
import smtplib
import ssl
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import dns.asyncresolver
import flask
import pytest
from cryptography.hazmat.primitives import serialization

from layang.config import Config
from layang.destinations.certificates import ssl_context
from layang.destinations.dns import MAX_QUERIES, TRY_SECONDS, policy_resolver
from layang.destinations.mta_sts import mx_matches
from layang.destinations.policy import (
    TlsCheck,
    TlsSettings,
    TransportPolicy,
    check_session,
    policy_for,
)
from layang.mail.message import TLS_OPTIONAL
from tests.conftest import BACKENDS
from tests.dns_server import Zone
from tests.policy_server import PolicyServer
from tests.stripping_proxy import StrippingProxy
from tests.tls_pki import LocalCA
from tests.upstream import Upstream, make_self_signed_cert, server_tls_context

DOMAIN = "bank.test"
MX1, MX2 = "mx1.bank.test", "mx2.bank.test"
MESSAGE = b"From: a@sender.test\r\nTo: b@bank.test\r\nSubject: secret\r\n\r\nThe PIN is 4711.\r\n"
ENFORCE = f"version: STSv1\nmode: enforce\nmx: {MX1}\nmx: *.backup.test\nmax_age: 86400\n"


@dataclass
class World:
    zone: Zone
    ca: LocalCA
    config: Config
    policy_server: PolicyServer
    settings: TlsSettings

    def publish_sts(self, policy: str, record_id: str = "20261125") -> None:
        self.zone.remove(f"_mta-sts.{DOMAIN}")
        self.zone.add_txt(f"_mta-sts.{DOMAIN}", f"v=STSv1; id={record_id}")
        self.policy_server.serve(policy)

    def policy(self, *hosts: str, **changes: object) -> TransportPolicy:
        settings = replace(self.settings, **changes) if changes else self.settings
        resolver = policy_resolver(self.config, timeout=3)
        return asyncio.run(policy_for(DOMAIN, hosts or (MX1,), resolver, settings=settings))


@pytest.fixture
def world(app: flask.Flask, config: Config, dns_zone: Zone, tmp_path: Path) -> Iterator[World]:
    ca = LocalCA(tmp_path / "ca")
    server = PolicyServer(ca.server_context(f"mta-sts.{DOMAIN}"))
    dns_zone.add_address(f"mta-sts.{DOMAIN}", server.address)
    dns_zone.add_mx(DOMAIN, 10, MX1)
    configured = replace(config, dns_resolver=dns_zone.address, tls_cafile=str(ca.cafile))
    settings = TlsSettings.from_config(configured)
    yield World(dns_zone, ca, configured, server, settings)
    server.stop()


def mx_server(context: ssl.SSLContext | None, **kwargs: object) -> Upstream:
    return Upstream(tls_context=context, **kwargs)


def run_session(
    world: World,
    policy: TransportPolicy,
    mx_name: str,
    port: int,
    **check: object,
) -> TlsCheck:
    """One session as the engine runs it: EHLO, STARTTLS when offered (no verification in
    the handshake), ``check_session``, then the message only if allowed."""
    smtp = smtplib.SMTP("127.0.0.1", port, local_hostname="client.test", timeout=10)
    try:
        smtp.ehlo()
        offered = smtp.has_extn("starttls")
        ssl_object, error = None, None
        if offered:
            smtp._host = mx_name  # the name the certificate is checked for (SNI)
            try:
                smtp.starttls(context=ssl_context(False, world.settings.cafile))
                smtp.ehlo()
                ssl_object = smtp.sock
            except (ssl.SSLError, smtplib.SMTPException) as failure:
                error = failure
        result = check_session(
            policy,
            mx_name,
            ssl_object,
            offered,
            error=error,
            cafile=world.settings.cafile,
            requiretls_advertised=smtp.has_extn("requiretls"),
            **check,
        )
        if result.ok:
            smtp.sendmail("a@sender.test", ["b@bank.test"], MESSAGE)
        return result
    finally:
        try:
            smtp.quit()
        except (smtplib.SMTPException, OSError):
            smtp.close()


# --- MTA-STS -----------------------------------------------------------------------------


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


# --- DANE --------------------------------------------------------------------------------


def tlsa_data(certificate_file: Path, selector: int, matching: int) -> bytes:
    from cryptography import x509

    certificate = x509.load_pem_x509_certificate(certificate_file.read_bytes())
    if selector == 0:
        data = certificate.public_bytes(serialization.Encoding.DER)
    else:
        data = certificate.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    return {0: data, 1: hashlib.sha256(data).digest(), 2: hashlib.sha512(data).digest()}[matching]


def server_context(certfile: Path, keyfile: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certfile, keyfile)
    return context


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


def test_mx_pattern_matching() -> None:
    assert mx_matches("*.example.net", "mx1.example.net")
    assert not mx_matches("*.example.net", "a.b.example.net")
    assert not mx_matches("*.example.net", "example.net")
    assert mx_matches("MX.Example.NET.", "mx.example.net")


# --- TLS required by a shaping rule or by the message --------------------------------------


def test_a_shaping_rule_requiring_tls_refuses_an_unverified_certificate(
    world: World, tmp_path: Path
) -> None:
    policy = world.policy(MX1).requiring_tls()
    assert policy.kind == "required" and policy.requires_verified_tls
    context = server_tls_context(*make_self_signed_cert(tmp_path / "self", MX1))
    with mx_server(context) as mx:
        check = run_session(world, policy, MX1, mx.port)
        assert not check.ok and check.reply.endswith("(TLS is required)")
        assert mx.received == []
    with mx_server(world.ca.server_context(MX1)) as mx:
        check = run_session(world, policy, MX1, mx.port)
        assert check.ok and check.tls == {
            **check.tls,
            "verified": True,
            "policy": "required",
        }


def test_requiretls_to_an_mx_without_it_bounces(world: World) -> None:
    policy = world.policy(MX1)
    with mx_server(world.ca.server_context(MX1)) as mx:
        check = run_session(world, policy, MX1, mx.port, requirement="requiretls")
        assert not check.ok and check.bounce
        assert check.reply == (
            "550 5.7.30 REQUIRETLS not possible: mx1.bank.test does not advertise REQUIRETLS"
        )
        assert mx.received == []
    with mx_server(world.ca.server_context(MX1), requiretls=True) as mx:
        check = run_session(world, policy, MX1, mx.port, requirement="requiretls")
        assert check.ok and check.tls["verified"] and check.tls["policy"] == "required"


def test_requiretls_refuses_plaintext_even_without_a_policy(world: World) -> None:
    policy = world.policy(MX1)
    with mx_server(None) as mx:
        check = run_session(world, policy, MX1, mx.port, requirement="requiretls")
        assert not check.ok and check.bounce
        assert "does not offer STARTTLS" in check.reply


def test_a_cafile_that_cannot_be_loaded_stops_at_start(tmp_path: Path) -> None:
    from layang.config import ConfigError

    (tmp_path / "junk.pem").write_text("not a certificate")
    for path in (tmp_path / "missing.pem", tmp_path / "junk.pem"):
        environ = {"LAYANG_TLS_CAFILE": str(path), "LAYANG_SECRET_KEY": "k"}
        with pytest.raises(ConfigError, match=r"^LAYANG_TLS_CAFILE: cannot load CA certificates"):
            Config.from_env(environ, dotenv=False)


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
