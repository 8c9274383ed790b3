"""Preparing a message submitted over SMTP: what the service adds, removes and records, once
when it is accepted and, for what names the recipient, in each recipient's copy."""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email import policy
from email.parser import BytesHeaderParser
from email.utils import format_datetime, getaddresses

from layang.mail.message import Header, domain_of

_FIELD_START = re.compile(rb"^[!-9;-~]+:")


@dataclass(frozen=True)
class PreparedMessage:
    raw: bytes
    from_address: dict[str, str]
    subject: str
    message_id: str
    header_to: frozenset[str]
    header_cc: frozenset[str]
    idempotency_key: str | None = None
    tls_required: str | None = None  # the TLS-Required header's value (RFC 8689)
    stream: str | None = None
    """The ``X-Layang-Stream`` header as given (removed from the message), unchecked."""
    tags: tuple[str, ...] = ()
    """The ``X-Layang-Tag`` headers' values, in order (removed from the message), unchecked."""
    authorship_problem: str | None = None
    """Why the headers do not name one author (two From fields, two addresses in one, a
    group), or None when they do."""


def _split(data: bytes) -> tuple[list[bytes], bytes]:
    """Header lines (without line ends) and everything from the blank line on."""
    for separator in (b"\r\n\r\n", b"\n\n"):
        head, found, body = data.partition(separator)
        if found:
            return head.splitlines(), found + body
    return data.splitlines(), b"\r\n"


def _fields(lines: list[bytes]) -> list[list[bytes]]:
    """Group header lines into fields (a field and its folded continuation lines)."""
    fields: list[list[bytes]] = []
    for line in lines:
        if fields and line[:1] in (b" ", b"\t"):
            fields[-1].append(line)
        elif _FIELD_START.match(line) or not fields:
            fields.append([line])
        else:
            fields[-1].append(line)
    return fields


def _name(field: list[bytes]) -> str:
    return field[0].split(b":", 1)[0].decode("ascii", "replace").strip().lower()


def _addresses(values: list[str]) -> frozenset[str]:
    return frozenset(addr.lower() for _, addr in getaddresses(values) if addr)


def prepare_submission(
    data: bytes, transmission_id: str, accepted_at_ms: int, mail_from: str
) -> PreparedMessage:
    """The message as it will be relayed: the fields no recipient may see removed (``Bcc`` and
    ``Resent-Bcc``, RFC 5322 §3.6.3 and §3.6.6; a client's ``Return-Path``, which only the
    final delivery writes, RFC 5321 §4.4; ``Idempotency-Key`` and every ``X-Layang-*`` control
    field, the values of ``Idempotency-Key``, ``X-Layang-Stream`` and ``X-Layang-Tag`` kept
    aside; the worker
    writes its own ``X-Layang-Id``, naming the email a complaint is about), Message-ID and Date
    added when missing; plus what Activity shows of it."""
    lines, rest = _split(data)
    all_fields = _fields(lines)
    keys = [f for f in all_fields if _name(f) == "idempotency-key"]
    streams = [f for f in all_fields if _name(f) == "x-layang-stream"]
    tags = [_tag_value(f) for f in all_fields if _name(f) == "x-layang-tag"]
    fields = [f for f in all_fields if not _never_relayed(_name(f))]
    present = {_name(f) for f in fields}
    headers = BytesHeaderParser(policy=policy.default).parsebytes(
        b"\r\n".join(line for f in fields for line in f) + b"\r\n\r\n"
    )
    message_id = str(headers.get("Message-ID", "")).strip()
    if "message-id" not in present or not message_id:
        domain = domain_of(mail_from) if "@" in mail_from else "layang.invalid"
        message_id = f"<{transmission_id}@{domain}>"
        fields.append([f"Message-ID: {message_id}".encode()])
    if "date" not in present:
        date = format_datetime(datetime.fromtimestamp(accepted_at_ms / 1000, UTC))
        fields.append([f"Date: {date}".encode()])

    sender = headers.get("From")
    from_fields = sum(1 for f in fields if _name(f) == "from")
    from_address: dict[str, str] = {"email": mail_from}
    if sender is not None and getattr(sender, "addresses", None):
        first = sender.addresses[0]
        from_address = {"email": first.addr_spec}
        if first.display_name:
            from_address["name"] = first.display_name
    raw = b"\r\n".join(line for f in fields for line in f) + rest
    return PreparedMessage(
        raw=raw,
        from_address=from_address,
        subject=str(headers.get("Subject", "") or ""),
        message_id=message_id,
        header_to=_addresses([str(v) for v in headers.get_all("To", [])]),
        header_cc=_addresses([str(v) for v in headers.get_all("Cc", [])]),
        idempotency_key=_unfolded_value(keys[0]) if keys else None,
        tls_required=str(headers["TLS-Required"]) if "tls-required" in present else None,
        stream=_unfolded_value(streams[0]) if streams else None,
        tags=tuple(tags),
        authorship_problem=_authorship_problem(from_fields, sender),
    )


_NEVER_RELAYED = frozenset({"bcc", "resent-bcc", "return-path", "idempotency-key"})


def _never_relayed(name: str) -> bool:
    return name in _NEVER_RELAYED or name.startswith("x-layang-")


def _authorship_problem(from_fields: int, sender: object) -> str | None:
    """What keeps the From header from naming exactly one author, if anything: the sandbox
    and verified-domain rules, and DKIM, can only vouch for one address."""
    if from_fields > 1:
        return f"The message has {from_fields} From headers; give one."
    if sender is None:
        return None
    if any(group.display_name is not None for group in getattr(sender, "groups", ())):
        return "The From header is a group; give one address."
    addresses = getattr(sender, "addresses", ())
    if len(addresses) > 1:
        return f"The From header names {len(addresses)} addresses; give one."
    return None


def _unfolded_value(field: list[bytes]) -> str:
    value = b"".join(field).split(b":", 1)[1].strip()
    return value.decode("utf-8", "replace")  # RFC 6532 allows UTF-8 in header fields


def _tag_value(field: list[bytes]) -> str:
    # Folded lines joined as one; a tag may be UTF-8 (SMTPUTF8, RFC 6532).
    value = b"".join(line.strip(b"\r\n") for line in field).split(b":", 1)[1].strip()
    return value.decode("utf-8", "replace")


# RFC 5322's recommended line length, past which an added field is folded.
_FOLD_AT = 78


def with_fields(raw: bytes, replaced: Collection[str], fields: Sequence[Header]) -> bytes:
    """``raw`` (a submitted message as stored) without its header fields named in ``replaced``
    (lower-case), continuation lines and all, and with ``fields`` at the end of its header;
    every other byte as it was. A value is ASCII, or UTF-8 where it names an address with a
    non-ASCII local part (RFC 6532); one longer than a line is folded after each comma of its
    list, as composing folds it."""
    lines, rest = _split(raw)
    kept = [line for field in _fields(lines) if _name(field) not in replaced for line in field]
    for field in fields:
        line = f"{field.name}: {field.value}"
        if len(line) > _FOLD_AT:
            line = line.replace(", ", ",\r\n ")
        kept.append(line.encode("utf-8"))
    return b"\r\n".join(kept) + rest
