"""One-click unsubscribe (RFC 8058): the signed per-recipient token, and the headers that carry
it in broadcast mail (``transactional: false`` or ``stream: broadcast`` over the API, an
``X-Layang-Stream: broadcast`` header over SMTP).

A token is the recipient record's id and a truncated HMAC of it: short enough for the local
part of the ``mailto:`` address (at most 64 characters), lower-case only (mail systems may fold
the case of a local part), and impossible to alter or mint without the secret key.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from dataclasses import dataclass

from layang.mail.message import Header
from layang.mail.submitted import with_fields

UNSUBSCRIBE_PATH = "/u/"
ONE_CLICK = "List-Unsubscribe=One-Click"
HEADER_NAMES = frozenset({"list-unsubscribe", "list-unsubscribe-post"})
_TOKEN = re.compile(r"^([0-9a-z]{26})-([a-z2-7]{26})$")


class InvalidToken(Exception):
    """The token is not one this service signed."""


@dataclass(frozen=True)
class UnsubscribeTokens:
    """Makes and reads unsubscribe tokens for one installation."""

    secret_key: str
    public_url: str
    bounce_domain: str

    def _signature(self, recipient_id: str) -> str:
        digest = hmac.new(
            self.secret_key.encode(), b"layang-unsubscribe:" + recipient_id.encode(), hashlib.sha256
        ).digest()
        return base64.b32encode(digest[:16]).decode("ascii").rstrip("=").lower()

    def token(self, recipient_id: str) -> str:
        return f"{recipient_id}-{self._signature(recipient_id)}"

    def read(self, token: str) -> str:
        """The recipient id ``token`` names. Raises ``InvalidToken``."""
        match = _TOKEN.match(token.lower())
        if match is None:
            raise InvalidToken(token)
        recipient_id, signature = match.groups()
        if not hmac.compare_digest(signature, self._signature(recipient_id)):
            raise InvalidToken(token)
        return recipient_id

    def url(self, recipient_id: str) -> str:
        return self.public_url + UNSUBSCRIBE_PATH + self.token(recipient_id)

    def headers(self, recipient_id: str) -> tuple[Header, Header]:
        """``List-Unsubscribe`` (the one-click URL, then a ``mailto:``) and
        ``List-Unsubscribe-Post`` for one recipient's copy."""
        mailto = f"mailto:u+{self.token(recipient_id)}@{self.bounce_domain}"
        return (
            Header("List-Unsubscribe", f"<{self.url(recipient_id)}>, <{mailto}>"),
            Header("List-Unsubscribe-Post", ONE_CLICK),
        )

    def add_to(self, raw: bytes, recipient_id: str) -> bytes:
        """``raw``, a message submitted over SMTP, as one recipient's copy: its ``headers`` in
        place of any List-Unsubscribe fields the sender gave, as a composed message has them."""
        return with_fields(raw, HEADER_NAMES, self.headers(recipient_id))
