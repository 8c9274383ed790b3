"""Open and click tracking: signed per-recipient URLs put into the HTML part (the events are
recorded by :mod:`layang.domain.engagement` when they are fetched).

A token is the recipient record's id (and, for a click, the original URL) and the time it was
made, signed with the secret key: nothing in it can be changed without the signature failing,
so a tracking link can never be turned into a redirect to somewhere else, nor made younger.
Tokens made before the issue time was added carry none; :meth:`Tracker.read` gives ``None``
for it and the reader dates them by their record (see :mod:`layang.domain.engagement`).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

from itsdangerous import BadSignature, URLSafeSerializer

from layang.clock import now_ms

OPEN_PATH = "/t/o/"
CLICK_PATH = "/t/c/"
_ANCHOR_HREF = re.compile(
    r"""(<(?:a|area)\b[^>]*?\bhref\s*=\s*)(?:"([^"]*)"|'([^']*)')""", re.IGNORECASE
)
_BODY_END = re.compile(r"</body\s*>", re.IGNORECASE)


class InvalidToken(Exception):
    """The token is not one this service signed, or names nothing."""


@dataclass(frozen=True, slots=True)
class TrackingToken:
    """What a valid token says: whose link, where it leads (clicks), and when it was made
    (epoch ms; ``None`` for a token made before tokens carried it)."""

    recipient_id: str
    url: str | None
    issued_at_ms: int | None


@dataclass(frozen=True)
class Tracker:
    """Makes and reads tracking tokens for one installation (its secret and public URL)."""

    secret_key: str
    public_url: str

    def _serializer(self) -> URLSafeSerializer:
        return URLSafeSerializer(self.secret_key, salt="layang-tracking")

    def open_url(self, recipient_id: str) -> str:
        token = self._serializer().dumps(["o", recipient_id, now_ms() // 1000])
        return self.public_url + OPEN_PATH + token

    def click_url(self, recipient_id: str, url: str) -> str:
        token = self._serializer().dumps(["c", recipient_id, url, now_ms() // 1000])
        return self.public_url + CLICK_PATH + token

    def read(self, token: str, kind: str) -> TrackingToken:
        """What a token of ``kind`` ("o" or "c") says. Raises ``InvalidToken``."""
        try:
            value = self._serializer().loads(token)
        except BadSignature:
            raise InvalidToken(token) from None
        if not isinstance(value, list) or not value or value[0] != kind:
            raise InvalidToken(token)
        fields, issued = value[1:], None
        width = 1 if kind == "o" else 2
        if len(fields) == width + 1 and type(fields[-1]) is int:
            fields, issued = fields[:-1], fields[-1] * 1000
        if len(fields) != width or not all(isinstance(v, str) for v in fields):
            raise InvalidToken(token)
        if kind == "o":
            return TrackingToken(fields[0], None, issued)
        if not is_web_url(fields[1]):
            raise InvalidToken(token)
        return TrackingToken(fields[0], fields[1], issued)

    def track_html(self, body: str, recipient_id: str, *, opens: bool, clicks: bool) -> str:
        """``body`` with its http(s) links rewritten (``clicks``) and a 1x1 image appended
        (``opens``) for one recipient. Other links (mailto:, tel:, anchors) are left alone."""
        if clicks:

            def rewrite(match: re.Match[str]) -> str:
                raw = match.group(2) if match.group(2) is not None else match.group(3)
                url = html.unescape(raw).strip()
                if not is_web_url(url):
                    return match.group(0)
                tracked = html.escape(self.click_url(recipient_id, url), quote=True)
                return f'{match.group(1)}"{tracked}"'

            body = _ANCHOR_HREF.sub(rewrite, body)
        if opens:
            pixel = (
                f'<img src="{html.escape(self.open_url(recipient_id), quote=True)}" width="1" '
                'height="1" alt="" style="display:block;width:1px;height:1px;border:0">'
            )
            ends = list(_BODY_END.finditer(body))
            if ends:
                cut = ends[-1].start()
                body = body[:cut] + pixel + body[cut:]
            else:
                body += pixel
        return body


def is_web_url(url: str) -> bool:
    lowered = url.lower()
    return (
        lowered.startswith(("http://", "https://"))
        and len(url) <= 4096
        and not any(c in url for c in "\r\n\t\0")
    )
