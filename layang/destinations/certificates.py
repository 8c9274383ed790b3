"""Certificate checks of an SMTP session, after the STARTTLS handshake: whether the server's
certificate is valid for a host name under the trusted CAs (the system's and
``LAYANG_TLS_CAFILE``, see docs/configuration.md), by RFC 5280 path validation and RFC 6125 name
matching.

MX sessions hand-shake without verification (:func:`ssl_context` with ``verify=False``) and are
checked here afterwards against the chain the server sent, so one handshake serves every
transport policy (docs/delivery.md, "Transport security"): a policy in ``testing`` mode can
deliver and still report what failed.
"""

from __future__ import annotations

import functools
import ipaddress
import ssl
from datetime import UTC, datetime

from cryptography import x509
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from layang.destinations.result_types import (
    CERTIFICATE_EXPIRED,
    CERTIFICATE_HOST_MISMATCH,
    CERTIFICATE_NOT_TRUSTED,
)
from layang.tls_trust import client_ssl_context, trusted_roots


def ssl_context(verify: bool, cafile: str | None = None) -> ssl.SSLContext:
    """The client context for STARTTLS with an MX host (system CAs and ``cafile``, i.e.
    ``LAYANG_TLS_CAFILE``). The transport policy checks the certificate itself
    (:func:`layang.destinations.policy.check_session`), so MX sessions use ``verify=False``;
    ``verify=True`` makes the handshake itself refuse a certificate not valid for the
    ``server_hostname`` given."""
    return client_ssl_context(cafile, verify=verify)


def host_name(host: str) -> str:
    """``host`` as names are compared: lower case, without a final dot."""
    return host.lower().rstrip(".")


def wildcard_matches(pattern: str, host: str) -> bool:
    """Whether ``host`` matches ``pattern``, where a ``*.`` pattern stands for exactly one
    leftmost label (RFC 6125 section 6.4.3, as RFC 8461 section 4.1 uses it for MX patterns)."""
    pattern, host = host_name(pattern), host_name(host)
    if pattern.startswith("*."):
        label, _, rest = host.partition(".")
        return bool(label) and rest == pattern[2:]
    return pattern == host


def peer_chain(ssl_object: ssl.SSLObject | ssl.SSLSocket) -> list[x509.Certificate]:
    """The certificates the server sent, its own first, whether or not they were verified."""
    inner = getattr(ssl_object, "_sslobj", None)
    chain: list[x509.Certificate] = []
    raw = getattr(inner, "get_unverified_chain", None)
    if raw is not None:
        for certificate in raw() or ():
            chain.append(x509.load_der_x509_certificate(certificate.public_bytes(2)))  # DER
    if not chain:
        der = ssl_object.getpeercert(binary_form=True)
        if der:
            chain.append(x509.load_der_x509_certificate(der))
    return chain


def verification_failure(
    ssl_object: ssl.SSLObject | ssl.SSLSocket, host: str, cafile: str | None = None
) -> str | None:
    """Why the session's certificate is not valid for ``host`` under the trusted CAs (system
    and ``cafile``), or None when it is."""
    return webpki_failure(ssl_object, host, cafile)[1]


def webpki_failure(
    ssl_object: ssl.SSLObject | ssl.SSLSocket, host: str, cafile: str | None
) -> tuple[str | None, str | None]:
    """(RFC 8460 result type, reason) when the certificate is not valid for ``host`` (a name
    compared as :func:`host_name` gives it), else ``(None, None)``."""
    context = ssl_object.context
    checked = context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    if checked and host_name(ssl_object.server_hostname or "") == host:
        return None, None  # the handshake itself checked it
    chain = peer_chain(ssl_object)
    if not chain:
        return CERTIFICATE_NOT_TRUSTED, f"{host} presented no certificate"
    leaf = chain[0]
    if not names_match(leaf, host):
        return CERTIFICATE_HOST_MISMATCH, f"the certificate of {host} is not valid for that name"
    now = datetime.now(UTC)
    if leaf.not_valid_after_utc < now or leaf.not_valid_before_utc > now:
        return CERTIFICATE_EXPIRED, f"the certificate of {host} has expired or is not yet valid"
    try:
        verifier = (
            PolicyBuilder().store(_store(cafile or None)).build_server_verifier(subject_of(host))
        )
        verifier.verify(leaf, chain[1:])
    except (VerificationError, ValueError) as error:
        return CERTIFICATE_NOT_TRUSTED, f"the certificate of {host} is not trusted: {error}"
    return None, None


@functools.lru_cache(maxsize=8)
def _store(cafile: str | None) -> Store:
    # Building the store of ~140 system roots costs 1.5 ms; a verification with it, 0.3 ms.
    return Store(list(trusted_roots(cafile)))


def subject_of(host: str) -> x509.DNSName | x509.IPAddress:
    """What a certificate must name for ``host``: a smarthost may be given by address."""
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def names_match(certificate: x509.Certificate, host: str) -> bool:
    """Whether ``certificate``'s subject alternative names cover ``host`` (a name or an
    address); a certificate without them covers nothing."""
    try:
        alternatives = certificate.extensions.get_extension_for_class(
            x509.SubjectAlternativeName
        ).value
    except x509.ExtensionNotFound:
        return False
    subject = subject_of(host)
    if isinstance(subject, x509.IPAddress):
        return subject.value in alternatives.get_values_for_type(x509.IPAddress)
    names = alternatives.get_values_for_type(x509.DNSName)
    return any(
        wildcard_matches(name, host) if name.startswith("*.") else host_name(name) == host
        for name in names
    )
