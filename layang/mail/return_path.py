"""The return path: the per-recipient VERP envelope sender every relayed copy carries.

``b+<token>@<returnPathDomain>``, where ``<token>`` names the recipient record (its 16-byte
ULID) followed by the first 10 bytes of an HMAC-SHA256 of it, in lowercase base32 without
padding: 42 characters, safe from servers that lower-case local parts, and impossible to
forge without ``LAYANG_SECRET_KEY`` (80 bits of MAC). A bounce or feedback report sent back to
it names the very email it is about.

The same token rides in the ``X-Layang-Id`` header of every relayed copy, so that a complaint
whose embedded original has lost its ``Return-Path`` still names its email.

The domain is the return-path domain of the sending account's verified domain that covers the
From domain (the domain itself or its nearest parent), else ``LAYANG_BOUNCE_DOMAIN``. Which
domains are verified is read once per batch (``load``), like the DKIM keys.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Iterable

from layang.db import database
from layang.mail.dkim import covering_domain

LOCAL_PREFIX = "b+"
HEADER = "X-Layang-Id"
_MAC_BYTES = 10
_KEY_INFO = b"layang return path v1"
_TOKEN = re.compile(r"^[a-z2-7]{42}$")
# The alphabet of record ids (layang.ids.new_id): lowercase Crockford base32.
_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"
# Crockford digits → the digits int(…, 32) reads (0-9a-v): a C-speed parse of an id.
_TO_BASE32 = str.maketrans(_CROCKFORD, "0123456789abcdefghijklmnopqrstuv")

_VERIFIED_SQL = (
    'SELECT "account_id", "domain", "return_path_domain" FROM "sending_domain" '
    'WHERE "status" = \'verified\' AND "account_id" IN ({})'
)


class InvalidReturnPath(Exception):
    """The address or token is not one this installation signed."""


def _id_bytes(recipient_id: str) -> bytes:
    return int(recipient_id.lower().translate(_TO_BASE32), 32).to_bytes(16, "big")


def _id_text(raw: bytes) -> str:
    value = int.from_bytes(raw, "big")
    chars = []
    for _ in range(26):
        value, digit = divmod(value, 32)
        chars.append(_CROCKFORD[digit])
    return "".join(reversed(chars))


class ReturnPaths:
    """Makes and reads VERP addresses for one installation (its secret and bounce domain)."""

    def __init__(self, secret_key: str, bounce_domain: str) -> None:
        self.bounce_domain = bounce_domain.lower()
        self._key = hmac.new(secret_key.encode(), _KEY_INFO, hashlib.sha256).digest()
        # account id → {verified domain: its return-path domain}
        self.verified: dict[int, dict[str, str]] = {}

    # -- tokens ------------------------------------------------------------------------------

    def token(self, recipient_id: str) -> str:
        """The signed token naming ``recipient_id`` (a 26-character ULID)."""
        raw = _id_bytes(recipient_id)
        return base64.b32encode(raw + self._sign(raw)).decode("ascii").rstrip("=").lower()

    def _sign(self, raw: bytes) -> bytes:
        return hmac.digest(self._key, raw, "sha256")[:_MAC_BYTES]

    def read_token(self, token: str) -> str:
        """The recipient id ``token`` names. Raises ``InvalidReturnPath`` unless this
        installation signed it."""
        token = token.strip().lower()
        if not _TOKEN.match(token):
            raise InvalidReturnPath(token)
        raw = base64.b32decode(token.upper() + "======")
        ident, mac = raw[:16], raw[16:]
        if not hmac.compare_digest(mac, self._sign(ident)):
            raise InvalidReturnPath(token)
        return _id_text(ident)

    def read_address(self, address: str) -> str:
        """The recipient id a VERP address (``b+<token>@any.domain``) names. Raises
        ``InvalidReturnPath``."""
        local, at, _ = address.strip().strip("<>").rpartition("@")
        if not at or not local.lower().startswith(LOCAL_PREFIX):
            raise InvalidReturnPath(address)
        return self.read_token(local[len(LOCAL_PREFIX) :])

    @staticmethod
    def header(token: str) -> bytes:
        """The header line that names the email (by its ``token``) inside the message."""
        return f"{HEADER}: {token}\r\n".encode("ascii")

    # -- addresses ---------------------------------------------------------------------------

    def load(self, account_ids: Iterable[int]) -> None:
        """Read the verified domains of ``account_ids`` (once per batch)."""
        ids = sorted(set(account_ids))
        self.verified = {account_id: {} for account_id in ids}
        if not ids:
            return
        marks = ", ".join([database.obj.param] * len(ids))
        cursor = database.execute_sql(_VERIFIED_SQL.format(marks), ids)
        for account_id, domain, return_path_domain in cursor.fetchall():
            self.verified[account_id][domain] = return_path_domain

    def domain_for(self, account_id: int, from_domain: str) -> str:
        """The return-path domain for ``account_id``'s mail from ``from_domain``."""
        domains = self.verified.get(account_id)
        if domains:
            covering = covering_domain(domains, from_domain)
            if covering is not None:
                return domains[covering]
        return self.bounce_domain

    def address(self, token: str, account_id: int, from_domain: str) -> str:
        """The envelope sender for the copy whose ``token`` it is."""
        return f"{LOCAL_PREFIX}{token}@{self.domain_for(account_id, from_domain)}"
