"""A world for the transport security tests, with real TLS and DNS: a local CA issuing the MX
and policy hosts' certificates, the dnslib zone (TXT, A, TLSA, the AD bit), an HTTPS policy
server on port 443 of a loopback address, and real aiosmtpd MX servers.

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

import flask
import pytest
from cryptography.hazmat.primitives import serialization

from layang.config import Config
from layang.destinations.certificates import ssl_context
from layang.destinations.dns import policy_resolver
from layang.destinations.policy import (
    TlsCheck,
    TlsSettings,
    TransportPolicy,
    check_session,
    policy_for,
)
from tests.support.dns_server import Zone
from tests.support.policy_server import PolicyServer
from tests.support.tls_pki import LocalCA
from tests.support.upstream import Upstream

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
