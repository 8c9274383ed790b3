"""DKIM: key pairs, their encryption at rest, and signing a message's bytes.

The worker signs each message once, over exactly the bytes it relays, with the active key of
the sending account's verified domain that covers the From domain (the domain itself or its
nearest parent), and a second time with that domain's active Ed25519 key when it has one. It
reads the keys table itself, once per batch, so this module needs nothing from the domain
layer; the domain layer uses it to make and seal keys.

Signing is written here (``relaxed/relaxed`` only) rather than through dkimpy: dkimpy parses the
PEM key with pure-Python ASN.1, splits the message with regular expressions line by line and
canonicalises every header on each call, which cost about twice the RSA signature itself. Here
the key is parsed once per process (OpenSSL through ``cryptography``), the body is canonicalised
with two passes in C and its hash is kept for the next copy of the same body, and only the
signed headers are canonicalised. The output is byte for byte dkimpy's (a test holds it to
that), and dkimpy's verifier checks every message shape in the tests.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, padding, rsa

from layang.db import database
from layang.mail.wire import crlf
from layang.sealing import KeyUnavailable, unseal

log = logging.getLogger("layang.dkim")

ALGORITHM = "rsa-sha256"
KEY_BITS = 2048
ED25519 = "ed25519-sha256"
"""RFC 8463: a second signature a domain may carry beside the RSA one (``LAYANG_DKIM_ED25519``).
Verifiers that do not know it ignore it; it costs a small part of an RSA-2048 signature."""
ED25519_BITS = 256
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
_FIELD_NAME = re.compile(rb"([\x21-\x7e]+?):")
_TRAILING_WSP = re.compile(rb"[\t ]+\r\n")
_WSP = re.compile(rb"[\t ]+")
_SIGNATURE_NAME = b"DKIM-Signature"


class DkimError(ValueError):
    """The message cannot be signed (its header section is not RFC 5322)."""


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


def generate_ed25519_key() -> tuple[bytes, str]:
    """A new Ed25519 key pair: the private key as PKCS#8 PEM, and the public key as the base64
    of its 32 raw bytes, which is what an ``k=ed25519`` record's ``p=`` carries (RFC 8463)."""
    key = ed25519.Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public_raw = key.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    return private_pem, base64.b64encode(public_raw).decode("ascii")


def record_value(public_key: str, algorithm: str = ALGORITHM) -> str:
    """The TXT value that publishes ``public_key`` (base64 SubjectPublicKeyInfo for RSA, the
    raw key for Ed25519)."""
    kind = "ed25519" if algorithm == ED25519 else "rsa"
    return f"v=DKIM1; k={kind}; p={public_key}"


def key_context(selector: str, domain: str) -> str:
    return f"{selector}._domainkey.{domain}"


# -- signing -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SigningKey:
    """A private key ready to sign for ``domain`` (the ``d=``) under ``selector``."""

    domain: str
    selector: str
    pem: bytes
    key: rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey

    @classmethod
    def from_pem(cls, domain: str, selector: str, pem: bytes) -> SigningKey:
        key = serialization.load_pem_private_key(pem, password=None)
        if not isinstance(key, rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey):
            raise KeyUnavailable(f"{key_context(selector, domain)}: not an RSA or Ed25519 key")
        return cls(domain, selector, pem, key)

    @property
    def algorithm(self) -> bytes:
        return (ED25519 if isinstance(self.key, ed25519.Ed25519PrivateKey) else ALGORITHM).encode()

    def sign(self, data: bytes) -> bytes:
        """The signature of the header hash input ``data``."""
        if isinstance(self.key, ed25519.Ed25519PrivateKey):
            # RFC 8463 section 3: Ed25519 (PureEdDSA) over the SHA-256 hash of the input.
            return self.key.sign(hashlib.sha256(data).digest())
        return self.key.sign(data, padding.PKCS1v15(), hashes.SHA256())


def header_list(raw: bytes) -> list[bytes]:
    """The ``h=`` list for ``raw``: each of ``SIGNED_HEADERS`` once per occurrence, plus once."""
    head = _HEAD_END.split(raw, maxsplit=1)[0].lower()
    return _header_list(head)


def _header_list(head_lower: bytes) -> list[bytes]:
    names = []
    for name in SIGNED_HEADERS:
        encoded = name.encode()
        present = head_lower.startswith(encoded + b":") + head_lower.count(b"\n" + encoded + b":")
        names.extend([encoded] * (present + 1))
    return names


def body_hash(body: bytes) -> bytes:
    """The base64 SHA-256 of ``body`` (CRLF line ends) in relaxed canonical form."""
    body = _WSP.sub(b" ", _TRAILING_WSP.sub(b"\r\n", body))
    end = len(body)
    while body.endswith(b"\r\n", 0, end):
        end -= 2
    canonical = body[:end] + b"\r\n" if end else b""
    return base64.b64encode(hashlib.sha256(canonical).digest())


def _fields(head: bytes) -> list[tuple[bytes, bytes]]:
    """The header fields of ``head`` (CRLF line ends, without the blank line): name and raw
    value (continuation lines included, each line ending in CRLF)."""
    fields: list[list[bytes]] = []
    for line in head.split(b"\r\n"):
        if line[:1] in (b" ", b"\t"):
            if not fields:
                raise DkimError("the header section starts with a continuation line")
            fields[-1].append(line)
            continue
        match = _FIELD_NAME.match(line)
        if match is None:
            if line.startswith(b"From "):  # an mbox separator: not a header field
                continue
            raise DkimError(f"not a header field: {line[:40]!r}")
        fields.append([match.group(1), line[match.end() :]])
    return [(parts[0], b"\r\n".join(parts[1:]) + b"\r\n") for parts in fields]


def _relaxed(name: bytes, value: bytes) -> bytes:
    """A header field in relaxed canonical form, without its line end."""
    unfolded = value.replace(b"\r\n", b"").replace(b"\n", b"")
    return name.lower().rstrip() + b":" + _WSP.sub(b" ", unfolded).strip()


def _selected(fields: list[tuple[bytes, bytes]], names: Sequence[bytes]) -> list[bytes]:
    """The fields ``names`` signs, each name taking the last instance not taken yet (RFC 6376
    section 5.4.2), in canonical form; a name with no instance left signs nothing (which is
    what makes oversigning work)."""
    lowered = [name.lower() for name, _ in fields]
    taken: dict[bytes, int] = {}
    selected = []
    for name in names:
        index = taken.get(name, len(fields))
        while index > 0:
            index -= 1
            if lowered[index] == name:
                selected.append(_relaxed(*fields[index]))
                break
        taken[name] = index
    return selected


def fold(value: bytes, namelen: int = 0, linesep: bytes = b"\r\n") -> bytes:
    """Fold a header value at column 72 (the field name counts on the first line), breaking
    at spaces, or inside a run longer than a line: dkimpy's folding, so the signature header
    reads the same."""
    width = 72 - namelen
    if len(value) <= width:
        return value
    if len(value) - value.rfind(b"\r\n") == 2 and len(value) <= width + 2:
        return value
    index = value.rfind(b"\r\n ")
    if index == -1:
        done = b""
    else:
        index += 3
        done, value = value[:index], value[index:]
    while len(value) > width:
        index = value[:width].rfind(b" ")
        if index == -1:
            done += value[:width] + linesep + b" "
            value = value[width:]
        else:
            done += value[:index] + linesep + b" "
            value = value[index + 1 :]
        width = 71
    if len(value) > 2:
        return done + value
    return done[:-1] if done[:1] == b" " else done + value


def signature_header(
    prefix: bytes,
    raw: bytes,
    key: SigningKey,
    *,
    body_hash_of: bytes | None = None,
    now: int | None = None,
) -> bytes:
    """The ``DKIM-Signature`` header field (``relaxed/relaxed``, ending in CRLF) for the
    message ``prefix + raw``: ``prefix`` is header fields put in front of ``raw``'s own (the
    copy's ``X-Layang-Id``); ``body_hash_of`` is ``raw``'s body hash when the caller knows it
    already. Raises :class:`DkimError` for a header section that is not RFC 5322."""
    head, body = _split(raw)
    head = prefix + head
    names = _header_list(head.lower())
    fields = _fields(head) if head else []
    domain = key.domain.encode()
    tags = [
        (b"v", b"1"),
        (b"a", key.algorithm),
        (b"c", b"relaxed/relaxed"),
        (b"d", domain),
        (b"i", b"@" + domain),
        (b"q", b"dns/txt"),
        (b"s", key.selector.encode()),
        (b"t", str(int(time.time()) if now is None else now).encode()),
        (b"h", b" : ".join(names)),
        (b"bh", body_hash_of or body_hash(body)),
        # Sixty zeros put b= on a line of its own, so adding the signature later folds the
        # tags before it exactly as they were hashed.
        (b"b", b"0" * 60),
    ]
    namelen = len(_SIGNATURE_NAME)
    unsigned = fold(b"; ".join(b"=".join(tag) for tag in tags), namelen)
    unsigned = unsigned[: unsigned.rindex(b"b=") + 2]
    hashed = _selected(fields, names)
    hashed.append(_relaxed(b"dkim-signature", b" " + unsigned))
    signature = key.sign(b"\r\n".join(hashed))
    tags[-1] = (b"b", base64.b64encode(signature))
    value = b"; ".join(b"=".join(tag) for tag in tags) + b"\r\n"
    return _SIGNATURE_NAME + b": " + fold(value, namelen)


def message_body_hash(raw: bytes) -> bytes:
    """The ``bh=`` of the message ``raw``."""
    return body_hash(_split(raw)[1])


def _split(raw: bytes) -> tuple[bytes, bytes]:
    """``raw``'s header section (without the blank line) and body, line ends made CRLF as
    the transport sends them (an SMTP submission may have bare ones)."""
    raw = crlf(raw)
    split = raw.find(b"\r\n\r\n")
    if split < 0:
        return raw.removesuffix(b"\r\n"), b""
    return raw[:split], raw[split + 4 :]


def sign_message(raw: bytes, key: SigningKey) -> bytes:
    """``raw`` with a ``DKIM-Signature`` header field (``key``'s algorithm, ``relaxed/relaxed``)
    prepended. Raises :class:`DkimError` for a message that cannot be signed."""
    return signature_header(b"", raw, key) + raw


# -- which key signs ---------------------------------------------------------------------------

_ACTIVE_KEYS_SQL = (
    'SELECT d."account_id", d."domain", k."selector", k."private_key" '
    'FROM "sending_domain" AS d JOIN "dkim_key" AS k ON k."sending_domain_id" = d."id" '
    'WHERE d."status" = \'verified\' AND k."status" = \'active\' AND d."account_id" IN ({}) '
    # The RSA signature first: a verifier that checks only one checks that one.
    'ORDER BY k."algorithm" DESC, k."id"'
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
    unsealed once per process and kept, so a message costs one signature per active key (RSA,
    and Ed25519 where the domain has one) and no look-up.
    """

    def __init__(self, secret_key: str) -> None:
        self.secret_key = secret_key
        self.active: dict[int, dict[str, list[tuple[str, bytes]]]] = {}
        self.keys: dict[tuple[str, str, bytes], SigningKey] = {}
        self.failed: set[tuple[str, str, bytes]] = set()
        self._body_hash: tuple[bytes | None, bytes] = (None, b"")

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
            self.active[account_id].setdefault(domain, []).append((selector, bytes(sealed)))

    def keys_for(self, account_id: int, from_domain: str) -> list[SigningKey]:
        """The keys that sign ``account_id``'s mail from ``from_domain`` (none, the RSA key, or
        the RSA and the Ed25519 key), in the order their signatures go on."""
        domains = self.active.get(account_id)
        if not domains:
            return []
        domain = covering_domain(domains, from_domain)
        if domain is None:
            return []
        found = []
        for selector, sealed in domains[domain]:
            key = self._key(domain, selector, sealed)
            if key is not None:
                found.append(key)
        return found

    def _key(self, domain: str, selector: str, sealed: bytes) -> SigningKey | None:
        cache_key = (domain, selector, sealed)
        key = self.keys.get(cache_key)
        if key is None and cache_key not in self.failed:
            context = key_context(selector, domain)
            try:
                key = SigningKey.from_pem(
                    domain, selector, unseal(sealed, self.secret_key, context)
                )
            except (KeyUnavailable, ValueError) as error:
                # Logged once per key: mail goes out without it rather than not at all.
                log.error("DKIM key unusable, sending unsigned by it: %s", error)
                self.failed.add(cache_key)
                return None
            self.keys[cache_key] = key
        return key

    def sign(self, raw: bytes, account_id: int, from_domain: str, prefix: bytes = b"") -> bytes:
        """``prefix + raw`` (``prefix``: header fields put in front of the message's own),
        signed by each active key covering ``from_domain``, else as it is. A message that
        cannot be signed goes out unsigned (logged).

        The body hash of the last ``raw`` is kept: the copies of one message to several
        recipients differ only in ``prefix`` (and both algorithms hash the body alike)."""
        keys = self.keys_for(account_id, from_domain)
        if not keys:
            return prefix + raw
        started = time.perf_counter()
        if self._body_hash[0] is not raw:
            self._body_hash = (raw, message_body_hash(raw))
        try:
            # Each signature covers the message without the others (DKIM-Signature is not
            # among the signed headers), so the order they are added in does not matter.
            headers = b"".join(
                signature_header(prefix, raw, key, body_hash_of=self._body_hash[1]) for key in keys
            )
        except DkimError as error:
            log.warning("could not DKIM-sign a message from %s: %s", from_domain, error)
            return prefix + raw
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "dkim signed d=%s s=%s in %.2f ms",
                keys[0].domain,
                ",".join(key.selector for key in keys),
                (time.perf_counter() - started) * 1000,
            )
        return headers + prefix + raw
