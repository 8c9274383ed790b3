"""The MIME writer: what it writes must parse back to exactly what the payload said.

Every message is read back with the stdlib parser (``email.policy.default``), and compared
with what the former ``EmailMessage``-based composer (``reference_compose``, kept below) gives
for the same payload.
"""

from __future__ import annotations

import base64
import binascii
import email
import email.policy
import json
import random
import re
import types
from datetime import UTC, datetime
from email import errors
from email.headerregistry import Address
from email.message import EmailMessage
from email.utils import format_datetime, getaddresses
from typing import Any

import pytest

from layang.mail import compose
from layang.mail.compose import compose_message as compose_typed
from layang.mail.compose import guess_mime_type, transfer_encoding
from layang.mail.message import SMTP_POLICY, Attachment, Mailbox, OutgoingMessage
from layang.mail.text_part import text_from_html

MESSAGE_ID = "<0123456789abcdef@sender.example>"
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
INNER_MESSAGE = (
    b"From: Inner <inner@origin.example>\r\n"
    b"To: someone@origin.example\r\n"
    b"Subject: forwarded\r\n"
    b"MIME-Version: 1.0\r\n"
    b"Content-Type: text/plain; charset=us-ascii\r\n"
    b"\r\n"
    b"The original text.\r\n"
    b"--=_not-our-boundary\r\n"
)
HOSTILE_NAMES = [
    'Ana, "the" <x@y> Tester',
    "=?utf-8?q?x?=",
    "a\\\\b",
    "a\\b",
    "Zoë Ångström-Müller",
    "José García Fernández de la Peña y Sánchez-Villalobos",
    "李小龍",
    "🙂 Smiley, Inc.",
    " leading and trailing ",
    "two  spaces",
    "Ünïcödé  with  double  spaces ",
    "x" * 256,
    "é" * 256,
    "O'Brien (Sales); <ops@x.example>",
    "tab\there",
    "ctrl\x01\x7fchars",
    "=?utf-8?b?w6k=?= literal",
    "?= =? ?q? =?",
]
HOSTILE_TEXT = [
    "Plain subject",
    "Héllo wörld, ça va ?",
    "=?utf-8?q?x?=",
    "not=?an encoded word?=",
    'Ana, "the" <x@y> Tester \\ back\\slash',
    "  leading",
    "trailing  ",
    "inner   spaces and\ttabs",
    "🙂" * 40,
    "日本語のテキスト" * 20,
    "word " * 400,
    "z" * 2000,
    "mixed é " + "y" * 1000 + " end",
    "\x00\x01\x1f\x7f controls",
    "\u2028line\u2029separators\x85",
]


def compose_message(payload: dict[str, Any], message_id: str) -> bytes:
    """Compose a message given in the stored format of the first releases (camelCase, as the
    API took it), which the service still reads for mail queued before an upgrade."""
    return compose_typed(OutgoingMessage.from_payload(payload), message_id)


def expected_text(payload: dict[str, Any]) -> str | None:
    """The text part a message gets: its own, or one made from its HTML."""
    text, html = payload.get("bodyText"), payload.get("bodyHtml")
    if text is None and html is not None:
        return text_from_html(html) or None
    return text


def header_address(email: str, name: str | None = None) -> Address:
    """An ``email.headerregistry.Address`` for a normalised address (name encoded as needed)."""
    local, _, domain = email.rpartition("@")
    if local.startswith('"'):
        # Address quotes the user name itself when needed; give it the unquoted form.
        local = re.sub(r"\\(.)", r"\1", local[1:-1])
    return Address(display_name=name or "", username=local, domain=domain)


def reference_compose(payload: dict[str, Any], message_id: str) -> bytes:
    """The composer as it was before writing the bytes directly, built on ``EmailMessage``."""

    def addresses(entries: list[dict[str, str]]) -> list[Any]:
        return [header_address(entry["email"], entry.get("name")) for entry in entries]

    message = EmailMessage(policy=SMTP_POLICY)
    message["From"] = header_address(payload["from"]["email"], payload["from"].get("name"))
    message["To"] = addresses(payload["to"])
    if payload.get("cc"):
        message["Cc"] = addresses(payload["cc"])
    if payload.get("replyTo"):
        message["Reply-To"] = addresses(payload["replyTo"])
    message["Subject"] = payload["subject"]
    message["Date"] = format_datetime(datetime.fromtimestamp(payload["date"] / 1000, UTC))
    message["Message-ID"] = message_id
    for header in payload.get("headers", ()):
        message[header["name"]] = header["value"]

    text, html = expected_text(payload), payload.get("bodyHtml")

    def cte(body: str) -> str:
        if body.isascii() and all(len(line) <= 998 for line in body.splitlines()):
            return "7bit"
        return "quoted-printable"

    if text is not None:
        message.set_content(text, cte=cte(text))
        if html is not None:
            message.add_alternative(html, subtype="html", cte=cte(html))
    else:
        message.set_content(html, subtype="html", cte=cte(html))

    for attachment in payload.get("attachments", ()):
        if attachment.get("mimeType"):
            maintype, _, subtype = attachment["mimeType"].lower().partition("/")
        else:
            maintype, subtype = guess_mime_type(attachment["filename"])
        message.add_attachment(
            base64.b64decode(attachment["value"]),
            maintype=maintype,
            subtype=subtype,
            filename=attachment["filename"],
        )
    return message.as_bytes(policy=SMTP_POLICY)


# --- Helpers -------------------------------------------------------------------------------


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def make_payload(**fields: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "from": {"email": "shop@sender.example", "name": "Shop"},
        "to": [{"email": "ana@rcpt.example", "name": "Ana"}],
        "subject": "Your order",
        "date": 1_700_000_000_123,
        "bodyText": "Thanks for your order.\n",
        "options": {"openTracking": True},
    }
    payload.update(fields)
    return {key: value for key, value in payload.items() if value is not None}


def parse(raw: bytes) -> EmailMessage:
    return email.message_from_bytes(raw, policy=email.policy.default)


def check_wire(raw: bytes) -> None:
    """7-bit clean, CRLF only, no line over 998 octets, no blank or white-space-ended header
    line."""
    assert raw.isascii()
    assert b"\r" not in raw.replace(b"\r\n", b"")
    assert b"\n" not in raw.replace(b"\r\n", b"")
    assert raw.endswith(b"\r\n")
    lines = raw.split(b"\r\n")
    assert max(map(len, lines)) <= 998
    head = raw.split(b"\r\n\r\n", 1)[0]
    for line in head.split(b"\r\n"):
        assert line.strip(b" \t"), "a header line must not be blank"
        assert not line.endswith((b" ", b"\t")), "white space at a line end may be lost"


def raw_header(raw: bytes, name: str) -> str | None:
    """The unfolded value of the first top-level header ``name``, still encoded."""
    head = raw.split(b"\r\n\r\n", 1)[0].decode("ascii")
    for line in re.sub(r"\r\n(?=[ \t])", "", head).split("\r\n"):
        field, _, value = line.partition(":")
        if field.lower() == name.lower():
            return value[1:] if value.startswith(" ") else value
    return None


ENCODED_WORD = re.compile(r"=\?utf-8\?([bq])\?([^?]*)\?=", re.IGNORECASE)


def decode_rfc2047(text: str) -> str:
    """RFC 2047 decoding of a phrase: white space between adjacent encoded-words is dropped.

    (The stdlib parser keeps it in display names, which RFC 2047 section 6.2 rules out; a long
    display name has to be split into several encoded-words.)
    """
    out: list[str] = []
    position = 0
    after_word = False
    for match in ENCODED_WORD.finditer(text):
        between = text[position : match.start()]
        if not (after_word and between.strip(" \t") == ""):
            out.append(between)
        kind, encoded = match.groups()
        if kind.lower() == "b":
            data = base64.b64decode(encoded)
        else:
            data = binascii.a2b_qp(encoded.encode("ascii"), header=True)
        out.append(data.decode("utf-8"))  # strict: every word holds whole characters
        position, after_word = match.end(), True
    out.append(text[position:])
    return "".join(out)


def mailboxes(raw: bytes, name: str) -> list[tuple[str, str]]:
    """(display name, address) of an address header: names decoded per RFC 2047, addresses
    as the stdlib parser reads them."""
    value = raw_header(raw, name)
    assert value is not None
    parsed = parse(raw)[name]
    names = [decode_rfc2047(display) for display, _ in getaddresses([value])]
    specs = [address.addr_spec for address in parsed.addresses]
    assert len(names) == len(specs), value
    return list(zip(names, specs, strict=True))


def expected_mailboxes(entries: list[dict[str, str]]) -> list[tuple[str, str]]:
    return [
        (
            (entry.get("name") or "").replace("\r\n", " ").replace("\r", " ").replace("\n", " "),
            header_address(entry["email"]).addr_spec,
        )
        for entry in entries
    ]


def text_as_sent(text: str) -> str:
    """What a text body reads back as: line breaks as LF, and a final one."""
    text = re.sub(r"\r\n|\r", "\n", text)
    return text if text.endswith("\n") else text + "\n"


def summary(raw: bytes) -> dict[str, Any]:
    """What a reader sees of a message, for comparing two writers."""
    message = parse(raw)
    headers = {}
    for name in ("From", "To", "Cc", "Reply-To"):
        if message[name] is not None:
            headers[name] = [
                (address.display_name, address.addr_spec) for address in message[name].addresses
            ]
    for name in ("Subject", "Date", "Message-ID", "MIME-Version"):
        headers[name] = str(message[name])
    custom = [
        (name, str(value))
        for name, value in message.items()
        if name.lower()
        not in {"from", "to", "cc", "reply-to", "subject", "date", "message-id", "mime-version"}
        and not name.lower().startswith("content-")
    ]
    parts = []
    for part in message.walk():
        entry: dict[str, Any] = {"type": part.get_content_type()}
        if not part.is_multipart():
            if part.get_content_disposition() == "attachment":
                entry["filename"] = part.get_filename()
                entry["content"] = part.get_payload(decode=True)
            else:
                entry["charset"] = part.get_content_charset()
                entry["content"] = part.get_content().replace("\r\n", "\n")
        parts.append(entry)
    return {"headers": headers, "custom": custom, "parts": parts}


def check_against_payload(payload: dict[str, Any], raw: bytes) -> EmailMessage:
    """Every requirement on the written message that the payload alone determines."""
    check_wire(raw)
    message = parse(raw)
    assert mailboxes(raw, "From") == expected_mailboxes([payload["from"]])
    for key, name in (("to", "To"), ("cc", "Cc"), ("replyTo", "Reply-To")):
        if payload.get(key):
            assert mailboxes(raw, name) == expected_mailboxes(payload[key])
        else:
            assert message[name] is None
    assert message["Bcc"] is None
    for entry in payload.get("bcc", ()):
        assert entry["email"].encode() not in raw
    assert message["Subject"] == re.sub(r"\r\n|[\r\n]", " ", payload["subject"])
    assert message["Message-ID"] == MESSAGE_ID
    assert message["MIME-Version"] == "1.0"
    assert message["Date"].datetime == datetime.fromtimestamp(payload["date"] // 1000, UTC)
    for header in payload.get("headers", ()):
        value = re.sub(r"\r\n|[\r\n]", " ", header["value"])
        assert [str(v) for v in message.get_all(header["name"])] == [value]

    text, html = expected_text(payload), payload.get("bodyHtml")
    attachments = payload.get("attachments", [])
    bodies = [(s, body) for s, body in (("plain", text), ("html", html)) if body is not None]
    if len(bodies) == 2:
        alternative = message.get_payload(0) if attachments else message
        assert alternative.get_content_type() == "multipart/alternative"
        leaves = alternative.get_payload()
    else:
        leaves = [message.get_payload(0) if attachments else message]
    assert [leaf.get_content_type() for leaf in leaves] == [f"text/{s}" for s, _ in bodies]
    for leaf, (_, body) in zip(leaves, bodies, strict=True):
        assert leaf.get_content_charset() == "utf-8"
        assert leaf["Content-Transfer-Encoding"] in ("7bit", "quoted-printable")
        assert leaf.get_content().replace("\r\n", "\n") == text_as_sent(body)

    if attachments:
        assert message.get_content_type() == "multipart/mixed"
        found = message.get_payload()[1:]
        assert len(found) == len(attachments)
        for part, attachment in zip(found, attachments, strict=True):
            assert part.get_content_disposition() == "attachment"
            # (The stdlib strips white space around file names.)
            assert part.get_filename() == attachment["filename"].strip()
            media_type = attachment.get("mimeType") or "/".join(
                guess_mime_type(attachment["filename"])
            )
            assert part.get_content_type() == media_type.lower()
            data = base64.b64decode(attachment["value"])
            if part.get_content_type() == "message/rfc822":
                inner = part.get_payload(0)
                assert inner.as_bytes(policy=SMTP_POLICY) == parse(data).as_bytes(
                    policy=SMTP_POLICY
                )
            else:
                assert part["Content-Transfer-Encoding"] == "base64"
                assert part.get_payload(decode=True) == data
    else:
        assert not message.is_multipart() or message.get_content_type() == "multipart/alternative"
    return message


ATTACHMENTS = [
    {"filename": "pixel.png", "value": b64(PNG), "mimeType": "IMAGE/PNG"},
    {"filename": "notes.txt", "value": b64("naïve\nline two\r\n".encode())},
    {"filename": "data.bin", "value": b64(bytes(range(256)) * 40)},
    {"filename": "forwarded.eml", "value": b64(INNER_MESSAGE), "mimeType": "message/rfc822"},
    {"filename": "😀 Grüße, \"quoted\" 'name'.pdf", "value": b64(b"%PDF-1.4\n%%EOF\n")},
    {"filename": "=?utf-8?q?x?=.txt", "value": b64(b"x"), "mimeType": "text/plain"},
    {"filename": "é" * 120 + ".csv", "value": b64(b"a,b\n1,2\n")},
    {"filename": "long " * 40 + ".txt", "value": b64(b"")},
]


# --- Structure -----------------------------------------------------------------------------


@pytest.mark.parametrize("attachments", [None, ATTACHMENTS[:2]], ids=["bare", "attachments"])
@pytest.mark.parametrize(
    "bodies",
    [
        {"bodyText": "Hello Ana,\r\nyour order shipped.\r\n"},
        {"bodyText": None, "bodyHtml": "<p>Hello Ana</p>"},
        {"bodyText": "Hello Ana", "bodyHtml": "<p>Hello Ana</p>"},
    ],
    ids=["text", "html", "both"],
)
@pytest.mark.parametrize(
    "recipients",
    [
        {},
        {
            "to": [{"email": "ana@rcpt.example", "name": "Ana"}, {"email": "bo@rcpt.example"}],
            "cc": [{"email": "cy@rcpt.example", "name": "Cy"}],
            "bcc": [{"email": "hidden@blind.example", "name": "Hidden"}],
            "replyTo": [{"email": "help@sender.example", "name": "Help desk"}],
        },
        {"bcc": [{"email": "hidden@blind.example"}]},
    ],
    ids=["to", "all", "bcc"],
)
def test_every_body_and_recipient_combination(recipients, bodies, attachments):
    payload = make_payload(**recipients, **bodies, attachments=attachments)
    raw = compose_message(payload, MESSAGE_ID)
    check_against_payload(payload, raw)
    assert summary(raw) == summary(reference_compose(payload, MESSAGE_ID))


def test_header_order_and_values():
    payload = make_payload(
        cc=[{"email": "cy@rcpt.example"}],
        replyTo=[{"email": "help@sender.example"}],
        headers=[{"name": "X-Order", "value": "42"}, {"name": "List-Id", "value": "<a.b>"}],
        bodyHtml="<p>x</p>",
    )
    raw = compose_message(payload, MESSAGE_ID)
    names = [line.split(b":")[0] for line in raw.split(b"\r\n\r\n")[0].split(b"\r\n")]
    names = [name for name in names if not name.startswith((b" ", b"\t"))]
    assert names == [
        b"From",
        b"To",
        b"Cc",
        b"Reply-To",
        b"Subject",
        b"Date",
        b"Message-ID",
        b"MIME-Version",
        b"X-Order",
        b"List-Id",
        b"Content-Type",
    ]
    assert b"\r\nDate: Tue, 14 Nov 2023 22:13:20 +0000\r\n" in raw
    assert raw.startswith(b"From: Shop <shop@sender.example>\r\nTo: Ana <ana@rcpt.example>\r\n")


@pytest.mark.parametrize(
    "epoch_ms", [0, 1_700_000_000_999, 951_782_400_000, -1, -86_400_500, 4_102_444_800_000]
)
def test_date_is_rfc5322_utc(epoch_ms):
    raw = compose_message(make_payload(date=epoch_ms), MESSAGE_ID)
    written = raw_header(raw, "Date")
    assert written == format_datetime(datetime.fromtimestamp(epoch_ms // 1000, UTC))
    assert written.endswith(" +0000")


def test_a_message_needs_a_body():
    with pytest.raises(ValueError, match="a text or an HTML body"):
        compose_message(make_payload(bodyText=None, attachments=ATTACHMENTS[:1]), MESSAGE_ID)


def test_options_and_bcc_never_reach_the_message():
    payload = make_payload(
        bcc=[{"email": "secret@blind.example", "name": "Secret Person"}],
        options={"clickTracking": True, "openTracking": True},
    )
    raw = compose_message(payload, MESSAGE_ID)
    assert b"blind.example" not in raw
    assert b"Secret" not in raw
    assert b"Tracking" not in raw
    assert parse(raw)["Bcc"] is None


# --- Headers -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_display_names_read_back_exactly(name):
    payload = make_payload(
        **{"from": {"email": "shop@sender.example", "name": name}},
        to=[
            {"email": "ana@rcpt.example", "name": name},
            {"email": '"odd, local"@rcpt.example', "name": name},
            {"email": "bo@rcpt.example"},
        ],
        cc=[{"email": "cy@rcpt.example", "name": name}],
        replyTo=[{"email": "help@sender.example", "name": name}],
    )
    raw = compose_message(payload, MESSAGE_ID)
    message = check_against_payload(payload, raw)
    # The address list keeps its shape: a comma or quote in a name adds no address.
    assert len(message["To"].addresses) == 3
    # (Control characters decode fine; the parser only notes that they are there.)
    assert all(isinstance(d, errors.NonPrintableDefect) for d in message["To"].defects)
    # The stdlib parser reads it back exactly too, unless the name takes several adjacent
    # encoded-words (it keeps the white space between them) or has white space other than
    # single spaces in an encoded-word (it collapses it, as it does outside quoted strings).
    value = raw_header(raw, "Cc")
    encoded = "=?utf-8?" in value
    if not re.search(r"\?=\s+=\?", value) and not (encoded and re.search(r"\s\s|[^\S ]", name)):
        assert message["Cc"].addresses[0].display_name == name


@pytest.mark.parametrize("text", HOSTILE_TEXT)
def test_subjects_and_custom_headers_read_back_exactly(text):
    payload = make_payload(
        subject=text,
        headers=[
            {"name": "X-Note", "value": text},
            {"name": "X-Other", "value": "kept"},
        ],
    )
    raw = compose_message(payload, MESSAGE_ID)
    check_against_payload(payload, raw)


def test_headers_fold_to_78_columns():
    payload = make_payload(
        subject="A fairly long subject line " * 20,
        to=[{"email": f"r{n}@rcpt.example", "name": f"Recipient Number {n}"} for n in range(30)],
        headers=[{"name": "X-Tags", "value": "ünïcode tag " * 50}],
        attachments=[ATTACHMENTS[4], ATTACHMENTS[6]],
    )
    raw = compose_message(payload, MESSAGE_ID)
    check_against_payload(payload, raw)
    head = raw.split(b"\r\n\r\n", 1)[0]
    assert max(map(len, head.split(b"\r\n"))) <= 78
    for part_head in re.findall(rb"\r\n--=_[0-9a-f]+\r\n(.*?)\r\n\r\n", raw, re.DOTALL):
        assert max(map(len, part_head.split(b"\r\n"))) <= 78


def test_long_unbreakable_words_stay_within_998():
    url = "<https://sender.example/unsubscribe?token=" + "a" * 600 + ">"
    payload = make_payload(
        subject="s" * 950 + " and " + "t" * 3000,
        headers=[{"name": "List-Unsubscribe", "value": url}],
    )
    raw = compose_message(payload, MESSAGE_ID)
    check_against_payload(payload, raw)
    # A URL is structured data: written as is (one long line), never as encoded-words.
    assert f"List-Unsubscribe: {url}\r\n".encode() in raw


@pytest.mark.parametrize(
    "text",
    [
        "x" * 800 + "  " + "y" * 800,
        "a" + " " * 2000 + "b",
        "é" + " " * 200 + "b" + " " * 45 + "c",
        " " * 300,
        "many   spaces   between   words " * 30,
    ],
)
def test_runs_of_spaces_stay_within_998(text):
    payload = make_payload(
        subject=text,
        to=[{"email": "ana@rcpt.example", "name": text}],
        headers=[{"name": "X-Note", "value": text}],
    )
    check_against_payload(payload, compose_message(payload, MESSAGE_ID))


@pytest.mark.parametrize(
    "where",
    ["subject", "name", "header", "filename", "message_id"],
)
def test_line_breaks_in_values_cannot_inject_headers(where):
    evil = "innocent\r\nBcc: victim@evil.example\nX-Injected: yes\rZ: z"
    payload = make_payload(attachments=[{"filename": "a.txt", "value": b64(b"a")}])
    message_id = MESSAGE_ID
    if where == "subject":
        payload["subject"] = evil
    elif where == "name":
        payload["to"] = [{"email": "ana@rcpt.example", "name": evil}]
    elif where == "header":
        payload["headers"] = [{"name": "X-Note", "value": evil}]
    elif where == "filename":
        payload["attachments"][0]["filename"] = evil
    else:
        message_id = evil
    raw = compose_message(payload, message_id)
    check_wire(raw)
    message = parse(raw)
    assert message["Bcc"] is None
    assert message["X-Injected"] is None
    assert message["Z"] is None
    assert not re.search(rb"\r\n(Bcc|X-Injected|Z):", raw)
    flat = "innocent Bcc: victim@evil.example X-Injected: yes Z: z"
    if where == "subject":
        assert message["Subject"] == flat
    elif where == "name":
        assert mailboxes(raw, "To") == [(flat, "ana@rcpt.example")]
    elif where == "header":
        assert message["X-Note"] == flat
    elif where == "filename":
        assert message.get_payload(1).get_filename() == evil
    else:
        assert message["Message-ID"] == flat


def test_structured_custom_headers_are_parsed_and_rewritten():
    reply_to = 'Zoë Ångström <zoe@help.example>, "Desk, 2nd" <desk@help.example>, team:;'
    payload = make_payload(
        headers=[
            {"name": "Reply-To", "value": reply_to},
            {"name": "Sender", "value": "Bulk Sender <bulk@sender.example>"},
            {"name": "Resent-Date", "value": "Tue, 14 Nov 2023 22:13:20 +0000"},
            {"name": "In-Reply-To", "value": "<parent@sender.example>"},
        ]
    )
    raw = compose_message(payload, MESSAGE_ID)
    check_wire(raw)
    message = parse(raw)
    expected = SMTP_POLICY.header_factory("Reply-To", reply_to)
    assert [(a.display_name, a.addr_spec) for a in message["Reply-To"].addresses] == [
        (a.display_name, a.addr_spec) for a in expected.addresses
    ]
    assert [g.display_name for g in message["Reply-To"].groups] == [None, None, "team"]
    assert message["Sender"].address.addr_spec == "bulk@sender.example"
    assert message["Resent-Date"].datetime == datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)
    assert message["In-Reply-To"] == "<parent@sender.example>"
    assert summary(raw) == summary(reference_compose(payload, MESSAGE_ID))


def test_reply_to_twice_is_refused_as_before():
    payload = make_payload(
        replyTo=[{"email": "help@sender.example"}],
        headers=[{"name": "Reply-To", "value": "other@sender.example"}],
    )
    with pytest.raises(ValueError, match="at most 1"):
        reference_compose(payload, MESSAGE_ID)
    with pytest.raises(ValueError, match="at most 1"):
        compose_message(payload, MESSAGE_ID)


@pytest.mark.parametrize("name", ["Bcc", "content-type", "Subject", "MIME-Version", "Bad Name"])
def test_custom_headers_cannot_replace_the_service_ones(name):
    payload = make_payload(headers=[{"name": name, "value": "x@y.example"}])
    with pytest.raises(ValueError, match=name):
        compose_message(payload, MESSAGE_ID)


@pytest.mark.parametrize(
    "address", ["a@b..example", "a b@c.example", "a@b.example\r\nBcc: x@y.z", "@x.y"]
)
def test_addresses_that_are_not_normalised_are_refused(address):
    with pytest.raises(ValueError, match="not a normalised email address"):
        compose_message(make_payload(to=[{"email": address}]), MESSAGE_ID)


# --- Bodies --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "encoding"),
    [
        ("Plain ASCII.\nTwo lines.", "7bit"),
        ("x" * 998, "7bit"),
        ("x" * 999, "quoted-printable"),
        ("naïve", "quoted-printable"),
        ("form\x0cfeeds " + "\x0c".join(["y" * 600] * 3), "quoted-printable"),
        ("nul\x00", "quoted-printable"),
        ("crlf\r\n" * 3 + "cr\r" + "lf\n", "7bit"),
    ],
)
def test_transfer_encoding(body, encoding):
    assert transfer_encoding(body) == encoding
    raw = compose_message(make_payload(bodyText=body), MESSAGE_ID)
    assert parse(raw)["Content-Transfer-Encoding"] == encoding
    check_against_payload(make_payload(bodyText=body), raw)


@pytest.mark.parametrize(
    "body",
    [
        "a" * 5000,
        "é" * 5000,
        "mixed\r\nline\nends\rhere\n\n\r\n",
        "no final line break",
        "",
        "trailing spaces   \ntabs\t\t\n",
        ".\n..\nFrom the start\n-- \nsignature",
        "=_ equals =3D and =\n= at ends=",
        "\x00\x01\x1b\x7f controls",
        "\u2028\u2029\x85\x0b\x0c unicode breaks",
        "🙂 " * 3000,
        "\n\n\n",
        "\r\r",
    ],
)
def test_bodies_read_back_exactly(body):
    payload = make_payload(bodyText=body, bodyHtml=f"<pre>{body}</pre>")
    raw = compose_message(payload, MESSAGE_ID)
    check_against_payload(payload, raw)
    assert summary(raw)["parts"] == summary(reference_compose(payload, MESSAGE_ID))["parts"]


def test_quoted_printable_lines_are_short():
    raw = compose_message(make_payload(bodyText="é" + "x" * 5000), MESSAGE_ID)
    body = raw.split(b"\r\n\r\n", 1)[1]
    assert max(map(len, body.split(b"\r\n"))) <= 76


def test_boundary_is_fresh_and_absent_from_7bit_content(monkeypatch):
    tokens = iter(["taken", "taken", "fresh", "other"])
    fake = types.SimpleNamespace(token_hex=lambda size: next(tokens))
    monkeypatch.setattr(compose, "secrets", fake)
    body = "The next line looks like a boundary.\n--=_taken\nand the end.\n"
    payload = make_payload(bodyText=body, bodyHtml="<p>x</p>")
    raw = compose_message(payload, MESSAGE_ID)
    assert b'boundary="=_fresh"' in raw
    check_against_payload(payload, raw)


def test_boundaries_are_random():
    payload = make_payload(bodyHtml="<p>x</p>", attachments=ATTACHMENTS[:1])
    seen = set()
    for _ in range(20):
        raw = compose_message(payload, MESSAGE_ID)
        found = re.findall(rb'boundary="(=_[0-9a-f]{32})"', raw)
        assert len(found) == 2 and found[0] != found[1]
        seen.update(found)
    assert len(seen) == 40


# --- Attachments ---------------------------------------------------------------------------


def test_attachments_of_every_kind():
    payload = make_payload(bodyHtml="<p>See attached.</p>", attachments=ATTACHMENTS)
    raw = compose_message(payload, MESSAGE_ID)
    message = check_against_payload(payload, raw)
    types_found = [part.get_content_type() for part in message.iter_attachments()]
    assert types_found == [
        "image/png",
        "text/plain",
        "application/octet-stream",
        "message/rfc822",
        "application/pdf",
        "text/plain",
        "text/csv",
        "text/plain",
    ]
    # Base64 in lines of 76; the forwarded message as is (RFC 2046 forbids base64 there).
    data_part = raw.split(b'filename="data.bin"\r\n\r\n', 1)[1].split(b"\r\n\r\n--", 1)[0]
    assert {len(line) for line in data_part.split(b"\r\n")[:-1]} == {76}
    assert b"Content-Transfer-Encoding: 7bit\r\nContent-Disposition: attachment;" in raw
    assert b"\r\n\r\n" + INNER_MESSAGE + b"\r\n--=_" in raw


def test_forwarded_message_with_bare_line_feeds_is_sent_canonical():
    inner = INNER_MESSAGE.replace(b"\r\n", b"\n")
    payload = make_payload(
        attachments=[{"filename": "f.eml", "value": b64(inner), "mimeType": "message/rfc822"}]
    )
    raw = compose_message(payload, MESSAGE_ID)
    check_against_payload(payload, raw)
    assert INNER_MESSAGE in raw


def test_forwarded_message_with_8bit_content_falls_back_to_base64():
    inner = INNER_MESSAGE.replace(b"original", "originäl".encode())
    payload = make_payload(
        attachments=[{"filename": "f.eml", "value": b64(inner), "mimeType": "message/rfc822"}]
    )
    raw = compose_message(payload, MESSAGE_ID)
    check_wire(raw)
    part = raw.split(b'filename="f.eml"\r\n\r\n', 1)[1].split(b"\r\n--", 1)[0]
    assert b"Content-Type: message/rfc822\r\nContent-Transfer-Encoding: base64" in raw
    assert base64.b64decode(part) == inner


@pytest.mark.parametrize(
    ("value", "data"),
    [
        ("QR==", b"A"),  # bits after the last character set: written as zeros
        ("aGVs\nbG8=", b"hello"),  # not as the API stores it: decoded leniently, as before
        ("", b""),
        (b64(bytes(range(256)) * 3), bytes(range(256)) * 3),
    ],
)
def test_attachment_base64_is_rewrapped(value, data):
    payload = make_payload(attachments=[{"filename": "a.bin", "value": value}])
    raw = compose_message(payload, MESSAGE_ID)
    check_wire(raw)
    part = parse(raw).get_payload(1)
    assert part.get_payload(decode=True) == data
    lines = part.get_payload().splitlines()
    assert lines == base64.encodebytes(data).decode("ascii").splitlines()


@pytest.mark.parametrize(
    ("filename", "written"),
    [
        ("report.pdf", b'Content-Disposition: attachment; filename="report.pdf"\r\n'),
        ("a b.txt", b'Content-Disposition: attachment; filename="a b.txt"\r\n'),
        ("ü.txt", b"Content-Disposition: attachment; filename*=utf-8''%C3%BC.txt\r\n"),
        ('say "hi".txt', b"filename*=utf-8''say%20%22hi%22.txt\r\n"),
        ("n" * 2000 + ".txt", b"\r\n filename*0*=utf-8''nnnnnnn"),
    ],
)
def test_filename_forms(filename, written):
    payload = make_payload(attachments=[{"filename": filename, "value": b64(b"x")}])
    raw = compose_message(payload, MESSAGE_ID)
    assert written in raw
    check_against_payload(payload, raw)


def test_media_types():
    assert guess_mime_type("a.pdf") == ("application", "pdf")
    assert guess_mime_type("no-extension") == ("application", "octet-stream")
    payload = make_payload(
        attachments=[
            {"filename": "a.bin", "value": b64(b"x"), "mimeType": "Application/VND.Custom+JSON"},
            {"filename": "b.png", "value": b64(b"x"), "mimeType": "not a type"},
            {"filename": "c.png", "value": b64(b"x"), "mimeType": "multipart/mixed"},
        ]
    )
    message = parse(compose_message(payload, MESSAGE_ID))
    assert [p.get_content_type() for p in message.iter_attachments()] == [
        "application/vnd.custom+json",
        "image/png",
        "image/png",
    ]


# --- Against the former composer ----------------------------------------------------------


DIFFERENTIAL = [
    make_payload(),
    make_payload(
        **{"from": {"email": "shop@sender.example", "name": "Zoë's Shop, Ltd."}},
        to=[
            {"email": "ana@rcpt.example", "name": 'Ana "the" Tester'},
            {"email": '"x y"@rcpt.example', "name": "李小龍"},
            {"email": "bo@rcpt.example"},
        ],
        cc=[{"email": "cy@rcpt.example", "name": "a\\b"}],
        replyTo=[{"email": "help@sender.example", "name": "Ünïcode Help"}],
        bcc=[{"email": "hidden@blind.example"}],
        subject="Grüße aus Köln 🙂 \u2013 your order #42 (ready)",
        headers=[
            {"name": "X-Order", "value": "42"},
            {"name": "X-Greeting", "value": "Grüße, 世界"},
            {
                "name": "List-Unsubscribe",
                "value": "<mailto:u@sender.example>, <https://s.example/u>",
            },
            {"name": "Sender", "value": "Désk <desk@sender.example>"},
        ],
        bodyText="Hallo,\nGrüße!\r\n" * 50,
        bodyHtml="<p>Hallo</p>\n" * 50,
        # (Not the forwarded message nor the "=?" file name: see the tests below.)
        attachments=[
            a
            for a in ATTACHMENTS
            if a.get("mimeType") != "message/rfc822" and "=?" not in a["filename"]
        ],
    ),
    make_payload(
        subject="A very long subject " * 100,
        to=[{"email": f"r{n}@rcpt.example", "name": f"Récipient {n}"} for n in range(40)],
        bodyText="line " * 3000,
        bodyHtml=None,
    ),
    make_payload(bodyText=None, bodyHtml="<p>" + "é" * 3000 + "</p>", subject="日本語" * 200),
]


@pytest.mark.parametrize("payload", DIFFERENTIAL)
def test_reads_the_same_as_the_former_composer(payload):
    raw = compose_message(payload, MESSAGE_ID)
    check_against_payload(payload, raw)
    assert summary(raw) == summary(reference_compose(payload, MESSAGE_ID))


def test_literal_encoded_word_lookalikes_survive():
    # The former composer decoded "=?...?=" found in a value, so a subject, name or file name
    # containing one read back altered; it is text like any other.
    lookalike = "=?utf-8?q?x?="
    payload = make_payload(
        **{"from": {"email": "shop@sender.example", "name": lookalike}},
        subject=f"Re: {lookalike} and more",
        headers=[{"name": "X-Note", "value": lookalike}],
        attachments=[{"filename": f"{lookalike}.txt", "value": b64(b"x")}],
    )
    raw = compose_message(payload, MESSAGE_ID)
    message = check_against_payload(payload, raw)
    assert message["From"].addresses[0].display_name == lookalike
    former = parse(reference_compose(payload, MESSAGE_ID))
    assert former["Subject"] == "Re: x and more"
    assert former["From"].addresses[0].display_name == "x"
    assert former.get_payload(1).get_filename() == "x.txt"


def test_forwarded_message_reads_as_a_message():
    # The former composer wrote message/rfc822 in base64, which RFC 2046 forbids and which
    # parsers then read as a message made of base64 text.
    payload = make_payload(
        attachments=[
            {"filename": "f.eml", "value": b64(INNER_MESSAGE), "mimeType": "message/rfc822"}
        ]
    )
    inner = parse(compose_message(payload, MESSAGE_ID)).get_payload(1).get_payload(0)
    assert inner["Subject"] == "forwarded"
    assert inner.get_content() == "The original text.\r\n--=_not-our-boundary\r\n"
    former = parse(reference_compose(payload, MESSAGE_ID)).get_payload(1).get_payload(0)
    assert former["Subject"] is None


# --- Fuzz ----------------------------------------------------------------------------------

PIECES = [
    "a",
    "Ana",
    "x" * 30,
    " ",
    "  ",
    "\t",
    '"',
    "'",
    "\\",
    ",",
    ";",
    ":",
    "<",
    ">",
    "@",
    "(",
    ")",
    ".",
    "=",
    "?",
    "_",
    "=?",
    "?=",
    "=?utf-8?q?x?=",
    "=?utf-8?b?w6k=?=",
    "é",
    "ß",
    "Ångström",
    "李",
    "🙂",
    "👩‍👩‍👧",
    "\u0301",
    "\x01",
    "\x7f",
    "\u2028",
    "\x85",
    "\ufeff",
    "\ud800",
]


def fuzz_text(rng: random.Random, pieces: int) -> str:
    return "".join(rng.choice(PIECES) for _ in range(rng.randint(1, pieces)))


def test_fuzz():
    rng = random.Random(20240607)
    for _ in range(300):
        names = [fuzz_text(rng, 12) for _ in range(3)]
        subject, note = fuzz_text(rng, 40), fuzz_text(rng, 40)
        text = fuzz_text(rng, 200) + rng.choice(["", "\n", "\r\n"])
        html = rng.choice([None, "<p>" + fuzz_text(rng, 50)])
        filename = rng.choice([None, "f" + fuzz_text(rng, 20)])

        def build(fix):
            return make_payload(
                **{"from": {"email": "shop@sender.example", "name": fix(names[0])}},
                to=[
                    {"email": "ana@rcpt.example", "name": fix(names[1])},
                    {"email": "bo@rcpt.example", "name": fix(names[2])},
                ],
                subject=fix(subject),
                headers=[{"name": "X-Fuzz", "value": fix(note)}],
                bodyText=fix(text),
                bodyHtml=html and fix(html),
                attachments=filename and [{"filename": fix(filename), "value": "eHl6"}],
            )

        raw = compose_message(build(lambda value: value), MESSAGE_ID)
        # A lone surrogate has no UTF-8 form: it is written, and reads back, as "?".
        check_against_payload(build(lambda value: value.replace("\ud800", "?")), raw)


# --- Inline parts (multipart/related) --------------------------------------------------------


def typed(**fields: Any) -> OutgoingMessage:
    values: dict[str, Any] = {
        "sender": Mailbox("shop@sender.example", "Shop"),
        "to": (Mailbox("ana@rcpt.example"),),
        "subject": "Your order",
        "date_ms": 1_700_000_000_123,
    }
    values.update(fields)
    return OutgoingMessage(**values)


def resolve_cid(message: EmailMessage, html_part: EmailMessage) -> dict[str, bytes]:
    """The content of every part a ``cid:`` URL in ``html_part`` names, looked up the way a
    mail reader does: among the parts of the same multipart/related."""
    related = next(
        part
        for part in message.walk()
        if part.get_content_type() == "multipart/related" and html_part in part.get_payload()
    )
    by_id = {
        part["Content-ID"].strip("<>"): part.get_payload(decode=True)
        for part in related.get_payload()
        if part["Content-ID"]
    }
    html = html_part.get_content()
    return {cid: by_id[cid] for cid in re.findall(r'cid:([^"\'>\s]+)', html)}


LOGO = Attachment("logo.png", b64(PNG), "image/png", "logo@shop.example", "inline")
BANNER = Attachment("banner.png", b64(PNG[::-1]), None, "banner", "inline")
INVOICE = Attachment("invoice.pdf", b64(b"%PDF-1.4 invoice"))


def test_inline_images_go_with_the_html_in_multipart_related():
    html = '<p><img src="cid:logo@shop.example"> <img src="cid:banner"></p>'
    raw = compose_typed(
        typed(text="Hi\n", html=html, attachments=(LOGO, INVOICE, BANNER)), MESSAGE_ID
    )
    check_wire(raw)
    message = parse(raw)
    assert not message.defects
    # mixed [ alternative [ text, related [ html, logo, banner ] ], invoice ]
    assert message.get_content_type() == "multipart/mixed"
    alternative, invoice = message.get_payload()
    assert alternative.get_content_type() == "multipart/alternative"
    text, related = alternative.get_payload()
    assert text.get_content_type() == "text/plain"
    assert related.get_content_type() == "multipart/related"
    assert related.get_param("type") == "text/html"
    html_part, logo, banner = related.get_payload()
    assert html_part.get_content_type() == "text/html"
    assert html_part.get_content().replace("\r\n", "\n") == html + "\n"
    for part, attachment in ((logo, LOGO), (banner, BANNER)):
        assert part["Content-ID"] == f"<{attachment.content_id}>"
        assert part.get_content_disposition() == "inline"
        assert part.get_filename() == attachment.filename
        assert part.get_content_type() == "image/png"
    assert resolve_cid(message, html_part) == {"logo@shop.example": PNG, "banner": PNG[::-1]}
    assert invoice.get_content_disposition() == "attachment"
    assert invoice["Content-ID"] is None
    assert invoice.get_payload(decode=True) == b"%PDF-1.4 invoice"
    boundaries = re.findall(rb'boundary="([^"]+)"', raw)
    assert len(set(boundaries)) == 3


def test_html_alone_with_an_inline_image_is_related_at_the_top():
    raw = compose_typed(typed(html='<img src="cid:logo@shop.example">', attachments=(LOGO,)), "x")
    check_wire(raw)
    message = parse(raw)
    assert message.get_content_type() == "multipart/related"
    html_part, logo = message.get_payload()
    assert resolve_cid(message, html_part) == {"logo@shop.example": PNG}
    assert logo.get_content_disposition() == "inline"


def test_inline_parts_without_html_or_without_a_content_id_stay_in_mixed():
    badge = Attachment("badge.png", b64(PNG), None, None, "inline")
    raw = compose_typed(typed(text="Hi\n", attachments=(LOGO, badge)), MESSAGE_ID)
    check_wire(raw)
    message = parse(raw)
    assert [part.get_content_type() for part in message.walk()] == [
        "multipart/mixed",
        "text/plain",
        "image/png",
        "image/png",
    ]
    _, logo, plain_badge = message.get_payload()
    assert logo["Content-ID"] == "<logo@shop.example>"
    assert logo.get_content_disposition() == "inline"
    assert plain_badge["Content-ID"] is None
    assert plain_badge.get_content_disposition() == "inline"
    # With HTML, a part with a Content-ID that asks to be an attachment stays one.
    attached = Attachment("logo.png", b64(PNG), None, "logo", "attachment")
    message = parse(compose_typed(typed(html="<p>x</p>", attachments=(attached,)), "x"))
    assert message.get_content_type() == "multipart/mixed"
    assert message.get_payload(1)["Content-ID"] == "<logo>"
    assert message.get_payload(1).get_content_disposition() == "attachment"


def test_boundaries_of_nested_multiparts_avoid_7bit_content(monkeypatch):
    tokens = iter(["taken", "taken", "a", "taken", "b", "c"])
    monkeypatch.setattr(compose, "secrets", types.SimpleNamespace(token_hex=lambda _: next(tokens)))
    html = "<p>\n--=_taken\n</p>"
    raw = compose_typed(typed(text="x", html=html, attachments=(LOGO, INVOICE)), MESSAGE_ID)
    assert re.findall(rb'boundary="([^"]+)"', raw) == [b"=_c", b"=_b", b"=_a"]
    message = parse(raw)
    html_part = message.get_payload(0).get_payload(1).get_payload(0)
    assert html_part.get_content().replace("\r\n", "\n") == html + "\n"


def test_payloads_keep_content_id_and_disposition_and_read_older_ones():
    message = typed(text="x", attachments=(LOGO, INVOICE, BANNER))
    payload = json.loads(json.dumps(message.to_payload()))
    assert payload["attachments"][1] == ["invoice.pdf", INVOICE.content, None]
    assert OutgoingMessage.from_payload(payload) == message
    older = {**payload, "attachments": [["invoice.pdf", INVOICE.content, "application/pdf"]]}
    (attachment,) = OutgoingMessage.from_payload(older).attachments
    assert (attachment.content_id, attachment.disposition) == (None, "attachment")
