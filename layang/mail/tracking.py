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
from collections.abc import Iterable
from dataclasses import dataclass

from itsdangerous import BadSignature, URLSafeSerializer

from layang.clock import now_ms
from layang.mail.html_links import Link, rewrite_links
from layang.models import TrackingDomain

OPEN_PATH = "/t/o/"
CLICK_PATH = "/t/c/"
# Merge tags of template languages the sender may have left for a later stage (Jinja,
# Handlebars, Mailchimp, Salesforce): such a link is not ours to freeze into a token.
_PLACEHOLDER = re.compile(r"\{\{|\{%|\*\|.*\|\*|%%\w+%%")
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
        """``body`` with its http(s) links rewritten (``clicks``) and a 1x1 pixel appended
        (``opens``; see :func:`_pixel`) for one recipient.

        A tracked link redirects to the URL a browser would have followed (see
        :mod:`layang.mail.html_links`). Left byte for byte: links that are not http(s)
        (``mailto:``, ``tel:``, ``#fragment``, relative), links holding a template placeholder,
        and links marked ``data-layang-track="off"``."""
        if clicks:

            def rewrite(link: Link) -> str | None:
                if link.url is None or not is_web_url(link.url):
                    return None
                if link.attributes.get("data-layang-track", "").strip().lower() == "off":
                    return None
                if _PLACEHOLDER.search(link.href):
                    return None
                return self.click_url(recipient_id, link.url)

            body = rewrite_links(body, rewrite)
        if opens:
            pixel = _pixel(self.open_url(recipient_id))
            ends = list(_BODY_END.finditer(body))
            if ends:
                cut = ends[-1].start()
                body = body[:cut] + pixel + body[cut:]
            else:
                body += pixel
        return body


def link_domains(account_ids: Iterable[int]) -> dict[int, str]:
    """For each of ``account_ids`` with a verified tracking domain (CONTRACT section 23), the
    one its tracked links and pixel use: the first verified, by name."""
    rows = (
        TrackingDomain.select(TrackingDomain.account, TrackingDomain.domain)
        .where(
            TrackingDomain.account.in_(sorted(set(account_ids)))
            & (TrackingDomain.status == "verified")
        )
        .order_by(TrackingDomain.domain.desc())
        .tuples()
    )
    return dict(rows)


def _pixel(url: str) -> str:
    """The open-tracking pixel for ``url``: the background of an empty 1x1 box, fetched by
    every client that shows images. Not an ``<img>``: SpamAssassin's HTML_IMAGE_ONLY_* rules
    score any image beside little text, in buckets by the bytes of text, which an image's
    long URL adds to; an image of ours would make a short message score as image spam, or
    move it to another bucket, where the same message untracked does not."""
    # Unquoted: the URL is the public URL and a URL-safe token, nothing CSS would end at.
    return (
        f'<div style="background-image:url({html.escape(url, quote=True)});'
        'background-repeat:no-repeat;width:1px;height:1px;font-size:0;line-height:0"></div>'
    )


def is_web_url(url: str) -> bool:
    lowered = url.lower()
    return (
        lowered.startswith(("http://", "https://"))
        and len(url) <= 4096
        and not any(c in url for c in "\r\n\t\0")
    )
