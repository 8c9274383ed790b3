"""DKIM: key pairs, their encryption at rest, and signing a message's bytes.

The worker signs each message once, over exactly the bytes it relays, with the active key of
the sending account's verified domain that covers the From domain (the domain itself or its
nearest parent). It reads the keys table itself, once per batch, so this module needs nothing
from the domain layer; the domain layer uses it to make and seal keys.

Signing is dkimpy's (canonicalisation, header selection, folding), except the RSA operation:
dkimpy does it in pure Python (about 5.6 ms per message here), OpenSSL through ``cryptography``
does the same PKCS#1 v1.5 signature in about 0.3 ms, so it is done there.
"""

from __future__ import annotations

import base64
import logging
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass

import dkim
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa, utils

from layang.db import database
from layang.sealing import KeyUnavailable, unseal

log = logging.getLogger("layang.dkim")

ALGORITHM = "rsa-sha256"
KEY_BITS = 2048
# Signed once per occurrence plus once more, so that a header added on the way (a second From,
# a Reply-To the message did not have) breaks the signature instead of riding on it.
SIGNED_HEADERS = (
    "from",
    "to",
    "cc",
    "subject",
    "date",
    "message-id",
    "reply-to",
    "mime-version",
    "content-type",
    "content-transfer-encoding",
    "list-unsubscribe",
    "list-unsubscribe-post",
)
_HEAD_END = re.compile(rb"\r?\n\r?\n")


# -- keys --------------------------------------------------------------------------------------


def generate_key(bits: int = KEY_BITS) -> tuple[bytes, str]:
    """A new RSA key pair: the private key as PKCS#1 PEM, and the public key as the base64
    SubjectPublicKeyInfo that a DKIM record's ``p=`` carries."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    private_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    public_der = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private_pem, base64.b64encode(public_der).decode("ascii")


def record_value(public_key: str) -> str:
    """The TXT value that publishes ``public_key`` (base64 SubjectPublicKeyInfo)."""
    return f"v=DKIM1; k=rsa; p={public_key}"


def key_context(selector: str, domain: str) -> str:
    return f"{selector}._domainkey.{domain}"


# -- signing -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SigningKey:
    """A private key ready to sign for ``domain`` (the ``d=``) under ``selector``."""

    domain: str
    selector: str
    pem: bytes
    key: rsa.RSAPrivateKey

    @classmethod
    def from_pem(cls, domain: str, selector: str, pem: bytes) -> SigningKey:
        key = serialization.load_pem_private_key(pem, password=None)
        if not isinstance(key, rsa.RSAPrivateKey):
            raise KeyUnavailable(f"{key_context(selector, domain)}: not an RSA key")
        return cls(domain, selector, pem, key)


class _Signer(dkim.DKIM):
    """dkimpy's signer with the RSA step in OpenSSL. ``gen_header`` is dkimpy 1.1's, for the
    RSA algorithms and unstandardised headers, with ``RSASSA_PKCS1_v1_5_sign`` replaced; tests
    check that the result is byte for byte what dkimpy itself signs."""

    def __init__(self, message: bytes, key: rsa.RSAPrivateKey) -> None:
        super().__init__(message, signature_algorithm=ALGORITHM.encode())
        self.openssl_key = key

    def gen_header(  # type: ignore[no-untyped-def]
        self, fields, include_headers, canon_policy, header_name, pk, standardize=False
    ):
        header_value = b"; ".join(b"=".join(x) for x in fields)
        header_value = dkim.fold(header_value, namelen=len(header_name), linesep=b"\r\n")
        header_value = dkim.RE_BTAG.sub(b"\\1", header_value)
        header = (header_name, b" " + header_value)
        h = dkim.HashThrough(self.hasher(), False)
        headers = canon_policy.canonicalize_headers(self.headers)
        self.signed_headers = dkim.hash_headers(
            h, canon_policy, headers, include_headers, header, dict(fields)
        )
        signature = self.openssl_key.sign(
            h.digest(), padding.PKCS1v15(), utils.Prehashed(hashes.SHA256())
        )
        index = next(i for i in range(len(fields)) if fields[i][0] == b"b")
        fields[index] = (b"b", base64.b64encode(signature))
        header_value = b"; ".join(b"=".join(x) for x in fields) + self.linesep
        return dkim.fold(header_value, namelen=len(header_name), linesep=self.linesep)


def header_list(raw: bytes) -> list[bytes]:
    """The ``h=`` list for ``raw``: each of ``SIGNED_HEADERS`` once per occurrence, plus once."""
    head = _HEAD_END.split(raw, maxsplit=1)[0].lower()
    names = []
    for name in SIGNED_HEADERS:
        encoded = name.encode()
        present = head.startswith(encoded + b":") + head.count(b"\n" + encoded + b":")
        names.extend([encoded] * (present + 1))
    return names


def sign_message(raw: bytes, key: SigningKey) -> bytes:
    """``raw`` with a ``DKIM-Signature`` header field (``rsa-sha256``, ``relaxed/relaxed``)
    prepended. Raises ``dkim.DKIMException`` for a message dkimpy cannot parse."""
    signer = _Signer(raw, key.key)
    header = signer.sign(
        key.selector.encode(),
        key.domain.encode(),
        key.pem,
        canonicalize=(b"relaxed", b"relaxed"),
        include_headers=header_list(raw),
    )
    return header + raw


# -- which key signs ---------------------------------------------------------------------------

_ACTIVE_KEYS_SQL = (
    'SELECT d."account_id", d."domain", k."selector", k."private_key" '
    'FROM "sending_domain" AS d JOIN "dkim_key" AS k ON k."sending_domain_id" = d."id" '
    'WHERE d."status" = \'verified\' AND k."status" = \'active\' AND d."account_id" IN ({})'
)


def covering_domain(domains: Iterable[str], from_domain: str) -> str | None:
    """The one of ``domains`` that signs for ``from_domain``: itself, else its nearest parent."""
    candidates = set(domains)
    name = from_domain.lower().rstrip(".")
    while name:
        if name in candidates:
            return name
        name = name.partition(".")[2]
    return None


class DkimSigner:
    """The worker's signer: which key signs for an account and a From domain, and the signing.

    ``load`` reads the active keys of a batch's accounts in one query; private keys are
    unsealed once per process and kept, so a message costs one signature and no look-up.
    """

    def __init__(self, secret_key: str) -> None:
        self.secret_key = secret_key
        self.active: dict[int, dict[str, tuple[str, bytes]]] = {}
        self.keys: dict[tuple[str, str, bytes], SigningKey] = {}
        self.failed: set[tuple[str, str, bytes]] = set()

    def load(self, account_ids: Iterable[int]) -> None:
        """Read which key signs for each of ``account_ids`` now (once per batch, so a key that
        became active is used from the next batch on)."""
        ids = sorted(set(account_ids))
        self.active = {account_id: {} for account_id in ids}
        if not ids:
            return
        marks = ", ".join([database.obj.param] * len(ids))
        cursor = database.execute_sql(_ACTIVE_KEYS_SQL.format(marks), ids)
        for account_id, domain, selector, sealed in cursor.fetchall():
            self.active[account_id][domain] = (selector, bytes(sealed))

    def key_for(self, account_id: int, from_domain: str) -> SigningKey | None:
        """The key that signs ``account_id``'s mail from ``from_domain``, or None."""
        domains = self.active.get(account_id)
        if not domains:
            return None
        domain = covering_domain(domains, from_domain)
        if domain is None:
            return None
        selector, sealed = domains[domain]
        cache_key = (domain, selector, sealed)
        key = self.keys.get(cache_key)
        if key is None and cache_key not in self.failed:
            context = key_context(selector, domain)
            try:
                key = SigningKey.from_pem(
                    domain, selector, unseal(sealed, self.secret_key, context)
                )
            except (KeyUnavailable, ValueError) as error:
                # Logged once per key: mail goes out unsigned rather than not at all.
                log.error("DKIM key unusable, sending unsigned: %s", error)
                self.failed.add(cache_key)
                return None
            self.keys[cache_key] = key
        return key

    def sign(self, raw: bytes, account_id: int, from_domain: str) -> bytes:
        """``raw`` signed when the account has an active key covering ``from_domain``, else
        ``raw`` as it is. A message dkimpy cannot parse goes out unsigned (logged)."""
        key = self.key_for(account_id, from_domain)
        if key is None:
            return raw
        started = time.perf_counter()
        try:
            signed = sign_message(raw, key)
        except dkim.DKIMException as error:
            log.warning("could not DKIM-sign a message from %s: %s", from_domain, error)
            return raw
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "dkim signed d=%s s=%s in %.2f ms",
                key.domain,
                key.selector,
                (time.perf_counter() - started) * 1000,
            )
        return signed
