"""The upstream relay: hands a message to the recipients' side and reports each recipient's fate.

Configured by one URL (``LAYANG_RELAY_URL``):

``smtp://[user:pass@]host[:port]``
    Port 25 by default. STARTTLS is used when the server offers it, without verifying the
    certificate (opportunistic, like Postfix's "may" level). ``?tls=required`` makes STARTTLS
    mandatory and verifies the certificate against the system CAs, or only against
    ``?cafile=/path.pem``; ``?verify=off`` keeps the encryption but skips verification.
    ``?tls=off`` never starts TLS. Credentials (percent-encoded in the URL) are only ever sent
    over TLS, unless ``tls=off`` says plaintext is intended.
``smtps://[user:pass@]host[:port]``
    Implicit TLS, port 465 by default, certificate verified (``cafile=`` and ``verify=off`` as
    above).
``capture:DIR``
    Development sink: one ``.eml`` file per recipient in ``DIR``, nothing leaves the machine.

Delivery problems never raise: every recipient gets a :class:`RecipientResult` saying whether it
was delivered, deferred (try again later) or bounced (never try again).

Over SMTP, a server offering PIPELINING (RFC 2920) gets MAIL, every RCPT and DATA in one write
and their replies read afterwards: two round trips per message instead of one per command.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import smtplib
import socket
import ssl
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from layang.destinations.certificates import verification_failure
from layang.mail.wire import crlf, data_section
from layang.tls_trust import client_ssl_context

DELIVERED = "delivered"
DEFERRED = "deferred"
BOUNCED = "bounced"

IDLE_SECONDS = 30.0
"""A connection unused for this long is closed rather than reused."""

_QUIT_TIMEOUT = 5.0
_GROUP = 100
"""At most this many RCPT commands (with MAIL before, DATA after) are written ahead of their
replies. A client that does not read while it writes must bound what it writes, or a server
blocked on sending replies not yet read would stop reading what we send (RFC 2920 leaves avoiding
that deadlock to the client)."""
_UNSAFE_FILENAME = re.compile(r"[^A-Za-z0-9.@+=_-]")


class RelayConfigError(ValueError):
    """The relay URL (or something it names, like its ``cafile``) is unusable."""


@dataclass(frozen=True)
class RecipientResult:
    """What happened to one recipient.

    ``code`` is the SMTP reply code, 0 when there was no reply to go by (network failure,
    timeout, local error). ``outcome`` is ``"delivered"``, ``"deferred"`` or ``"bounced"``.
    """

    recipient: str
    code: int
    reply: str
    outcome: str


@dataclass(frozen=True)
class SendResult:
    """One result per requested recipient, in the order they were given."""

    recipients: tuple[RecipientResult, ...]

    def by_recipient(self) -> dict[str, RecipientResult]:
        """The results keyed by address (the last one wins if an address was given twice)."""
        return {result.recipient: result for result in self.recipients}


def outcome_for(code: int) -> str:
    """The outcome an SMTP reply code means: 2xx delivered, 5xx bounced, anything else deferred."""
    if 200 <= code < 300:
        return DELIVERED
    if 500 <= code < 600:
        return BOUNCED
    return DEFERRED


def format_reply(code: int, text: bytes | str) -> str:
    """``"<code> <text>"``, the server's text decoded leniently, a multi-line reply on one line."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    joined = " ".join(line.strip() for line in text.splitlines() if line.strip())
    return f"{code} {joined}".strip() if code > 0 else joined


def relay_from_url(
    url: str, *, helo_name: str = "localhost", timeout: float = 60.0, trusted_cafile: str = ""
) -> SmtpRelay | CaptureRelay:
    """The relay the URL describes (see the module documentation for the forms).

    ``helo_name`` is the name given in EHLO/HELO; ``timeout`` bounds every network wait;
    ``trusted_cafile`` (``LAYANG_TLS_CAFILE``) adds CAs to the system's when the URL names no
    ``cafile`` of its own.
    Raises :class:`RelayConfigError` for anything but a well-formed, usable URL, including a
    ``cafile`` that cannot be loaded.
    """
    scheme, _, rest = url.partition(":")
    scheme = scheme.lower()
    if scheme == "capture":
        if not rest:
            raise RelayConfigError("capture: needs a directory, e.g. capture:/var/lib/layang/out")
        return CaptureRelay(Path(rest))
    if scheme not in ("smtp", "smtps") or not rest.startswith("//"):
        raise RelayConfigError(
            f"unsupported relay URL {redact_url(url)!r}: use smtp://, smtps:// or capture:DIR"
        )
    implicit_tls = scheme == "smtps"
    parts = urlsplit(url)
    try:
        port = parts.port or (465 if implicit_tls else 25)
        host = parts.hostname
    except ValueError as error:
        raise RelayConfigError(f"bad relay URL {redact_url(url)!r}: {error}") from None
    if not host:
        raise RelayConfigError(f"relay URL {redact_url(url)!r} names no host")
    if parts.path not in ("", "/") or parts.fragment:
        raise RelayConfigError(f"relay URL {redact_url(url)!r} has a path or fragment")

    options = _query_options(url, parts.query)
    tls = options.pop("tls", None)
    cafile = options.pop("cafile", None)
    verify_given = "verify" in options
    verify = options.pop("verify", "on")
    if options:
        raise RelayConfigError(
            f"unknown relay URL option(s) {sorted(options)}: known are tls, cafile, verify"
        )
    if verify not in ("on", "off"):
        raise RelayConfigError("relay URL option verify must be on or off")
    if implicit_tls:
        if tls is not None:
            raise RelayConfigError("smtps:// is always TLS; the tls option is for smtp://")
        tls = "required"
    elif tls is None:
        tls = "may"
    elif tls not in ("required", "off"):
        raise RelayConfigError("relay URL option tls must be required or off")
    if tls != "required" and (cafile is not None or verify_given):
        raise RelayConfigError("cafile and verify only apply with tls=required or smtps://")

    if tls == "required":
        context = _verifying_context(cafile, verify == "on", trusted_cafile)
    elif tls == "may":
        context = _unverified_context()
    else:
        context = None

    credentials = None
    if parts.username is not None or parts.password is not None:
        user, password = unquote(parts.username or ""), parts.password
        if not user or password is None:
            raise RelayConfigError("relay URL credentials need both a user and a password")
        password = unquote(password)
        if not (user.isascii() and password.isascii()):
            raise RelayConfigError("relay URL credentials must be ASCII")
        credentials = (user, password)

    return SmtpRelay(
        host,
        port,
        implicit_tls=implicit_tls,
        tls=tls,
        context=context,
        credentials=credentials,
        helo_name=helo_name,
        timeout=timeout,
        trusted_cafile=trusted_cafile,
    )


def redact_url(url: str) -> str:
    """``url`` with its password replaced by ``***``: error messages end up in logs."""
    return re.sub(r"//([^/@:]*):[^/@]*@", r"//\1:***@", url)


def _query_options(url: str, query: str) -> dict[str, str]:
    if not query:
        return {}
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        raise RelayConfigError(f"bad query in relay URL {redact_url(url)!r}") from None
    options: dict[str, str] = {}
    for key, value in pairs:
        if key in options:
            raise RelayConfigError(f"relay URL option {key} given twice")
        if not value:
            raise RelayConfigError(f"relay URL option {key} has no value")
        options[key] = value
    return options


def _unverified_context() -> ssl.SSLContext:
    # Opportunistic TLS protects against passive listeners only; most MX certificates would not
    # verify anyway, so checking would just push mail back to plaintext.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _verifying_context(cafile: str | None, verify: bool, trusted_cafile: str) -> ssl.SSLContext:
    if not verify:
        return _unverified_context()
    try:
        if cafile is None:
            return client_ssl_context(trusted_cafile or None)
        return ssl.create_default_context(cafile=cafile)
    except OSError as error:
        raise RelayConfigError(f"cannot load relay cafile {cafile!r}: {error}") from None


class _Stale(Exception):
    """A reused connection turned out to be dead before the transaction started."""


class _Abort(Exception):
    """The whole attempt failed before any recipient could be tried."""

    def __init__(self, code: int, reply: str) -> None:
        super().__init__(reply)
        self.code = code
        self.reply = reply


class _PlaintextRetry(Exception):
    """Opportunistic STARTTLS failed mid-handshake; connect again without it."""


class SmtpRelay:
    """Relays over SMTP to one upstream server, keeping the connection open between sends.

    Not meant to be shared between threads while sending; a lock only keeps ``close`` from
    cutting a transaction in half.
    """

    max_idle: float = IDLE_SECONDS

    def __init__(
        self,
        host: str,
        port: int,
        *,
        implicit_tls: bool = False,
        tls: str = "may",
        context: ssl.SSLContext | None = None,
        credentials: tuple[str, str] | None = None,
        helo_name: str = "localhost",
        timeout: float = 60.0,
        pipelining: bool = True,
        trusted_cafile: str = "",
    ) -> None:
        """``tls`` is ``"may"``, ``"required"`` or ``"off"``; ``context`` is used for TLS.

        ``pipelining=False`` waits for each reply even when the server offers PIPELINING.
        ``trusted_cafile`` (``LAYANG_TLS_CAFILE``) is trusted besides the system's CAs when a
        REQUIRETLS message checks an opportunistic session's certificate.
        """
        self.trusted_cafile = trusted_cafile
        self.host = host
        self.port = port
        self.implicit_tls = implicit_tls
        self.tls = tls
        self.context = context
        self.credentials = credentials
        # An empty name would make smtplib fall back to getfqdn(), a DNS round trip per connect.
        self.helo_name = helo_name or "localhost"
        self.timeout = timeout
        self.pipelining = pipelining
        self.where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self._smtp: smtplib.SMTP | None = None
        self._last_used = 0.0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        scheme = "smtps" if self.implicit_tls else "smtp"
        return f"<SmtpRelay {scheme}://{self.where} tls={self.tls}>"

    def send(
        self,
        mail_from: str,
        recipients: Sequence[str],
        message: bytes,
        *,
        reference: str = "",
        crlf_clean: bool = False,
        attempt: int = 1,
        require_tls: bool = False,
    ) -> SendResult:
        """Relay one message in one SMTP transaction.

        Returns one result per recipient, in order; nothing is raised. MAIL, RCPT and DATA
        replies decide the outcome by their code: MAIL's applies to everyone, each RCPT's to its
        recipient, and the reply to the message (or a refused DATA) to every accepted one.
        Network failures and timeouts defer (code 0) whoever has no reply yet. Failures before
        the transaction (connect, greeting, TLS, AUTH) defer every recipient whatever the code,
        because they are about the relay, not the message. A reused connection found dead at
        MAIL is replaced once, transparently. ``message`` goes out with bare CR and LF line ends
        made CRLF, unless ``crlf_clean`` says there are none; ``reference`` and ``attempt`` are
        unused over SMTP. ``require_tls`` (RFC 8689 REQUIRETLS) sends the message only over TLS
        with a certificate valid for the relay's name, to a server advertising REQUIRETLS, with
        the REQUIRETLS MAIL parameter; otherwise every recipient bounces ``550 5.7.30``.
        """
        recipients = tuple(recipients)
        if not recipients:
            return SendResult(())
        if not crlf_clean:
            # smtplib sends bytes untouched, and SMTP only knows CRLF line ends.
            message = crlf(message)
        with self._lock:
            if self._smtp is not None and time.monotonic() - self._last_used > self.max_idle:
                self._quit()
            try:
                return self._attempt(mail_from, recipients, message, require_tls)
            finally:
                self._last_used = time.monotonic()

    def close(self) -> None:
        """QUIT and drop the connection, if one is open. Never raises."""
        with self._lock:
            self._quit()

    def _attempt(
        self, mail_from: str, recipients: tuple[str, ...], message: bytes, require_tls: bool
    ) -> SendResult:
        reused = self._smtp is not None
        try:
            if self._smtp is None:
                self._smtp = self._connect()
            if require_tls:
                refused = self._requiretls_refusal(self._smtp)
                if refused is not None:
                    return _all(recipients, 550, f"550 5.7.30 {refused}", BOUNCED)
            return self._transaction(
                self._smtp, mail_from, recipients, message, reused, require_tls
            )
        except _Stale:
            self._discard()
            return self._attempt(mail_from, recipients, message, require_tls)
        except _Abort as abort:
            return _all(recipients, abort.code, abort.reply, DEFERRED)

    def _connect(self, starttls: bool = True) -> smtplib.SMTP:
        """A connected, greeted, (TLS-wrapped, authenticated) session, or raises ``_Abort``."""
        try:
            if self.implicit_tls:
                smtp: smtplib.SMTP = smtplib.SMTP_SSL(
                    self.host,
                    self.port,
                    local_hostname=self.helo_name,
                    timeout=self.timeout,
                    context=self.context,
                )
            else:
                smtp = smtplib.SMTP(
                    self.host, self.port, local_hostname=self.helo_name, timeout=self.timeout
                )
        except smtplib.SMTPConnectError as error:
            raise _Abort(error.smtp_code, format_reply(error.smtp_code, error.smtp_error)) from None
        except (smtplib.SMTPException, OSError) as error:
            raise _Abort(0, self._describe(error, connecting=True)) from None
        try:
            self._hello(smtp)
            secure = self.implicit_tls
            if not self.implicit_tls and self.tls != "off":
                secure = self._starttls(smtp, starttls)
            if self.credentials is not None:
                self._authenticate(smtp, secure)
        except _Abort:
            _close_quietly(smtp)
            raise
        except _PlaintextRetry:
            _close_quietly(smtp)
            return self._connect(starttls=False)
        except (smtplib.SMTPException, OSError) as error:
            _close_quietly(smtp)
            raise _Abort(0, self._describe(error)) from None
        return smtp

    def _requiretls_refusal(self, smtp: smtplib.SMTP) -> str | None:
        """Why this session cannot carry a REQUIRETLS message, or None."""
        sock = smtp.sock
        if not isinstance(sock, ssl.SSLSocket):
            return f"REQUIRETLS needs TLS but the session with {self.where} is not encrypted"
        verified = sock.context.verify_mode == ssl.CERT_REQUIRED and sock.context.check_hostname
        if not verified:
            failure = verification_failure(sock, self.host, self.trusted_cafile or None)
            if failure is not None:
                return f"REQUIRETLS needs a verified certificate: {failure}"
        if not smtp.has_extn("requiretls"):
            return f"REQUIRETLS is not supported by {self.where}"
        return None

    def _hello(self, smtp: smtplib.SMTP) -> None:
        code, text = smtp.ehlo()
        if not 200 <= code < 300:
            code, text = smtp.helo()
        if not 200 <= code < 300:
            raise _Abort(code, format_reply(code, text))

    def _starttls(self, smtp: smtplib.SMTP, attempt: bool) -> bool:
        """Whether the session is now encrypted; raises ``_Abort`` when TLS is required."""
        required = self.tls == "required"
        if not attempt:
            return False
        if not smtp.has_extn("starttls"):
            if required:
                raise _Abort(0, f"TLS is required but {self.where} does not offer STARTTLS")
            return False
        try:
            smtp.starttls(context=self.context)
        except smtplib.SMTPResponseException as error:
            reply = format_reply(error.smtp_code, error.smtp_error)
            if required:
                raise _Abort(error.smtp_code, f"{reply} (TLS is required)") from None
            return False
        except ssl.SSLError as error:
            if required:
                raise _Abort(0, self._describe(error)) from None
            # Like Postfix at the "may" level: a failed handshake means plaintext, not no mail.
            raise _PlaintextRetry from None
        self._hello(smtp)
        return True

    def _authenticate(self, smtp: smtplib.SMTP, secure: bool) -> None:
        assert self.credentials is not None
        if not secure and self.tls != "off":
            raise _Abort(
                0,
                f"not sending credentials to {self.where} without TLS (it did not offer "
                "STARTTLS); add ?tls=off to the relay URL to allow plaintext",
            )
        if not smtp.has_extn("auth"):
            raise _Abort(0, f"{self.where} does not offer AUTH but credentials are configured")
        user, password = self.credentials
        try:
            smtp.login(user, password)
        except smtplib.SMTPAuthenticationError as error:
            reply = format_reply(error.smtp_code, error.smtp_error)
            raise _Abort(error.smtp_code, f"authentication failed: {reply}") from None
        except smtplib.SMTPServerDisconnected:
            raise
        except smtplib.SMTPException as error:  # e.g. no mechanism in common
            raise _Abort(0, f"authentication failed: {error}") from None

    def _transaction(
        self,
        smtp: smtplib.SMTP,
        mail_from: str,
        recipients: tuple[str, ...],
        message: bytes,
        reused: bool,
        require_tls: bool = False,
    ) -> SendResult:
        results: list[RecipientResult | None] = [None] * len(recipients)
        try:
            # No RSET before a transaction on a reused connection: every earlier transaction
            # ended cleanly (completed, refused at MAIL, or reset), and a connection the server
            # dropped meanwhile shows itself at MAIL, which is then retried on a new one. The
            # RSET round trip cost a third of a message's time on a fast link.
            refused = self._unsendable(smtp, mail_from, recipients, results)
            if refused is not None:
                return _all(recipients, 0, refused, BOUNCED)
            pending = [index for index, result in enumerate(results) if result is None]
            if not pending:
                return _fill(recipients, results, 0, "no recipient was tried")
            options = self._mail_options(smtp, mail_from, recipients, message)
            if require_tls:
                options += " REQUIRETLS"
            mail = f"MAIL FROM:<{mail_from}>{options}"
            if self.pipelining and smtp.has_extn("pipelining"):
                exchange = self._pipelined_envelope
            else:
                exchange = self._stepwise_envelope
            envelope = exchange(smtp, mail, recipients, pending, results, reused)
            if isinstance(envelope, SendResult):
                return envelope
            code, text = self._send_body(smtp, message)
            reply = format_reply(code, text)
            for index in envelope:
                results[index] = result_for(recipients[index], code, reply)
            if code == 421:
                self._discard()
            return _fill(recipients, results, 0, "no reply")
        except (smtplib.SMTPException, OSError) as error:
            self._discard()
            return _fill(recipients, results, 0, self._describe(error))

    def _stepwise_envelope(
        self,
        smtp: smtplib.SMTP,
        mail: str,
        recipients: tuple[str, ...],
        pending: list[int],
        results: list[RecipientResult | None],
        reused: bool,
    ) -> list[int] | SendResult:
        """MAIL, RCPT and DATA one reply at a time: the accepted recipients' indexes once the
        server waits for the message, or the finished result."""
        code, text = self._open(smtp, _command(smtp, mail), reused)
        if not 200 <= code < 300:
            return _all(recipients, code, format_reply(code, text))
        accepted: list[int] = []
        for index in pending:
            code, text = smtp.docmd("RCPT", f"TO:<{recipients[index]}>")
            if 200 <= code < 300:
                accepted.append(index)
                continue
            results[index] = result_for(recipients[index], code, format_reply(code, text))
            if code == 421:
                # The server is closing the channel: nobody left can be tried on it.
                self._discard()
                return _fill(recipients, results, code, format_reply(code, text))
        if not accepted:
            self._reset_quietly(smtp)
            return _fill(recipients, results, 0, "no recipient was tried")
        code, text = smtp.docmd("DATA")
        return self._after_data(smtp, recipients, accepted, results, code, text)

    def _pipelined_envelope(
        self,
        smtp: smtplib.SMTP,
        mail: str,
        recipients: tuple[str, ...],
        pending: list[int],
        results: list[RecipientResult | None],
        reused: bool,
    ) -> list[int] | SendResult:
        """Like :meth:`_stepwise_envelope`, but MAIL, the RCPTs and DATA are written together
        (in groups of at most ``_GROUP`` commands) and their replies read in order afterwards.

        DATA is sent even if every RCPT will be refused: the client cannot know in advance.
        """
        accepted: list[int] = []
        for start in range(0, len(pending), _GROUP):
            group = pending[start : start + _GROUP]
            last = start + _GROUP >= len(pending)
            lines = [mail] if start == 0 else []
            lines.extend(f"RCPT TO:<{recipients[index]}>" for index in group)
            if last:
                lines.append("DATA")
            payload = _command(smtp, *lines)
            if start == 0:
                code, text = self._open(smtp, payload, reused)
                if not 200 <= code < 300:
                    if code != 421:
                        self._drain(smtp, len(group), data_sent=last)
                    return _all(recipients, code, format_reply(code, text))
            else:
                smtp.send(payload)
            for index in group:
                code, text = smtp.getreply()
                if 200 <= code < 300:
                    accepted.append(index)
                    continue
                results[index] = result_for(recipients[index], code, format_reply(code, text))
                if code == 421:
                    # Whatever was written after it goes unanswered: the server is closing.
                    self._discard()
                    return _fill(recipients, results, code, format_reply(code, text))
        code, text = smtp.getreply()
        return self._after_data(smtp, recipients, accepted, results, code, text)

    def _open(self, smtp: smtplib.SMTP, payload: bytes, reused: bool) -> tuple[int, bytes]:
        """Write the transaction's first command(s) and read MAIL's reply.

        Raises ``_Stale`` when a reused connection turns out dead here: nothing of this
        transaction can have reached a server that never answered MAIL, so retrying it on a
        new connection cannot deliver twice.
        """
        try:
            smtp.send(payload)
            code, text = smtp.getreply()
        except (smtplib.SMTPException, OSError):
            if reused:
                raise _Stale from None
            raise
        if code == 421:
            if reused:
                raise _Stale
            self._discard()
        return code, text

    def _after_data(
        self,
        smtp: smtplib.SMTP,
        recipients: tuple[str, ...],
        accepted: list[int],
        results: list[RecipientResult | None],
        code: int,
        text: bytes,
    ) -> list[int] | SendResult:
        """The accepted indexes if the server now waits for the message, else the result."""
        if code == 354 and accepted:
            return accepted
        if code == 354:
            # RFC 2920 section 3.1: when no RCPT was accepted but DATA was, "the client SMTP
            # should send a single dot"; the server then refuses the empty message, which ends
            # the transaction. Recipients keep their RCPT replies.
            smtp.send(b".\r\n")
            code, _ = smtp.getreply()
            if code == 421:
                self._discard()
            return _fill(recipients, results, 0, "no recipient was tried")
        reply = format_reply(code, text)
        for index in accepted:
            results[index] = result_for(recipients[index], code, reply)
        if code == 421:
            self._discard()
        else:
            # A refused DATA leaves the transaction open; the next MAIL would be "nested".
            self._reset_quietly(smtp)
        return _fill(recipients, results, 0, "no recipient was tried")

    def _drain(self, smtp: smtplib.SMTP, rcpts: int, data_sent: bool) -> None:
        """Read the replies to RCPTs (and DATA) written after a refused MAIL, so the next
        transaction reads its own; a connection that cannot be brought back in step is dropped."""
        try:
            for _ in range(rcpts):
                smtp.getreply()
            if data_sent:
                code, _ = smtp.getreply()
                if code == 354:  # a server accepting DATA without a MAIL: end it empty
                    smtp.send(b".\r\n")
                    smtp.getreply()
        except (smtplib.SMTPException, OSError):
            self._discard()

    def _send_body(self, smtp: smtplib.SMTP, message: bytes) -> tuple[int, bytes]:
        """Send the message after a 354, dot-stuffed and terminated, and read the reply.

        What ``smtplib.SMTP.data`` does after its DATA command, in one write (a separate small
        write for the terminator could wait out a delayed ACK), and without a regular
        expression pass over messages with no line starting with a dot (nearly all).
        """
        smtp.send(data_section(message))
        return smtp.getreply()

    def _unsendable(
        self,
        smtp: smtplib.SMTP,
        mail_from: str,
        recipients: tuple[str, ...],
        results: list[RecipientResult | None],
    ) -> str | None:
        """Bounce addresses that cannot be sent here; returns the reply if the sender can't be."""
        if "\r" in mail_from or "\n" in mail_from:
            return "invalid sender address (line break)"
        smtputf8 = smtp.has_extn("smtputf8")
        no_utf8 = f"5.6.7 SMTPUTF8 is required but was not offered by {self.where}"
        if not mail_from.isascii() and not smtputf8:
            return no_utf8
        for index, recipient in enumerate(recipients):
            if "\r" in recipient or "\n" in recipient:
                reason = "invalid recipient address (line break)"
                results[index] = RecipientResult(recipient, 0, reason, BOUNCED)
            elif not recipient.isascii() and not smtputf8:
                results[index] = RecipientResult(recipient, 0, no_utf8, BOUNCED)
        return None

    def _mail_options(
        self, smtp: smtplib.SMTP, mail_from: str, recipients: tuple[str, ...], message: bytes
    ) -> str:
        options = []
        if smtp.has_extn("size"):
            options.append(f"SIZE={len(message)}")
        if not message.isascii() and smtp.has_extn("8bitmime"):
            options.append("BODY=8BITMIME")
        addresses = (mail_from, *recipients)
        if smtp.has_extn("smtputf8") and not all(a.isascii() for a in addresses):
            options.append("SMTPUTF8")
            smtp.command_encoding = "utf-8"
        return "".join(f" {option}" for option in options)

    def _reset_quietly(self, smtp: smtplib.SMTP) -> None:
        try:
            code, _ = smtp.rset()
        except (smtplib.SMTPException, OSError):
            code = 0
        if code != 250:
            self._discard()

    def _describe(self, error: BaseException, connecting: bool = False) -> str:
        cause = error
        if isinstance(error, smtplib.SMTPServerDisconnected) and isinstance(
            error.__context__, OSError
        ):
            cause = error.__context__
        if isinstance(cause, TimeoutError):
            return f"timed out after {self.timeout:g}s talking to {self.where}"
        if isinstance(cause, ConnectionRefusedError):
            return f"connection refused by {self.where}: {cause}"
        if isinstance(cause, socket.gaierror):
            return f"cannot resolve {self.host}: {cause}"
        if isinstance(cause, ssl.SSLCertVerificationError):
            return f"TLS certificate of {self.where} not accepted: {cause.verify_message}"
        if isinstance(cause, ssl.SSLError):
            return f"TLS with {self.where} failed: {cause}"
        if connecting:
            return f"cannot connect to {self.where}: {cause}"
        if isinstance(cause, smtplib.SMTPServerDisconnected):
            return f"connection to {self.where} lost: {cause}"
        return f"network error talking to {self.where}: {cause}"

    def _discard(self) -> None:
        smtp, self._smtp = self._smtp, None
        if smtp is not None:
            _close_quietly(smtp)

    def _quit(self) -> None:
        smtp, self._smtp = self._smtp, None
        if smtp is None:
            return
        try:
            if smtp.sock is not None:
                # Saying goodbye politely must not hold a worker for a full timeout.
                smtp.sock.settimeout(min(self.timeout, _QUIT_TIMEOUT))
            smtp.quit()
        except (smtplib.SMTPException, OSError):
            pass
        finally:
            _close_quietly(smtp)


def _command(smtp: smtplib.SMTP, *lines: str) -> bytes:
    """Command lines as one write, encoded as smtplib would (UTF-8 once SMTPUTF8 is in use)."""
    return "".join(f"{line}\r\n" for line in lines).encode(smtp.command_encoding)


def _close_quietly(smtp: smtplib.SMTP) -> None:
    with contextlib.suppress(OSError):
        smtp.close()


def result_for(
    recipient: str, code: int, reply: str, outcome: str | None = None
) -> RecipientResult:
    """One recipient's result from a server's reply (its outcome from the code unless given)."""
    code = max(code, 0)  # smtplib reports an unparsable reply as -1
    return RecipientResult(recipient, code, reply, outcome or outcome_for(code))


def _all(
    recipients: Sequence[str], code: int, reply: str, outcome: str | None = None
) -> SendResult:
    return SendResult(tuple(result_for(r, code, reply, outcome) for r in recipients))


def _fill(
    recipients: Sequence[str], results: list[RecipientResult | None], code: int, reply: str
) -> SendResult:
    """The results, with ``code``/``reply`` for every recipient that has none yet."""
    return SendResult(
        tuple(
            result if result is not None else result_for(recipient, code, reply)
            for recipient, result in zip(recipients, results, strict=True)
        )
    )


class CaptureRelay:
    """Development sink: writes each recipient's copy to a file instead of sending it."""

    def __init__(self, directory: Path) -> None:
        """``directory`` is created on first use if missing."""
        self.directory = directory

    def __repr__(self) -> str:
        return f"<CaptureRelay {self.directory}>"

    def send(
        self,
        mail_from: str,
        recipients: Sequence[str],
        message: bytes,
        *,
        reference: str = "",
        crlf_clean: bool = False,
        attempt: int = 1,
        require_tls: bool = False,
    ) -> SendResult:
        """Write ``DIR/<reference>-<recipient>-<random>.eml`` per recipient, atomically.

        Each file is ``Return-Path`` and ``Delivered-To`` headers followed by ``message``
        unchanged, whatever ``crlf_clean`` says (nothing goes over SMTP, so line ends are
        left as given). A filesystem error defers that recipient (code 0); nothing is raised.
        """
        results = []
        for recipient in recipients:
            try:
                name = self._write(mail_from, recipient, message, reference)
            except OSError as error:
                reply = f"cannot write to {self.directory}: {error}"
                results.append(RecipientResult(recipient, 0, reply, DEFERRED))
            else:
                reply = f"250 2.0.0 captured as {name}"
                results.append(RecipientResult(recipient, 250, reply, DELIVERED))
        return SendResult(tuple(results))

    def close(self) -> None:
        """Nothing to release."""

    def _write(self, mail_from: str, recipient: str, message: bytes, reference: str) -> str:
        self.directory.mkdir(parents=True, exist_ok=True)
        name = (
            f"{_safe_filename(reference or 'msg')}-{_safe_filename(recipient)}"
            f"-{secrets.token_hex(4)}.eml"
        )
        # A dot-name ending in .tmp: readers globbing *.eml never see a half-written file.
        temporary = self.directory / f".{name}.tmp"
        head = f"Return-Path: <{mail_from}>\r\nDelivered-To: {recipient}\r\n".encode()
        try:
            with open(temporary, "xb") as file:
                file.write(head)
                file.write(message)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, self.directory / name)
        except OSError:
            temporary.unlink(missing_ok=True)
            raise
        return name


def _safe_filename(value: str) -> str:
    return _UNSAFE_FILENAME.sub("_", value).lstrip(".")[:80] or "_"
