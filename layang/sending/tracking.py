"""Open and click tracking: signed per-recipient URLs put into the HTML part (the events are
recorded by :mod:`layang.domain.engagement` when they are fetched).

A token is the recipient record's id (and, for a click, the original URL) signed with the
secret key: nothing in it can be changed without the signature failing, so a tracking link can
never be turned into a redirect to somewhere else.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

from itsdangerous import BadSignature, URLSafeSerializer

OPEN_PATH = "/t/o/"
CLICK_PATH = "/t/c/"
_ANCHOR_HREF = re.compile(
    r"""(<(?:a|area)\b[^>]*?\bhref\s*=\s*)(?:"([^"]*)"|'([^']*)')""", re.IGNORECASE
)
_BODY_END = re.compile(r"</body\s*>", re.IGNORECASE)


class InvalidToken(Exception):
    """The token is not one this service signed, or names nothing."""


@dataclass(frozen=True)
class Tracker:
    """Makes and reads tracking tokens for one installation (its secret and public URL)."""

    secret_key: str
    public_url: str

    def _serializer(self) -> URLSafeSerializer:
        return URLSafeSerializer(self.secret_key, salt="layang-tracking")

    def open_url(self, recipient_id: str) -> str:
        return self.public_url + OPEN_PATH + self._serializer().dumps(["o", recipient_id])

    def click_url(self, recipient_id: str, url: str) -> str:
        return self.public_url + CLICK_PATH + self._serializer().dumps(["c", recipient_id, url])

    def read(self, token: str, kind: str) -> tuple[str, str | None]:
        """(recipient id, url or None) from a token of ``kind`` ("o" or "c").
        Raises ``InvalidToken``."""
        try:
            value = self._serializer().loads(token)
        except BadSignature:
            raise InvalidToken(token) from None
        if not isinstance(value, list) or not value or value[0] != kind:
            raise InvalidToken(token)
        if kind == "o" and len(value) == 2 and isinstance(value[1], str):
            return value[1], None
        if kind == "c" and len(value) == 3 and all(isinstance(v, str) for v in value[1:]):
            url = value[2]
            if is_web_url(url):
                return value[1], url
        raise InvalidToken(token)

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
