"""The outgoing message, typed, and every rule about what a message may contain.

Each way in parses its wire format once into an :class:`OutgoingMessage` (the HTTP API in its
request schema, the consent flow directly); ``enqueue`` stores it with :meth:`~OutgoingMessage.
to_payload`, and the worker and the composer read it back with :meth:`~OutgoingMessage.
from_payload`. The rules below (address syntax, header names the service owns, media types,
limits) exist only here: the API validates with them and the composer relies on them.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from email import policy
from typing import Any

from layang.mail.idn import InvalidDomain, to_ascii

# --- Rules -------------------------------------------------------------------------------

MAX_RECIPIENTS = 1000  # to + cc + bcc of one message
MAX_SUBJECT = 998  # one header line (RFC 5322)
MAX_DISPLAY_NAME = 256
MAX_HEADER_VALUE = 8000
MAX_FILENAME = 255
MAX_ATTACHMENTS = 100
MAX_HEADERS = 100  # custom headers of one message, besides those the service writes
MAX_NESTING = 32  # levels of objects and arrays in any one request member (substitutionData…)

# RFC 5322 atext and qtext, with RFC 6532's UTF8-non-ascii (but no C1 control and no white
# space): a non-ASCII local part goes out only over SMTPUTF8 (RFC 6531).
_UTF8 = r"(?![\s\x80-\x9f])[^\x00-\x7f]"
_ATOM = rf"(?:[A-Za-z0-9!#$%&'*+/=?^_`{{|}}~-]|{_UTF8})+"
LOCAL_PART = re.compile(
    rf"^(?:{_ATOM}(?:\.{_ATOM})*|\"(?:[\x20\x21\x23-\x5b\x5d-\x7e]|{_UTF8}|\\[\x20-\x7e])*\")$"
)
_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")

HEADER_NAME = re.compile(r"^[!-9;-~]{1,76}$")
"""A header field name: printable ASCII but ':', at most 76 so a folded line stays valid."""

CONTENT_ID = re.compile(r"^[A-Za-z0-9!#$%&'*+/=?^_`{|}~.@-]{1,250}$")
"""A Content-ID without its angle brackets: what a ``cid:`` URL names (RFC 2392). Printable
ASCII but white space and the specials that would end the ``<…>`` or break the header."""

DISPOSITIONS = ("attachment", "inline")

MEDIA_TYPE = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}$"
)

# Headers the service writes itself (or a relay does): a custom one of the same name would
# contradict them, and Bcc would leak the blind copies. Every Content-* header is also owned.
RESERVED_HEADERS = frozenset(
    (
        "from",
        "to",
        "cc",
        "bcc",
        "subject",
        "date",
        "message-id",
        "mime-version",
        "dkim-signature",
        "return-path",
        "resent-bcc",  # blind, like Bcc (RFC 5322 §3.6.6)
        "idempotency-key",  # a request's control field, never a message's
    )
)

SMTP_POLICY = policy.SMTP
"""The stdlib policy used where a structured header has to be parsed (Reply-To, Sender…)."""


class InvalidAddress(ValueError):
    """Not an email address this service can send to or from; the text says why."""


class InvalidHeader(ValueError):
    """A custom header that cannot be sent; the text says why."""


MAX_TAGS = 10  # tags of one send (CONTRACT section 23)
MAX_TAG_LENGTH = 64


def tag_problem(tag: str) -> str | None:
    """Why ``tag`` cannot be a send's tag (one sentence), or None: a tag has 1 to
    :data:`MAX_TAG_LENGTH` characters, none of them a control character."""
    if not 1 <= len(tag) <= MAX_TAG_LENGTH:
        return f"A tag has 1 to {MAX_TAG_LENGTH} characters ({len(tag)} given)."
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in tag):
        return "A tag may not hold control characters."
    return None


def distinct_tags(tags: Iterable[str]) -> tuple[str, ...]:
    """``tags`` in the order given, each once."""
    return tuple(dict.fromkeys(tags))


def normalize_address(value: str) -> str:
    """``local@domain`` with the domain lower-cased and IDNA-encoded (IDNA 2008 with UTS #46,
    :func:`layang.mail.idn.to_ascii`).

    Raises :class:`InvalidAddress` naming what is wrong.
    """
    value = value.strip()
    local, at, domain = value.rpartition("@")
    if not at or not local or not domain:
        raise InvalidAddress("Not a valid email address.")
    if not LOCAL_PART.match(local) or len(local.encode("utf-8", "surrogatepass")) > 64:
        raise InvalidAddress("Not a valid email address.")
    try:
        ascii_domain = to_ascii(domain)
    except InvalidDomain as error:
        raise InvalidAddress(f"Not a valid email address: {error}") from None
    labels = ascii_domain.split(".")
    if len(labels) < 2 or not all(_LABEL.match(label) for label in labels) or labels[-1].isdigit():
        raise InvalidAddress("Not a valid email address: bad domain.")
    address = f"{local}@{ascii_domain}"
    if len(address.encode("utf-8", "surrogatepass")) > 254:
        raise InvalidAddress("Not a valid email address: too long.")
    return address


SIMULATOR_DOMAIN = "simulator.layang.test"
"""Mailboxes here never leave Layang: each gets a fixed outcome (``layang.delivery.simulator``),
and sandbox accounts may send to them without consent."""


def is_simulated(address: str) -> bool:
    """Whether ``address`` is a mailbox of the simulator (its domain, in any case)."""
    return address.rpartition("@")[2].rstrip(".").lower() == SIMULATOR_DOMAIN


def domain_of(email: str) -> str:
    return email.rpartition("@")[2]


def has_line_break(value: str) -> bool:
    """Whether ``value`` holds CR, LF or NUL, none of which may reach a header."""
    return "\r" in value or "\n" in value or "\0" in value


def is_reserved_header(name: str) -> bool:
    lowered = name.lower()
    # X-Layang-* fields are the service's own controls (X-Layang-Id, X-Layang-Stream…).
    return lowered in RESERVED_HEADERS or lowered.startswith(("content-", "x-layang-"))


def check_header(name: str, value: str) -> None:
    """Raise :class:`InvalidHeader` unless ``name: value`` may be sent as a custom header.

    Structured headers the stdlib knows (Reply-To, Sender, List-*, Resent-*) must parse: finding
    that out at acceptance turns a message that could never be written into a clear refusal.
    """
    if not HEADER_NAME.match(name):
        raise InvalidHeader("Not a valid header name.")
    if is_reserved_header(name):
        raise InvalidHeader(f"{name} is set by the service and cannot be given.")
    if has_line_break(value):
        raise InvalidHeader("Must not contain line breaks or NUL characters.")
    try:
        header = SMTP_POLICY.header_factory(name, value)
        header.fold(policy=SMTP_POLICY)
    except Exception:
        raise InvalidHeader("Not a valid value for this header.") from None
    if header.defects:
        raise InvalidHeader(f"Not a valid value: {header.defects[0]}.")


def is_single_part_type(media_type: str) -> bool:
    """A media type an attachment may have: well-formed and not ``multipart/*``."""
    return bool(MEDIA_TYPE.match(media_type)) and not media_type.lower().startswith("multipart/")


def filename_problem(filename: str) -> str | None:
    """Why ``filename`` cannot name an attachment, or None."""
    if len(filename) > MAX_FILENAME:
        return f"Longer than {MAX_FILENAME} characters."
    if "/" in filename or "\\" in filename or any(ord(c) < 32 or ord(c) == 127 for c in filename):
        return "Must not contain path separators or control characters."
    if filename in (".", ".."):
        return "Not a file name."
    return None


def nested_too_deep(value: Any, depth: int = 1) -> bool:
    """Whether ``value`` (JSON data) has objects or arrays more than ``MAX_NESTING`` levels deep
    counting ``value`` itself as level ``depth``. Stops at the limit, so it never exhausts the
    stack however deep ``value`` goes."""
    if not isinstance(value, dict | list):
        return False
    if depth > MAX_NESTING:
        return True
    items = value.values() if isinstance(value, dict) else value
    return any(nested_too_deep(item, depth + 1) for item in items)


_BASE64_TEXT = re.compile(r"[A-Za-z0-9+/ \t\r\n\f\v]*(?:=[ \t\r\n\f\v]*){0,2}")
_ASCII_WHITESPACE = " \t\r\n\f\v"
_WHITESPACE = re.compile(r"\s+")


def is_base64(value: str) -> bool:
    """Whether ``value`` is Base64, white space aside. Checked in place: an attachment can be
    tens of MiB, and decoding it only to check would cost more than the request itself."""
    if not value.isascii():
        try:
            base64.b64decode("".join(value.split()), validate=True)
        except (binascii.Error, ValueError):
            return False
        return True
    if not _BASE64_TEXT.fullmatch(value):
        return False
    return (len(value) - sum(value.count(c) for c in _ASCII_WHITESPACE)) % 4 == 0


def without_whitespace(value: str) -> str:
    """``value`` with its white space taken out; the very same string when it has none."""
    return _WHITESPACE.sub("", value) if _WHITESPACE.search(value) else value


# --- The message -------------------------------------------------------------------------

REQUIRETLS = "requiretls"
TLS_OPTIONAL = "optional"


def tls_requirement(require_tls: bool, tls_required_header: str | None) -> str | None:
    """What a message asks of the sessions that carry it (RFC 8689): ``requiretls`` (the
    REQUIRETLS option), ``optional`` (a ``TLS-Required: No`` header, which relaxes the
    recipient domains' policies) or None. REQUIRETLS wins over the header (section 4.1)."""
    if require_tls:
        return REQUIRETLS
    if tls_required_header is not None and tls_required_header.strip().lower() == "no":
        return TLS_OPTIONAL
    return None


RECIPIENT_KINDS = ("to", "cc", "bcc")


@dataclass(frozen=True, slots=True)
class Mailbox:
    """An address (already normalised) and an optional display name."""

    email: str
    name: str | None = None


def content_id_problem(content_id: str) -> str | None:
    """Why ``content_id`` (angle brackets already removed) cannot be a Content-ID, or None."""
    if not CONTENT_ID.match(content_id):
        return 'Not a valid Content-ID: printable ASCII without spaces or any of <>()[],;:\\".'
    return None


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file: its name, its content as Base64 without white space, its media type (guessed
    from the name when None).

    ``content_id`` (without angle brackets, see :data:`CONTENT_ID`) lets the HTML refer to the
    part as ``cid:<content_id>``; ``disposition`` is ``"attachment"`` or ``"inline"``. An inline
    part with a Content-ID is written beside the HTML, in ``multipart/related``.
    """

    filename: str
    content: str
    media_type: str | None = None
    content_id: str | None = None
    disposition: str = "attachment"

    @property
    def related(self) -> bool:
        """Whether the part belongs with the HTML (an inline image the HTML shows)."""
        return self.disposition == "inline" and self.content_id is not None

    @property
    def size(self) -> int:
        """Decoded size in bytes."""
        return len(self.content) * 3 // 4 - self.content[-2:].count("=")


@dataclass(frozen=True, slots=True)
class Header:
    name: str
    value: str


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    """One message as it will be composed: who, what, and how it is tracked.

    Addresses are normalised and every rule above already holds. ``date_ms`` is the time of
    acceptance (the Date header). A draft (before a template fills it in) may lack a subject
    and bodies; a message handed to ``enqueue`` has a subject and at least one body.
    """

    sender: Mailbox
    subject: str = ""
    to: tuple[Mailbox, ...] = ()
    cc: tuple[Mailbox, ...] = ()
    bcc: tuple[Mailbox, ...] = ()
    reply_to: tuple[Mailbox, ...] = ()
    text: str | None = None
    html: str | None = None
    attachments: tuple[Attachment, ...] = ()
    headers: tuple[Header, ...] = ()
    open_tracking: bool = False
    click_tracking: bool = False
    transactional: bool | None = None
    date_ms: int = 0
    require_tls: bool = False
    generate_text: bool = True
    """An HTML-only message gets a text/plain alternative made from its HTML."""

    @property
    def tls_requirement(self) -> str | None:
        """See :func:`tls_requirement`: the ``requireTls`` option or a ``TLS-Required`` header."""
        header = next((h.value for h in self.headers if h.name.lower() == "tls-required"), None)
        return tls_requirement(self.require_tls, header)

    @property
    def tracked(self) -> bool:
        """Whether the HTML carries per-recipient tracking URLs (so each recipient gets a copy
        of their own)."""
        return self.html is not None and (self.open_tracking or self.click_tracking)

    @property
    def is_transactional(self) -> bool:
        """Transactional unless sent with ``transactional: false``: only mail that is not
        carries one-click unsubscribe headers and is stopped by ``unsubscribe`` entries."""
        return self.transactional is not False

    @property
    def stream(self) -> str:
        """``transactional`` or ``broadcast`` (docs/api.md, "Streams and the circuit breaker"):
        broadcast is mail that is not transactional."""
        return "transactional" if self.is_transactional else "broadcast"

    def envelope_recipients(self) -> list[tuple[str, str]]:
        """(address, kind) for every distinct recipient; an address listed twice gets one email,
        under the first kind it appears in (to, then cc, then bcc)."""
        seen: set[str] = set()
        recipients = []
        for kind in RECIPIENT_KINDS:
            for mailbox in getattr(self, kind):
                key = mailbox.email.lower()
                if key not in seen:
                    seen.add(key)
                    recipients.append((mailbox.email, kind))
        return recipients

    def content_size(self) -> int:
        """Bytes of bodies and decoded attachments: what ``LAYANG_MAX_MESSAGE_BYTES`` limits."""
        # An ASCII string's length is its UTF-8 size: no need to encode a large body to know.
        size = sum(_utf8_size(part) for part in (self.text, self.html) if part is not None)
        return size + sum(attachment.size for attachment in self.attachments)

    def with_html(self, html: str) -> OutgoingMessage:
        return replace(self, html=html)

    # -- storage --------------------------------------------------------------------------

    def to_payload(self) -> dict[str, Any]:
        """The stored form (JSON-ready), tagged with its format version. Empty parts are left
        out, so a plain message stays small."""
        payload: dict[str, Any] = {
            "v": PAYLOAD_VERSION,
            "sender": _mailbox_out(self.sender),
            "subject": self.subject,
            "date_ms": self.date_ms,
        }
        for kind in (*RECIPIENT_KINDS, "reply_to"):
            mailboxes = getattr(self, kind)
            if mailboxes:
                payload[kind] = [_mailbox_out(m) for m in mailboxes]
        if self.text is not None:
            payload["text"] = self.text
        if self.html is not None:
            payload["html"] = self.html
        if self.attachments:
            payload["attachments"] = [_attachment_out(a) for a in self.attachments]
        if self.headers:
            payload["headers"] = [[h.name, h.value] for h in self.headers]
        for flag in ("open_tracking", "click_tracking"):
            if getattr(self, flag):
                payload[flag] = True
        if self.transactional is not None:
            payload["transactional"] = self.transactional
        if self.require_tls:
            payload["require_tls"] = True
        if not self.generate_text:
            payload["generate_text"] = False
        return payload

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> OutgoingMessage:
        """Read a stored payload of any version this release has written (see
        :data:`PAYLOAD_VERSION`). Raises ``ValueError`` for one it cannot read."""
        version = payload.get("v", 1)
        if version == PAYLOAD_VERSION:
            return cls(
                sender=_mailbox_in(payload["sender"]),
                subject=payload["subject"],
                to=_mailboxes_in(payload.get("to", ())),
                cc=_mailboxes_in(payload.get("cc", ())),
                bcc=_mailboxes_in(payload.get("bcc", ())),
                reply_to=_mailboxes_in(payload.get("reply_to", ())),
                text=payload.get("text"),
                html=payload.get("html"),
                attachments=tuple(Attachment(*a) for a in payload.get("attachments", ())),
                headers=tuple(Header(*h) for h in payload.get("headers", ())),
                open_tracking=payload.get("open_tracking", False),
                click_tracking=payload.get("click_tracking", False),
                transactional=payload.get("transactional"),
                date_ms=payload["date_ms"],
                require_tls=payload.get("require_tls", False),
                generate_text=payload.get("generate_text", True),
            )
        if version == 1:
            return _from_payload_v1(payload)
        raise ValueError(f"unknown message payload version {version!r}")


PAYLOAD_VERSION = 2
"""Version 2: this module's field names; an attachment is ``[filename, content, media_type]``,
with ``content_id`` and ``disposition`` after them when either is set. Version 1 (no ``"v"``):
the API's camelCase request as the first releases stored it; still read, so mail queued before
an upgrade is delivered."""


def _utf8_size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode())


def _attachment_out(attachment: Attachment) -> list[str | None]:
    # Positional, and the two later fields only when set: payloads written before they existed
    # read back the same, and a plain attachment stays as small as it was.
    entry = [attachment.filename, attachment.content, attachment.media_type]
    if attachment.content_id is not None or attachment.disposition != "attachment":
        entry += [attachment.content_id, attachment.disposition]
    return entry


def _mailbox_out(mailbox: Mailbox) -> list[str] | str:
    return [mailbox.email, mailbox.name] if mailbox.name else mailbox.email


def _mailbox_in(value: str | list[str]) -> Mailbox:
    return Mailbox(value) if isinstance(value, str) else Mailbox(value[0], value[1])


def _mailboxes_in(values: Iterable[str | list[str]]) -> tuple[Mailbox, ...]:
    return tuple(_mailbox_in(value) for value in values)


def _from_payload_v1(payload: Mapping[str, Any]) -> OutgoingMessage:
    def mailboxes(key: str) -> tuple[Mailbox, ...]:
        return tuple(Mailbox(a["email"], a.get("name") or None) for a in payload.get(key, ()))

    options = payload.get("options") or {}
    sender = payload["from"]
    return OutgoingMessage(
        sender=Mailbox(sender["email"], sender.get("name") or None),
        subject=payload["subject"],
        to=mailboxes("to"),
        cc=mailboxes("cc"),
        bcc=mailboxes("bcc"),
        reply_to=mailboxes("replyTo"),
        text=payload.get("bodyText"),
        html=payload.get("bodyHtml"),
        attachments=tuple(
            Attachment(a["filename"], "".join(a["value"].split()), a.get("mimeType"))
            for a in payload.get("attachments", ())
        ),
        headers=tuple(Header(h["name"], h["value"]) for h in payload.get("headers", ())),
        open_tracking=bool(options.get("openTracking")),
        click_tracking=bool(options.get("clickTracking")),
        transactional=options.get("transactional"),
        date_ms=payload["date"],
    )
