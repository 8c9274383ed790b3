"""Building the MIME message of an API transmission.

Built once per message (the worker stores the bytes). The bytes are written directly instead of
through ``email.message.EmailMessage``: its header registry and generator cost milliseconds per
message, the largest CPU cost of the send path.

What comes out is plain RFC 5322 / MIME: CRLF line ends, 7-bit clean (RFC 2047 encoded-words in
headers, RFC 2231 for file names, quoted-printable or base64 bodies), header lines folded to 78
characters where the syntax allows a break and never longer than 998.
"""

from __future__ import annotations

import base64
import binascii
import mimetypes
import re
import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from email.headerregistry import AddressHeader, Group, UnstructuredHeader
from itertools import pairwise

from layang.mail.idn import to_ascii
from layang.mail.message import (
    HEADER_NAME,
    LOCAL_PART,
    SMTP_POLICY,
    Attachment,
    Header,
    Mailbox,
    OutgoingMessage,
    domain_of,
    is_reserved_header,
    is_single_part_type,
)
from layang.mail.text_part import text_from_html

_FOLD = 78  # RFC 5322 "SHOULD" line length
_MAX_LINE = 998  # RFC 5322 "MUST" line length
# Longest word, and longest run of spaces, written as is: with the longest header name (76)
# and a separator after the word, a line still fits in _MAX_LINE.
_MAX_WORD = 850
_MAX_SPACES = 40
_EW_TEXT = 75 - len("=?utf-8?q??=")  # RFC 2047: an encoded-word is at most 75 characters
_EW_MIN = 16  # below this much room left on a line, an encoded-word starts on the next one

_ATEXT = r"A-Za-z0-9!#$%&'*+/=?^_`{|}~-"
_ATOM = re.compile(rf"[{_ATEXT}]+")
_ATOMS = re.compile(rf"[{_ATEXT}]+(?: [{_ATEXT}]+)*")
_VCHARS = re.compile(r"[!-~]+")
# What some decoder would take for an encoded-word (email.header's pattern is this lenient).
_ENCODED_WORD = re.compile(r"=\?[^?]*\?[bBqQ]\?.*?\?=", re.DOTALL)
_LINE_BREAKS = re.compile(r"\r\n|[\r\n]")
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_DOMAIN = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_PLAIN_FILENAME = re.compile(r"[ !#-\[\]-~]+")  # printable ASCII but '"' and '\'


def _q_encoded(byte: int) -> str:
    # Only what RFC 2047 allows inside a phrase, so the same text is valid in display names and
    # unstructured headers alike.
    char = chr(byte)
    if char.isascii() and (char.isalnum() or char in "!*+-/"):
        return char
    return "_" if char == " " else f"={byte:02X}"


_Q_ASCII = {chr(byte): _q_encoded(byte) for byte in range(128)}
_BASE64_DIGITS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_ATTR_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789!#$&+-.^_`|~")

_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def guess_mime_type(filename: str) -> tuple[str, str]:
    """``(maintype, subtype)`` for a file name, ``application/octet-stream`` when unknown."""
    guessed, _ = mimetypes.guess_type(filename, strict=False)
    maintype, _, subtype = (guessed or "application/octet-stream").partition("/")
    return maintype, subtype


def transfer_encoding(body: str) -> str:
    """7bit when the body is plain ASCII in short lines, else quoted-printable.

    Short means at most 998 octets between line breaks (CR, LF or CRLF: the line ends the
    message is written with). NUL, never allowed in 7bit data, also means quoted-printable. The
    stdlib would pick 8bit for UTF-8 text, which a server that does not offer 8BITMIME may
    mangle or refuse; quoted-printable keeps every message 7-bit clean.
    """
    data = body.encode("utf-8", "replace")
    return "7bit" if _is_7bit(data, data.splitlines()) else "quoted-printable"


def compose_message(message: OutgoingMessage, message_id: str) -> bytes:
    """``message`` as bytes with CRLF line ends.

    ``message`` follows the rules of :mod:`layang.mail.message` (addresses normalised, at
    least one body). Headers come in this order: From, To, Cc, Reply-To, Subject, Date
    (``date_ms``, written in UTC), Message-ID (``message_id`` as given), MIME-Version, the
    custom ``headers``, for broadcast mail a ``List-Id`` (RFC 2919) unless ``headers`` has
    one, then the content headers. Bcc recipients
    are never written into the headers; they exist only in the envelope.

    The body is text/plain or text/html alone, multipart/alternative (text first) when there
    are both (an HTML-only message gets a text part made from its HTML, unless
    ``generate_text`` is off or the HTML shows no text: see :mod:`layang.mail.text_part`),
    wrapped in multipart/mixed with the attachments (type from ``mimeType`` or guessed from
    the file name; base64, but a 7-bit clean message/rfc822 as is, in CRLF form)
    when there are any. Inline attachments with a Content-ID go with the HTML in
    ``multipart/related; type="text/html"`` (HTML first), so ``cid:`` URLs resolve; each
    attachment has the Content-Disposition it asked for and its ``Content-ID: <…>``. Text
    bodies are UTF-8, their line breaks written as CRLF and a final one added when missing.

    The bytes are 7-bit clean, lines are at most 998 octets, and no header value can start a
    new header line: CR and LF in values are written as spaces. Raises ``ValueError`` for what
    cannot be written: an address or header name that is not well-formed, a custom header
    that the service writes itself, or more of a header than RFC 5322 allows (a Reply-To given
    both as ``reply_to`` and as a custom header).
    """
    head = [_header("From", _mailbox(message.sender))]
    if message.to:
        head.append(_header("To", _address_list(message.to)))
    if message.cc:
        head.append(_header("Cc", _address_list(message.cc)))
    if message.reply_to:
        head.append(_header("Reply-To", _address_list(message.reply_to)))
    head.append(_header("Subject", _unstructured(message.subject)))
    head.append(f"Date: {_date(message.date_ms)}\r\n")
    head.append(_header("Message-ID", _unstructured(message_id)))
    head.append("MIME-Version: 1.0\r\n")
    head.extend(_custom_headers(message.headers, bool(message.reply_to)))
    list_domain = domain_of(message.sender.email)
    if (
        not message.is_transactional
        and list_domain.isascii()
        and not any(h.name.lower() == "list-id" for h in message.headers)
    ):
        # RFC 2919: broadcast mail carries List-Unsubscribe, and a list names itself beside it
        # (SpamAssassin scores List-Unsubscribe without List-Id in short mail as spam).
        head.append(f"List-Id: <broadcast.{list_domain}>\r\n")

    # Each part is (its headers, its encoded content, whether that content is 7bit text, which
    # alone could contain a boundary line).
    plain = message.text
    if plain is None and message.html is not None and message.generate_text:
        plain = text_from_html(message.html) or None
    text = None if plain is None else _text_part("plain", plain)
    html = None if message.html is None else _text_part("html", message.html)
    if text is None and html is None:
        raise ValueError("a message needs a text or an HTML body")
    # Inline parts with a Content-ID go with the HTML that shows them; without HTML there is
    # nothing to relate them to, and they are written as the other parts.
    inline: list[tuple[str, bytes, bool]] = []
    attachments: list[tuple[str, bytes, bool]] = []
    for attachment in message.attachments:
        related = html is not None and attachment.related
        (inline if related else attachments).append(_attachment_part(attachment))
    parts = [part for part in (text, html, *inline, *attachments) if part is not None]
    literal = [content for _, content, is_literal in parts if is_literal]

    if html is not None and inline:
        html = _multipart("related", [html, *inline], literal, 'type="text/html"')
    alternatives = [part for part in (text, html) if part is not None]
    body = alternatives[0]
    if len(alternatives) > 1:
        body = _multipart("alternative", alternatives, literal)
    if attachments:
        body = _multipart("mixed", [body, *attachments], literal)
    head.append(body[0])
    head.append("\r\n")
    # ASCII but for a non-ASCII local part in an address field (RFC 6532; sent over SMTPUTF8).
    return "".join(head).encode("utf-8") + body[1]


# --- Headers -------------------------------------------------------------------------------


class _Encoded(str):
    """Header text to write as RFC 2047 encoded-words (a plain ``str`` is written as is)."""

    __slots__ = ()


def _header(name: str, items: Sequence[str]) -> str:
    """``name: items`` with the items separated by single spaces, folded between items.

    Plain items are written as is, never split (so they may make a line longer than 78, never
    than 998: see ``_MAX_WORD``). An empty item stands for one more space between its
    neighbours; a fold goes before such spaces, so no line is blank or ends in white space.
    """
    out = [name, ":"]
    width = len(name) + 1
    spaces = 1
    started = False
    for item in items:
        if not item:
            spaces += 1
            continue
        if type(item) is _Encoded:
            width = _write_encoded(out, width, spaces, item)
        else:
            if started and width + spaces + len(item) > _FOLD:
                out.append("\r\n")
                width = 0
            out.append(" " * spaces)
            out.append(item)
            width += spaces + len(item)
        started = True
        spaces = 1
    out.append("\r\n")
    return "".join(out)


def _write_encoded(out: list[str], width: int, spaces: int, text: str) -> int:
    """Append ``spaces`` then ``text`` as encoded-words at line position ``width``; returns the
    new position.

    Q or B, whichever is shorter, each word at most 75 characters and holding whole characters
    only (decoders that decode word by word would otherwise show garbage). Adjacent words are
    separated by a fold, which decoders drop.
    """
    q_chars = [_Q_ASCII.get(char) or _q_char(char) for char in text]
    data = text.encode("utf-8", "replace")
    room = min(_FOLD - width - spaces, 75) - (75 - _EW_TEXT)
    if room < _EW_MIN:
        out.append("\r\n")
        width = 0
        room = min(_FOLD - spaces, 75) - (75 - _EW_TEXT)
    chunks: list[str] = []
    if sum(map(len, q_chars)) <= (len(data) + 2) // 3 * 4:
        prefix = "=?utf-8?q?"
        current: list[str] = []
        used = 0
        for encoded in q_chars:
            if used + len(encoded) > room and current:
                chunks.append("".join(current))
                current, used, room = [], 0, _EW_TEXT
            current.append(encoded)
            used += len(encoded)
        chunks.append("".join(current))
    else:
        prefix = "=?utf-8?b?"
        start = 0
        while start < len(data):
            end = start + room // 4 * 3
            if end < len(data):
                while data[end] & 0xC0 == 0x80:  # a UTF-8 continuation byte
                    end -= 1
            chunks.append(base64.b64encode(data[start:end]).decode("ascii"))
            start, room = end, _EW_TEXT
    for index, chunk in enumerate(chunks):
        if index:
            out.append("\r\n ")
            width = 1
        else:
            out.append(" " * spaces)
            width += spaces
        word = f"{prefix}{chunk}?="
        out.append(word)
        width += len(word)
    return width


def _q_char(char: str) -> str:
    return "".join(_q_encoded(byte) for byte in char.encode("utf-8", "replace"))


def _one_line(value: str) -> str:
    if "\r" in value or "\n" in value:
        return _LINE_BREAKS.sub(" ", value)
    return value


def _looks_encoded(text: str) -> bool:
    return "=?" in text and _ENCODED_WORD.search(text) is not None


def _unstructured(value: str) -> list[str]:
    """Items for an unstructured header (Subject, most custom headers) reading back as
    ``value``: words as is where they can be, the rest as encoded-words."""
    value = _one_line(value)
    if not value:
        return []
    if (
        value.isascii()
        and value.isprintable()
        and value[0] != " "
        and value[-1] != " "
        and "  " not in value
        and not _looks_encoded(value)
    ):
        words = value.split(" ")
        if len(value) <= _MAX_WORD or all(len(word) <= _MAX_WORD for word in words):
            return words
    return _segments(value, _VCHARS.fullmatch, keep_spaces=True)


def _phrase(name: str) -> list[str]:
    """Items for a display name (RFC 5322 phrase) reading back as ``name``."""
    name = _one_line(name)
    if name.isascii() and name.isprintable() and not _looks_encoded(name):
        if _ATOMS.fullmatch(name):
            items = name.split(" ")
        else:
            quoted = name.replace("\\", "\\\\").replace('"', '\\"')
            items = f'"{quoted}"'.split(" ")
        if all(len(item) <= _MAX_WORD for item in items) and " " * _MAX_SPACES not in name:
            return items
    return _segments(name, _ATOM.fullmatch, keep_spaces=False)


def _segments(text: str, plain: Callable[[str], object], *, keep_spaces: bool) -> list[str]:
    """``text`` split at spaces into words written as is and runs written as encoded-words.

    A word is written as is when ``plain`` accepts it. Where white space survives unfolding
    (``keep_spaces``, unstructured text) several spaces in a row are written as is too, except
    at the ends (parsers drop leading white space), between two encoded runs (RFC 2047
    decoders drop white space there) and when too many for a line. In a phrase, parsers
    collapse runs of spaces, so these always go inside an encoded run. An encoded run always
    includes a word, never only spaces.
    """
    words = text.split(" ")
    count = len(words)
    encode = [bool(word) and not (len(word) <= _MAX_WORD and plain(word)) for word in words]
    if "=?" in text and (
        any(encode)
        or text[0] == " "
        or text[-1] == " "
        or (not keep_spaces and "  " in text)
        or _ENCODED_WORD.search(text)
    ):
        # Beside encoded-words, a literal "=?" could be read as the start of one.
        encode = [flag or "=?" in word for flag, word in zip(encode, words, strict=True)]
    filled = [index for index, word in enumerate(words) if word]
    if not filled:
        return [_Encoded(text)]
    if keep_spaces:
        first, last = filled[0], filled[-1]
        if first:
            encode[: first + 1] = [True] * (first + 1)
        if last < count - 1:
            encode[last:] = [True] * (count - last)
        for before, after in pairwise(filled):
            if after - before > 1:
                if after - before > _MAX_SPACES:
                    encode[after] = True
                    between = True
                else:
                    between = encode[before] and encode[after]
                for index in range(before + 1, after):
                    encode[index] = between
    else:
        for index, word in enumerate(words):
            if not word:
                encode[index] = True
                if index:
                    encode[index - 1] = True
                if index + 1 < count:
                    encode[index + 1] = True

    items: list[str] = []
    run: list[str] = []
    for word, flag in zip(words, encode, strict=True):
        if flag:
            run.append(word)
            continue
        if run:
            items.append(_Encoded(" ".join(run)))
            run = []
        items.append(word)
    if run:
        items.append(_Encoded(" ".join(run)))
    return items


def _addr_spec(email: str) -> str:
    """A normalised address as written in a header; ``ValueError`` if it is not one."""
    local, at, domain = email.rpartition("@")
    if not (at and LOCAL_PART.fullmatch(local) and _DOMAIN.fullmatch(domain)):
        raise ValueError(f"not a normalised email address: {email!r}")
    return email


def _mailbox(mailbox: Mailbox) -> list[str]:
    if not mailbox.name:
        return [_addr_spec(mailbox.email)]
    return [*_phrase(mailbox.name), f"<{_addr_spec(mailbox.email)}>"]


def _address_list(mailboxes: Iterable[Mailbox]) -> list[str]:
    items: list[str] = []
    for mailbox in mailboxes:
        if items:
            items[-1] += ","
        items.extend(_mailbox(mailbox))
    return items


def _date(epoch_ms: float) -> str:
    """RFC 5322 date-time in UTC for epoch milliseconds (sub-second part dropped)."""
    t = time.gmtime(epoch_ms // 1000)
    return (
        f"{_DAYS[t.tm_wday]}, {t.tm_mday:02d} {_MONTHS[t.tm_mon - 1]} {t.tm_year:04d} "
        f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} +0000"
    )


def _custom_headers(headers: Iterable[Header], has_reply_to: bool) -> list[str]:
    registry = SMTP_POLICY.header_factory.registry
    counts = {"reply-to": 1} if has_reply_to else {}
    written = []
    for header in headers:
        name, value = header.name, header.value
        lowered = name.lower()
        if not HEADER_NAME.match(name):
            raise ValueError(f"not a valid header name: {name!r}")
        if is_reserved_header(name):
            raise ValueError(f"{name} is written by the service and cannot be given")
        kind = registry.get(lowered)
        if kind is None or issubclass(kind, UnstructuredHeader):
            written.append(_header(name, _unstructured(value)))
            continue
        # Structured headers the stdlib knows (Reply-To, Sender, Resent-*, Orig-Date) are
        # parsed as before; they are rare enough for the parser's cost not to matter.
        if kind.max_count is not None:
            counts[lowered] = counts.get(lowered, 0) + 1
            if counts[lowered] > kind.max_count:
                raise ValueError(f"There may be at most {kind.max_count} {name} headers")
        parsed = SMTP_POLICY.header_factory(name, _one_line(value))
        if parsed.defects:
            raise ValueError(f"{name}: {parsed.defects[0]}")
        if issubclass(kind, AddressHeader):
            written.append(_header(name, _groups(parsed.groups)))
            continue
        folded = parsed.fold(policy=SMTP_POLICY)
        if not folded.isascii() or max(map(len, folded.split("\r\n"))) > _MAX_LINE:
            raise ValueError(f"{name}: value cannot be written within the line limits")
        written.append(folded)
    return written


def _groups(groups: Iterable[Group]) -> list[str]:
    """Items for a parsed address header (mailboxes and groups)."""
    items: list[str] = []
    for group in groups:
        if items:
            items[-1] += ","
        if group.display_name is not None:
            items.extend(_phrase(group.display_name))
            _attach(items, ":")
        for index, address in enumerate(group.addresses):
            if index:
                items[-1] += ","
            local, _, domain = address.addr_spec.rpartition("@")
            if not domain.isascii():
                domain = to_ascii(domain)
            if not local.isascii():
                raise ValueError(f"cannot write a non-ASCII local part: {address.addr_spec!r}")
            spec = f"{local}@{domain}"
            items.extend(
                [*_phrase(address.display_name), f"<{spec}>"] if address.display_name else [spec]
            )
        if group.display_name is not None:
            _attach(items, ";")
    return items


def _attach(items: list[str], special: str) -> None:
    # An encoded-word must be followed by white space, not by a special.
    if items and type(items[-1]) is not _Encoded:
        items[-1] += special
    else:
        items.append(special)


# --- Body ----------------------------------------------------------------------------------


def _is_7bit(data: bytes, lines: list[bytes]) -> bool:
    return data.isascii() and b"\0" not in data and max(map(len, lines), default=0) <= _MAX_LINE


def _text_part(subtype: str, text: str) -> tuple[str, bytes, bool]:
    data = text.encode("utf-8", "replace")
    lines = data.splitlines()
    if _is_7bit(data, lines):
        encoding, content = "7bit", b"\r\n".join(lines) + b"\r\n"
    else:
        encoding = "quoted-printable"
        content = binascii.b2a_qp(b"\n".join(lines) + b"\n", istext=True).replace(b"\n", b"\r\n")
    headers = (
        f'Content-Type: text/{subtype}; charset="utf-8"\r\n'
        f"Content-Transfer-Encoding: {encoding}\r\n"
    )
    return headers, content, encoding == "7bit"


def _attachment_part(attachment: Attachment) -> tuple[str, bytes, bool]:
    filename = attachment.filename
    media_type = (attachment.media_type or "").lower()
    if not is_single_part_type(media_type):
        media_type = "/".join(guess_mime_type(filename)).lower()
        if not is_single_part_type(media_type):
            media_type = "application/octet-stream"
    disposition = _disposition(attachment.disposition, filename)
    if attachment.content_id is not None:
        disposition = f"Content-ID: <{attachment.content_id}>\r\n{disposition}"
    if media_type == "message/rfc822":
        # RFC 2046 allows only 7bit, 8bit or binary for message/rfc822, and parsers read the
        # part as a message: a 7-bit clean one goes as is, in its canonical CRLF form.
        data = base64.b64decode(attachment.content)
        lines = data.splitlines()
        if _is_7bit(data, lines):
            content = b"\r\n".join(lines)
            if data.endswith((b"\n", b"\r")):
                content += b"\r\n"
            headers = f"Content-Type: {media_type}\r\nContent-Transfer-Encoding: 7bit\r\n"
            return headers + disposition, content, True
    headers = f"Content-Type: {media_type}\r\nContent-Transfer-Encoding: base64\r\n"
    return headers + disposition, _base64_lines(attachment.content), False


def _base64_lines(value: str) -> bytes:
    """Base64 of the bytes ``value`` encodes, in CRLF-ended lines of 76 characters.

    A well-formed ``value`` (what the API accepts) is only cut into lines, which costs half of
    decoding and encoding again; anything else is decoded leniently and encoded anew.
    """
    encoded = value.encode("ascii") if value.isascii() else b""
    digits = encoded.rstrip(b"=")
    padding = len(encoded) - len(digits)
    if (
        encoded
        and len(encoded) % 4 == 0
        and padding <= 2
        and not digits.translate(None, _BASE64_DIGITS)
    ):
        if padding:
            # Decoders ignore the bits after the last character: write them as zeros.
            encoded = encoded[:-4] + base64.b64encode(base64.b64decode(encoded[-4:]))
        lines = [encoded[start : start + 76] for start in range(0, len(encoded), 76)]
        return b"\r\n".join(lines) + b"\r\n"
    return base64.encodebytes(base64.b64decode(value)).replace(b"\n", b"\r\n")


def _disposition(kind: str, filename: str) -> str:
    """Content-Disposition (``kind``: attachment or inline): a quoted file name when it is plain
    ASCII, else RFC 2231 (``filename*=utf-8''…``, in numbered sections when it does not fit in
    one line)."""
    start = f"Content-Disposition: {kind}"
    if not filename:
        return f"{start}\r\n"
    plain = _PLAIN_FILENAME.fullmatch(filename) and len(filename) <= _MAX_WORD
    if plain and not _looks_encoded(filename):
        parameter = f'filename="{filename}"'
        if len(start) + 2 + len(parameter) <= _FOLD:
            return f"{start}; {parameter}\r\n"
        return f"{start};\r\n {parameter}\r\n"
    encoded = [char if char in _ATTR_SAFE else _percent(char) for char in filename]
    parameter = "filename*=utf-8''" + "".join(encoded)
    if len(start) + 2 + len(parameter) <= _FOLD:
        return f"{start}; {parameter}\r\n"
    if 1 + len(parameter) <= _FOLD:
        return f"{start};\r\n {parameter}\r\n"
    sections: list[str] = []
    current = " filename*0*=utf-8''"
    for piece in encoded:
        if len(current) + len(piece) + 1 > _FOLD:  # + 1 for the ';' ending the line
            sections.append(current)
            current = f" filename*{len(sections)}*="
        current += piece
    sections.append(current)
    return f"{start};\r\n" + ";\r\n".join(sections) + "\r\n"


def _percent(char: str) -> str:
    return "".join(f"%{byte:02X}" for byte in char.encode("utf-8", "replace"))


def _multipart(
    subtype: str,
    parts: Sequence[tuple[str, bytes, bool]],
    literal: list[bytes],
    parameters: str = "",
) -> tuple[str, bytes, bool]:
    """A multipart of ``parts``; its boundary occurs in none of the ``literal`` contents (the
    7bit ones: quoted-printable and base64 never contain ``=_``). The boundary is added to
    ``literal`` so an enclosing multipart picks another."""
    while True:
        boundary = f"=_{secrets.token_hex(16)}"
        encoded = boundary.encode("ascii")
        if not any(encoded in content for content in literal):
            break
    literal.append(encoded)
    delimiter = b"--" + encoded
    chunks = [delimiter, b"\r\n"]
    for index, (headers, content, _) in enumerate(parts):
        if index:
            chunks += [b"\r\n", delimiter, b"\r\n"]
        chunks += [headers.encode("ascii"), b"\r\n", content]
    chunks += [b"\r\n", delimiter, b"--\r\n"]
    if parameters:
        parameters = f" {parameters};"
    headers = f'Content-Type: multipart/{subtype};{parameters}\r\n boundary="{boundary}"\r\n'
    return headers, b"".join(chunks), False
