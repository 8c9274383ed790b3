"""Secrets at rest: the one place they are encrypted (DKIM private keys, webhook secrets).

AES-256-GCM under a key derived (HKDF) from ``LAYANG_SECRET_KEY``, each ciphertext bound to a
context naming its row (``selector._domainkey.domain``, ``webhook:<id>``), so that a sealed
value copied onto another row does not open there.
"""

from __future__ import annotations

import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

_SEAL_VERSION = b"\x01"
# The derivation's label predates webhook secrets; changing it would lock every sealed value.
_SEAL_INFO = b"layang dkim private key v1"


def _sealing_key(secret_key: str) -> AESGCM:
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_SEAL_INFO).derive(
        secret_key.encode()
    )
    return AESGCM(derived)


def seal(secret: bytes, secret_key: str, context: str) -> bytes:
    """``secret`` encrypted (AES-256-GCM) with a key derived from ``secret_key`` (HKDF), bound to
    ``context``."""
    nonce = os.urandom(12)
    return _SEAL_VERSION + nonce + _sealing_key(secret_key).encrypt(nonce, secret, context.encode())


class KeyUnavailable(Exception):
    """A sealed value does not open: ``LAYANG_SECRET_KEY`` changed, or the row was altered."""


def unseal(sealed: bytes, secret_key: str, context: str) -> bytes:
    """What ``seal`` sealed. Raises ``KeyUnavailable`` when it does not open."""
    sealed = bytes(sealed)
    if sealed[:1] != _SEAL_VERSION or len(sealed) < 13 + 16:
        raise KeyUnavailable(f"{context}: not a sealed key")
    try:
        return _sealing_key(secret_key).decrypt(sealed[1:13], sealed[13:], context.encode())
    except InvalidTag:
        raise KeyUnavailable(f"{context}: does not open with LAYANG_SECRET_KEY") from None
