"""Building the MIME message of an API transmission.

Built once per message (the worker stores the bytes), because the stdlib generator is the send
path's largest CPU cost.
"""

from __future__ import annotations

import base64
import mimetypes
from datetime import UTC, datetime
from email import policy
from email.message import EmailMessage
from email.utils import format_datetime
from typing import Any

from layang.addresses import header_address

SMTP_POLICY = policy.SMTP


def guess_mime_type(filename: str) -> tuple[str, str]:
    guessed, _ = mimetypes.guess_type(filename, strict=False)
    maintype, _, subtype = (guessed or "application/octet-stream").partition("/")
    return maintype, subtype


def transfer_encoding(body: str) -> str:
    """7bit when the body is plain ASCII in short lines, else quoted-printable.

    The stdlib would pick 8bit for UTF-8 text, which a server that does not offer 8BITMIME
    may mangle or refuse; quoted-printable keeps every message 7-bit clean.
    """
    if body.isascii() and all(len(line) <= 998 for line in body.splitlines()):
        return "7bit"
    return "quoted-printable"


def _addresses(entries: list[dict[str, str]]) -> list[Any]:
    return [header_address(entry["email"], entry.get("name")) for entry in entries]


def compose_message(payload: dict[str, Any], message_id: str) -> bytes:
    """The message, as bytes with CRLF line ends, for a stored transmission payload.

    Bcc recipients are never written into the headers; they exist only in the envelope.
    """
    message = EmailMessage(policy=SMTP_POLICY)
    message["From"] = header_address(payload["from"]["email"], payload["from"].get("name"))
    message["To"] = _addresses(payload["to"])
    if payload.get("cc"):
        message["Cc"] = _addresses(payload["cc"])
    if payload.get("replyTo"):
        message["Reply-To"] = _addresses(payload["replyTo"])
    message["Subject"] = payload["subject"]
    message["Date"] = format_datetime(datetime.fromtimestamp(payload["date"] / 1000, UTC))
    message["Message-ID"] = message_id
    for header in payload.get("headers", ()):
        message[header["name"]] = header["value"]

    text, html = payload.get("bodyText"), payload.get("bodyHtml")
    if text is not None:
        message.set_content(text, cte=transfer_encoding(text))
        if html is not None:
            message.add_alternative(html, subtype="html", cte=transfer_encoding(html))
    else:
        message.set_content(html, subtype="html", cte=transfer_encoding(html))

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
