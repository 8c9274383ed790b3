"""One transaction's envelope, and what it asks of the server that carries it.

Everything here is computed from the envelope and the extensions a server advertised in its EHLO
reply, before a byte of the transaction is written: whether the server can carry it at all
(SMTPUTF8 for a non-ASCII address, RFC 6531; REQUIRETLS, RFC 8689), the MAIL command with the
parameters the message needs, and the commands of one pipelined group (RFC 2920). The SMTP
client (:mod:`layang.delivery.smtp`) speaks them; the other transports read only the envelope.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from layang.delivery.outcomes import BOUNCED, RecipientResult
from layang.mail.wire import crlf

GROUP = 100
"""At most this many RCPT commands (with MAIL before, DATA after) are written ahead of their
replies. A client that does not read while it writes must bound what it writes, or a server
blocked on sending replies not yet read would stop reading what we send (RFC 2920 leaves avoiding
that deadlock to the client)."""


@dataclass(frozen=True)
class Envelope:
    """One transaction: the envelope sender, the recipients, the bytes, and MAIL parameters
    the message asks for (``requiretls``: RFC 8689).

    ``crlf_clean=True`` promises that every line of ``data`` already ends in CRLF (true of
    everything :mod:`layang.mail.compose` builds), which spares a scan of every byte; bytes
    from elsewhere (SMTP submission) leave it False, and bare CR or LF line ends go out as CRLF.
    ``reference`` (the transmission) names capture files; ``attempt`` counts the tries of these
    recipients (1 for the first), read only by the mailbox simulator."""

    mail_from: str
    recipients: tuple[str, ...]
    data: bytes
    crlf_clean: bool = False
    requiretls: bool = False
    reference: str = ""
    attempt: int = 1


@dataclass(frozen=True)
class MailCommand:
    """The MAIL command that opens a transaction (``line``, without CRLF) and the encoding of
    the transaction's commands: ``utf-8`` once it asks for SMTPUTF8, else ``ascii``."""

    line: str
    encoding: str


@dataclass(frozen=True)
class FirstGroup:
    """A transaction that opens with one pipelined group: ``envelope``, its bytes
    (``message``, CRLF line ends), its MAIL command, and ``commands`` (MAIL, every RCPT, DATA)
    as written."""

    envelope: Envelope
    message: bytes
    mail: MailCommand
    commands: bytes


def unsendable(
    envelope: Envelope,
    extensions: Mapping[str, str],
    where: str,
    results: list[RecipientResult | None],
) -> str | None:
    """Why the server at ``where`` (offering ``extensions``, names in upper case) cannot carry
    ``envelope`` at all, as a reply to bounce every recipient with; None when it can. A
    recipient it cannot be given to gets its bounce in ``results`` (indexed as
    ``envelope.recipients``) instead."""
    mail_from = envelope.mail_from
    if "\r" in mail_from or "\n" in mail_from:
        return "invalid sender address (line break)"
    # RFC 6531 section 3.4: a non-ASCII envelope address needs SMTPUTF8; without it that
    # address cannot be given, and it is never mangled to fit.
    smtputf8 = "SMTPUTF8" in extensions
    if not mail_from.isascii() and not smtputf8:
        return _no_utf8(where)
    if envelope.requiretls and "REQUIRETLS" not in extensions:
        return f"550 5.7.30 REQUIRETLS is not supported by {where}"
    for index, recipient in enumerate(envelope.recipients):
        if "\r" in recipient or "\n" in recipient:
            reason = "invalid recipient address (line break)"
            results[index] = RecipientResult(recipient, 0, reason, BOUNCED)
        elif not recipient.isascii() and not smtputf8:
            results[index] = RecipientResult(recipient, 553, _no_utf8(where), BOUNCED)
    return None


def mail_command(envelope: Envelope, message: bytes, extensions: Mapping[str, str]) -> MailCommand:
    """The MAIL command for ``envelope`` whose bytes (CRLF line ends) are ``message``, with
    the parameters the server offers and the message needs: SIZE, BODY=8BITMIME, SMTPUTF8
    (a non-ASCII address, or header fields in UTF-8: RFC 6532), REQUIRETLS."""
    options = []
    if "SIZE" in extensions:
        options.append(f"SIZE={len(message)}")
    if not message.isascii() and "8BITMIME" in extensions:
        options.append("BODY=8BITMIME")
    addresses = (envelope.mail_from, *envelope.recipients)
    utf8 = "SMTPUTF8" in extensions and not (
        all(a.isascii() for a in addresses) and _head(message).isascii()
    )
    if utf8:
        options.append("SMTPUTF8")
    if envelope.requiretls:
        options.append("REQUIRETLS")
    parameters = "".join(f" {option}" for option in options)
    return MailCommand(
        f"MAIL FROM:<{envelope.mail_from}>{parameters}", "utf-8" if utf8 else "ascii"
    )


def first_group(envelope: Envelope, extensions: Mapping[str, str], where: str) -> FirstGroup | None:
    """``envelope``'s transaction as one pipelined group, for a server at ``where`` offering
    ``extensions``; None when it does not open so (no recipient, more than :data:`GROUP`, or
    an address the server cannot be given): it is then sent the usual way."""
    recipients = envelope.recipients
    scratch: list[RecipientResult | None] = [None] * len(recipients)
    message = envelope.data if envelope.crlf_clean else crlf(envelope.data)
    if (
        not recipients
        or len(recipients) > GROUP
        or unsendable(envelope, extensions, where, scratch) is not None
        or any(result is not None for result in scratch)
    ):
        return None
    mail = mail_command(envelope, message, extensions)
    commands = command_group(mail.line, recipients, range(len(recipients)), True, mail.encoding)
    return FirstGroup(envelope, message, mail, commands)


def command_group(
    mail: str | None, recipients: tuple[str, ...], group: Iterable[int], last: bool, encoding: str
) -> bytes:
    """One pipelined group of commands: MAIL (if given), a RCPT per index, DATA if ``last``."""
    lines = [mail] if mail is not None else []
    lines.extend(f"RCPT TO:<{recipients[index]}>" for index in group)
    if last:
        lines.append("DATA")
    return "".join(f"{line}\r\n" for line in lines).encode(encoding)


def _no_utf8(where: str) -> str:
    return f"553 5.6.7 SMTPUTF8 is required but was not offered by {where}"


def _head(message: bytes) -> bytes:
    """The header section of ``message`` (up to the empty line)."""
    end = message.find(b"\r\n\r\n")
    return message if end < 0 else message[:end]
