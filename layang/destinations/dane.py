"""DANE for SMTP (RFC 7672): the TLSA records of a domain's MX hosts, looked up only where the
MX answer is DNSSEC-authenticated (the AD bit of a validating resolver: ``LAYANG_DANE`` trusts
the one of ``LAYANG_DNS_RESOLVER``, see docs/configuration.md), and whether a session's
certificate matches them (RFC 7672 section 3: DANE-EE and DANE-TA, usages 3 and 2).
"""

from __future__ import annotations

import hashlib
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import dns.asyncresolver
import dns.exception
import dns.flags
import dns.resolver
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from layang.destinations.certificates import host_name, names_match, peer_chain, subject_of


@dataclass(frozen=True)
class Tlsa:
    """One TLSA record (RFC 6698): certificate usage, selector, matching type, data."""

    usage: int
    selector: int
    matching_type: int
    data: bytes

    def matches(self, certificate: x509.Certificate) -> bool:
        """Whether ``certificate`` is what this record names."""
        if self.selector == 0:
            subject = certificate.public_bytes(serialization.Encoding.DER)
        elif self.selector == 1:
            subject = certificate.public_key().public_bytes(
                serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        else:
            return False
        if self.matching_type == 0:
            return subject == self.data
        if self.matching_type == 1:
            return hashlib.sha256(subject).digest() == self.data
        if self.matching_type == 2:
            return hashlib.sha512(subject).digest() == self.data
        return False

    def __str__(self) -> str:
        return f"{self.usage} {self.selector} {self.matching_type} {self.data.hex()}"


async def secure_answer(
    resolver: dns.asyncresolver.Resolver, name: str, rdtype: str
) -> tuple[list[Any], bool, str | None]:
    """(records, whether the answer is authenticated, failure) for one look-up; a secure
    NXDOMAIN or no-answer is ``([], True, None)``. Never raises for DNS problems."""
    try:
        answer = await resolver.resolve(name, rdtype, raise_on_no_answer=False, search=False)
    except dns.resolver.NXDOMAIN as error:
        responses = list(error.responses().values())
        secure = bool(responses) and all(r.flags & dns.flags.AD for r in responses)
        return [], secure, None
    except (dns.exception.DNSException, OSError) as error:
        return [], False, f"{rdtype} look-up of {name} failed: {error}"
    secure = bool(answer.response.flags & dns.flags.AD)
    return (list(answer.rrset) if answer.rrset is not None else []), secure, None


async def tlsa_records(
    domain: str,
    hosts: Sequence[str],
    resolver: dns.asyncresolver.Resolver,
    mx_port: int = 25,
) -> tuple[dict[str, tuple[Tlsa, ...]], dict[str, str]]:
    """The usable TLSA records (usages 2 and 3) of each MX host of ``domain`` with a secure
    answer at ``_<mx_port>._tcp.<host>``, and the hosts whose TLSA look-up failed in a signed
    zone (RFC 7672 section 2.2: such a host must not be used), both keyed by
    :func:`~layang.destinations.certificates.host_name`. Both empty when the MX answer is not
    authenticated (RFC 7672 section 2.2.1: DANE does not apply)."""
    _, mx_secure, _ = await secure_answer(resolver, domain, "MX")
    if not mx_secure:
        return {}, {}
    found: dict[str, tuple[Tlsa, ...]] = {}
    failures: dict[str, str] = {}
    for host in hosts:
        name = f"_{mx_port}._tcp.{host_name(host)}"
        records, secure, failure = await secure_answer(resolver, name, "TLSA")
        if failure is not None:
            failures[host_name(host)] = failure
        elif secure and records:
            found[host_name(host)] = tuple(
                Tlsa(r.usage, r.selector, r.mtype, bytes(r.cert))
                for r in records
                if r.usage in (2, 3)
            )
    return found, failures


def dane_failure(
    records: Sequence[Tlsa], ssl_object: ssl.SSLObject | ssl.SSLSocket, host: str
) -> str | None:
    """Why the session's certificate matches none of ``records`` (RFC 7672 section 3), or
    None. No usable record: encryption is all that is required."""
    if not records:
        return None
    chain = peer_chain(ssl_object)
    if not chain:
        return f"{host} presented no certificate"
    leaf = chain[0]
    if any(r.usage == 3 and r.matches(leaf) for r in records):
        return None  # DANE-EE: the key is the identity; names and dates do not matter
    for record in (r for r in records if r.usage == 2):
        for index, anchor in enumerate(chain[1:], start=1):
            if not record.matches(anchor):
                continue
            if not names_match(leaf, host):
                return f"the certificate of {host} is not valid for that name (DANE-TA)"
            try:
                PolicyBuilder().store(Store([anchor])).build_server_verifier(
                    subject_of(host)
                ).verify(leaf, chain[1:index])
            except (VerificationError, ValueError) as error:
                return f"the chain of {host} does not lead to its DANE-TA anchor: {error}"
            return None
    return f"the certificate of {host} matches none of its TLSA records"
