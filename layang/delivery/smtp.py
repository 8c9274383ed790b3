"""One SMTP client session on asyncio: the only SMTP client Layang sends with.

With PIPELINING (RFC 2920) MAIL, every RCPT and DATA go out in one write and their replies are
read afterwards, so a message costs two round trips; a server without it gets one command at a
time. aiosmtplib was the other candidate; it writes one command and waits for its reply each
time (no PIPELINING), which costs three round trips and more per message: against servers
25-100 ms away that is the difference that matters.

A session is opened once (connect, greeting, EHLO, STARTTLS, AUTH) and then carries many
transactions, one at a time. Outcomes (:mod:`layang.delivery.outcomes`) come from the replies:
MAIL's applies to everyone, each RCPT's to its recipient, the reply to the message (or a
refused DATA) to every accepted one; a network failure or timeout defers (code 0) whoever has
no reply yet. Nothing here raises for delivery problems except :class:`Refused` from
:meth:`SmtpSession.open`, which says why the session could not be set up (so the caller can try
another host, and defers the mail whatever the code: it is about the server, not the message),
and :class:`Stale` from :meth:`SmtpSession.send` when a reused session was found dead before
anything was sent (the caller retries on a new session: that cannot deliver twice); both belong
to the transport seam (:mod:`layang.delivery.transports`). What a transaction asks of the server
(MAIL's parameters, SMTPUTF8, REQUIRETLS) and the commands it is written as are computed from
its envelope alone (:mod:`layang.delivery.envelope`); this module speaks them.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any

from layang.delivery.envelope import (
    GROUP,
    Envelope,
    FirstGroup,
    command_group,
    first_group,
    mail_command,
    unsendable,
)
from layang.delivery.outcomes import (
    BOUNCED,
    RecipientResult,
    answer_the_rest,
    code_of,
    deferring_the_rest,
    format_reply,
    result_for,
    results_for_all,
)
from layang.delivery.replies import Lost, ReplyReader, failure
from layang.delivery.transports import Refused, Stale
from layang.destinations.shaping import speaks_of_pace
from layang.mail.wire import crlf, data_section

_QUIT_TIMEOUT = 5.0
GREETING_SECONDS = 30.0
"""A server that has not greeted within this long is not serving the session (RFC 5321 section
4.5.3.2.1 gives clients 5 minutes; a server at its session limit never greets at all)."""


class SmtpSession:
    """A client session to one server (``host``, reached at ``address``:``port``)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        address: str | None = None,
        helo_name: str = "localhost",
        tls: str = "may",
        implicit_tls: bool = False,
        context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        credentials: tuple[str, str] | None = None,
        timeout: float = 60.0,
        connect_timeout: float | None = None,
        source_address: str | None = None,
        pipelining: bool = True,
        policy: str | None = None,
        plaintext_fallback: bool = True,
    ) -> None:
        """``tls`` is ``may`` (STARTTLS when offered), ``required`` or ``off``; ``context`` is
        used for TLS, with ``server_hostname`` (default ``host``) for SNI and name checks."""
        self.host = host
        self.port = port
        self.address = address or host
        self.helo_name = helo_name or "localhost"
        self.tls = tls
        self.implicit_tls = implicit_tls
        self.context = context
        self.server_hostname = server_hostname or host
        self.credentials = credentials
        self.timeout = timeout
        self.connect_timeout = connect_timeout or timeout
        self.policy = policy or ("required" if tls == "required" else "opportunistic")
        self.source_address = source_address
        self.plaintext_fallback = plaintext_fallback
        self.offered_starttls = False
        self.pipelining = pipelining
        self.where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self.extensions: dict[str, str] = {}
        self.greeting = ""
        self.peer = self.address
        self.tls_info: dict[str, Any] | None = None
        self.tls_error: BaseException | None = None
        self.transactions = 0
        self.last_used = time.monotonic()
        self.closed = False
        self.reports: list[Any] = []  # what setting it up showed of TLS (TLS-RPT)
        self._transport: asyncio.Transport | None = None
        self._replies: ReplyReader | None = None
        self._encoding = "ascii"  # utf-8 while a transaction asks for SMTPUTF8
        self._primed: FirstGroup | None = None  # out behind the last body, unanswered

    def __repr__(self) -> str:
        return f"<SmtpSession {self.where} via {self.address}>"

    # -- setting up ----------------------------------------------------------------------

    async def open(self, *, starttls: bool = True) -> None:
        """Connect, read the greeting, EHLO, STARTTLS and AUTH as configured; raises
        :class:`Refused`. An opportunistic STARTTLS that fails mid-handshake is retried once
        on a new connection without TLS."""
        try:
            await self._open(starttls)
        except _PlaintextRetry:
            self._abort()
            self.closed = False
            await self._open(False)

    async def _open(self, starttls: bool) -> None:
        loop = asyncio.get_running_loop()
        replies = ReplyReader(self.where, self._describe)
        try:
            self._transport, _ = await asyncio.wait_for(
                loop.create_connection(
                    lambda: replies,
                    self.address,
                    self.port,
                    ssl=self.context if self.implicit_tls else None,
                    server_hostname=self.server_hostname if self.implicit_tls else None,
                    local_addr=(self.source_address, 0) if self.source_address else None,
                ),
                self.connect_timeout,
            )
        except (TimeoutError, OSError, ssl.SSLError) as error:
            raise Refused("connect", 0, self._describe(error, connecting=True)) from None
        self._replies = replies
        peer = self._transport.get_extra_info("peername")
        self.peer = peer[0] if peer else self.address
        try:
            code, text = await self._greeting(replies)
            self.greeting = format_reply(code, text)
            if code != 220:
                raise Refused("greeting", code, self.greeting)
            await self._hello()
            secure = self.implicit_tls
            if self.implicit_tls:
                self._note_tls()
            elif self.tls != "off" and starttls:
                secure = await self._starttls()
            elif self.tls == "required":
                raise Refused("tls", 0, f"TLS is required but {self.where} was tried without it")
            if self.credentials is not None:
                await self._authenticate(secure)
        except Refused:
            self._abort()
            raise
        except _PlaintextRetry:
            raise
        except Lost as lost:
            self._abort()
            raise Refused("connect", 0, lost.reply) from None
        except asyncio.CancelledError:
            # The engine closing while the server has not greeted us yet: drop the connection.
            self._abort()
            raise
        self.last_used = time.monotonic()

    async def _greeting(self, replies: ReplyReader) -> tuple[int, str]:
        """The server's greeting, within ``GREETING_SECONDS``: a server that serves fewer
        sessions than are opened leaves the others unanswered in its listen queue, and that
        must show as soon as it says something of the server (a ``greeting`` refusal with
        code 0, which lowers the site's session limit)."""
        wait = min(self.timeout, GREETING_SECONDS)
        try:
            return await replies.next(wait)
        except Lost:
            if replies.failure is not None:
                raise
            raise Refused(
                "greeting", 0, f"no greeting from {self.where} within {wait:g} s"
            ) from None

    async def _hello(self) -> None:
        code, text = await self._command(f"EHLO {self.helo_name}")
        if code == 250:
            lines = text.splitlines()
            self.extensions = {}
            for line in lines[1:]:
                name, _, value = line.strip().partition(" ")
                self.extensions[name.upper()] = value
            if self.tls_info is None and "STARTTLS" in self.extensions:
                self.offered_starttls = True
            return
        code, text = await self._command(f"HELO {self.helo_name}")
        if code != 250:
            raise Refused("greeting", code, format_reply(code, text))
        self.extensions = {}

    def detail(self) -> dict[str, Any]:
        """What a delivery event says of the session: the server's name, the address
        reached, and its TLS (None in plaintext)."""
        return {"host": self.host, "address": self.peer, "tls": self.tls_info}

    def has(self, extension: str) -> bool:
        """Whether the server advertised ``extension`` (case-insensitive) in its EHLO reply."""
        return extension.upper() in self.extensions

    async def _starttls(self) -> bool:
        required = self.tls == "required"
        if not self.has("STARTTLS"):
            if required:
                raise Refused("tls", 0, f"TLS is required but {self.where} does not offer STARTTLS")
            return False
        code, text = await self._command("STARTTLS")
        if code != 220:
            reply = format_reply(code, text)
            if required:
                raise Refused("tls", code, f"{reply} (TLS is required)")
            return False
        assert self._transport is not None and self._replies is not None
        # Whatever came behind the 220 was written before TLS, by the server or by anyone on
        # the path, to be read as the TLS phase's replies (the STARTTLS injection of
        # CVE-2011-0411): a protocol error, never data. RFC 3207 section 4.2.
        self._refuse_unsolicited("after its 220 to STARTTLS")
        loop = asyncio.get_running_loop()
        try:
            transport = await asyncio.wait_for(
                loop.start_tls(
                    self._transport,
                    self._replies,
                    self.context or ssl.create_default_context(),
                    server_hostname=self.server_hostname,
                ),
                self.timeout,
            )
        except (TimeoutError, ssl.SSLError, OSError, ConnectionError) as error:
            if required or not self.plaintext_fallback:
                self.tls_error = error
                raise Refused(
                    "tls", 0, failure(error, self.where, self.host, self.timeout, handshake=True)
                ) from None
            # Like Postfix at the "may" level: a failed handshake means plaintext, not no mail.
            raise _PlaintextRetry from None
        if transport is None:
            raise Refused("tls", 0, f"TLS with {self.where} failed: the connection closed")
        self._transport = transport
        # Plaintext that came while the handshake was being set up, or anything the server
        # said inside TLS before our EHLO, is as unsolicited; the TLS phase then starts with
        # nothing read, and only the EHLO sent inside it says what the server offers.
        self._refuse_unsolicited("before the TLS handshake ended")
        self._replies.forget()
        self.extensions = {}
        self._note_tls()
        await self._hello()
        return True

    def _refuse_unsolicited(self, when: str) -> None:
        """Drop the session when the server sent bytes no command asked for (raises
        :class:`Refused`, kind ``tls``: the caller tries another host or defers)."""
        assert self._replies is not None
        pending = self._replies.pending
        if not pending:
            return
        reason = f"{self.where} sent {pending} unsolicited bytes {when}; the session was dropped"
        self.tls_error = ConnectionError(reason)
        self._abort()
        raise Refused("tls", 0, reason)

    def _note_tls(self) -> None:
        assert self._transport is not None
        ssl_object = self._transport.get_extra_info("ssl_object")
        if ssl_object is None:
            return
        cipher = ssl_object.cipher()
        verified = bool(self.context and self.context.verify_mode == ssl.CERT_REQUIRED)
        self.tls_info = {
            "version": ssl_object.version(),
            "cipher": cipher[0] if cipher else None,
            "verified": verified,
            "policy": self.policy,
        }

    @property
    def ssl_object(self) -> ssl.SSLObject | None:
        """The TLS state of the session, or None in plaintext."""
        if self._transport is None:
            return None
        return self._transport.get_extra_info("ssl_object")

    async def _authenticate(self, secure: bool) -> None:
        assert self.credentials is not None
        if not secure and self.tls != "off":
            raise Refused(
                "auth",
                0,
                f"not sending credentials to {self.where} without TLS (it did not offer "
                "STARTTLS); add ?tls=off to the relay URL to allow plaintext",
            )
        if not self.has("AUTH"):
            raise Refused(
                "auth", 0, f"{self.where} does not offer AUTH but credentials are configured"
            )
        mechanisms = self.extensions["AUTH"].upper().split()
        user, password = self.credentials
        if "PLAIN" in mechanisms:
            token = _base64(f"\0{user}\0{password}")
            code, text = await self._command(f"AUTH PLAIN {token}")
        elif "LOGIN" in mechanisms:
            code, text = await self._command("AUTH LOGIN")
            if code == 334:
                code, text = await self._command(_base64(user))
            if code == 334:
                code, text = await self._command(_base64(password))
        else:
            raise Refused("auth", 0, "authentication failed: no mechanism in common")
        if code != 235:
            raise Refused("auth", code, f"authentication failed: {format_reply(code, text)}")

    # -- transactions --------------------------------------------------------------------

    async def send(
        self,
        envelope: Envelope,
        before_end: Callable[[], Awaitable[None]] | None = None,
        following: Callable[[], Envelope | None] | None = None,
    ) -> list[RecipientResult]:
        """One transaction: a result per recipient, in order. Raises :class:`Stale` when a
        reused session turns out dead before the server answered MAIL. ``before_end`` is
        awaited once the server is ready for the body, before it is written: from the body's
        end on, the server may have the message.

        ``following``, with PIPELINING and no CHUNKING, is called once just before the body
        goes out: the envelope it returns (None: none) has its MAIL, RCPT and DATA written
        behind the body's end, in the same packet (RFC 2920 section 3.1: message content may
        begin a group), so that a stream of transactions costs one round trip each. The next
        call must then be for that envelope; if the caller gives it up instead, :meth:`close`
        drops the connection (the server is waiting for its body)."""
        primed, self._primed = self._primed, None
        if primed is not None and primed.envelope is not envelope:
            self._abort()
            raise Stale
        reused = self.transactions > 0
        self.transactions += 1
        recipients = envelope.recipients
        results: list[RecipientResult | None] = [None] * len(recipients)
        if primed is not None:
            message = primed.message
        else:
            message = envelope.data if envelope.crlf_clean else crlf(envelope.data)
        try:
            # No RSET before a transaction on a reused session: every earlier transaction ended
            # cleanly (completed, refused at MAIL, or reset), and a session the server dropped
            # meanwhile shows itself at MAIL (``Stale``). The RSET round trip cost a third of a
            # message's time on a fast link.
            refused = unsendable(envelope, self.extensions, self.where, results)
            if primed is not None and (refused is not None or any(r is not None for r in results)):
                self._abort()  # not what went out behind the last body: cannot happen
                raise Stale
            if refused is not None:
                return results_for_all(recipients, code_of(refused), refused, BOUNCED)
            pending = [index for index, result in enumerate(results) if result is None]
            if not pending:
                return deferring_the_rest(recipients, results, 0, "no recipient was tried")
            if primed is not None:
                mail = primed.mail
            else:
                mail = mail_command(envelope, message, self.extensions)
            self._encoding = mail.encoding
            if (
                self.pipelining
                and "PIPELINING" in self.extensions
                and "CHUNKING" in self.extensions
                and len(pending) <= GROUP
            ):
                await self._chunked(
                    mail.line, recipients, pending, results, reused, message, before_end
                )
                return deferring_the_rest(recipients, results, 0, "no reply")
            if primed is not None or (self.pipelining and self.has("PIPELINING")):
                accepted = await self._pipelined(
                    mail.line, recipients, pending, results, reused, written=primed is not None
                )
            else:
                accepted = await self._stepwise(mail.line, recipients, pending, results, reused)
            if isinstance(accepted, list) and not isinstance(accepted, _Done):
                if before_end is not None:
                    await before_end()
                after = self._prime(following) if following is not None else b""
                code, text = await self._send_body(message, after)
                reply = format_reply(code, text)
                for index in accepted:
                    results[index] = result_for(recipients[index], code, reply)
                if code == 421:
                    self._abort()
            return deferring_the_rest(recipients, results, 0, "no reply")
        except Lost as lost:
            self._abort()
            return deferring_the_rest(recipients, results, 0, lost.reply)
        finally:
            self.last_used = time.monotonic()

    async def _stepwise(
        self,
        mail: str,
        recipients: tuple[str, ...],
        pending: list[int],
        results: list[RecipientResult | None],
        reused: bool,
    ) -> list[int]:
        code, text = await self._first(f"{mail}\r\n".encode(self._encoding), reused)
        if not 200 <= code < 300:
            answer_the_rest(results, recipients, code, format_reply(code, text))
            return _Done()
        accepted: list[int] = []
        for index in pending:
            code, text = await self._command(f"RCPT TO:<{recipients[index]}>")
            if 200 <= code < 300:
                accepted.append(index)
                continue
            results[index] = result_for(recipients[index], code, format_reply(code, text))
            if code == 421:
                self._abort()
                answer_the_rest(results, recipients, code, format_reply(code, text))
                return _Done()
        if not accepted:
            await self._reset_quietly()
            return _Done()
        code, text = await self._command("DATA")
        return await self._after_data(recipients, accepted, results, code, text)

    async def _pipelined(
        self,
        mail: str,
        recipients: tuple[str, ...],
        pending: list[int],
        results: list[RecipientResult | None],
        reused: bool,
        *,
        written: bool = False,
    ) -> list[int]:
        """MAIL, RCPT and DATA in groups (RFC 2920); ``written``: the first group went out
        already, behind the last transaction's body (:meth:`_prime`)."""
        accepted: list[int] = []
        for start in range(0, len(pending), GROUP):
            group = pending[start : start + GROUP]
            last = start + GROUP >= len(pending)
            if start == 0:
                payload = (
                    b"" if written else command_group(mail, recipients, group, last, self._encoding)
                )
                code, text = await self._first(payload, reused)
                if not 200 <= code < 300:
                    if code != 421:
                        await self._drain(len(group), data_sent=last)
                    answer_the_rest(results, recipients, code, format_reply(code, text))
                    return _Done()
            else:
                self._write(command_group(None, recipients, group, last, self._encoding))
            for index in group:
                code, text = await self._reply()
                if 200 <= code < 300:
                    accepted.append(index)
                    continue
                results[index] = result_for(recipients[index], code, format_reply(code, text))
                if code == 421:
                    self._abort()
                    answer_the_rest(results, recipients, code, format_reply(code, text))
                    return _Done()
        code, text = await self._reply()
        return await self._after_data(recipients, accepted, results, code, text)

    async def _chunked(
        self,
        mail: str,
        recipients: tuple[str, ...],
        pending: list[int],
        results: list[RecipientResult | None],
        reused: bool,
        message: bytes,
        before_end: Callable[[], Awaitable[None]] | None,
    ) -> None:
        """The whole transaction in one write and one round trip (RFC 3030 CHUNKING with RFC
        2920 PIPELINING): MAIL, every RCPT, and the message as one ``BDAT <size> LAST`` chunk
        (raw bytes: no dot-stuffing, no end-of-data line). The server may have the message once
        the chunk is written, so ``before_end`` is awaited before anything is."""
        if before_end is not None:
            await before_end()
        head = command_group(mail, recipients, pending, False, self._encoding)
        code, text = await self._first(head + b"BDAT %d LAST\r\n" % len(message) + message, reused)
        if not 200 <= code < 300:
            if code != 421:
                await self._drain(len(pending) + 1, data_sent=False)
            answer_the_rest(results, recipients, code, format_reply(code, text))
            return
        accepted: list[int] = []
        for index in pending:
            code, text = await self._reply()
            if 200 <= code < 300:
                accepted.append(index)
                continue
            results[index] = result_for(recipients[index], code, format_reply(code, text))
            if code == 421:
                # The server is closing: what it accepted never reached the end of a message.
                self._abort()
                for each in accepted:
                    results[each] = None
                answer_the_rest(results, recipients, code, format_reply(code, text))
                return
        code, text = await self._reply()
        reply = format_reply(code, text)
        for index in accepted:
            results[index] = result_for(recipients[index], code, reply)
        if code == 421:
            self._abort()
        elif not 200 <= code < 300:
            # A refused last chunk may leave the transaction open (RFC 3030 section 2 leaves
            # it to the server): the next MAIL would be "nested".
            await self._reset_quietly()

    def _prime(self, following: Callable[[], Envelope | None]) -> bytes:
        """The next transaction's first group, to go out behind this body's end (empty: no
        next transaction is pipelined). Only an envelope :meth:`send` would open with one
        pipelined group qualifies; ``following`` is asked only when one could."""
        if not (self.pipelining and self.has("PIPELINING")) or "CHUNKING" in self.extensions:
            return b""
        envelope = following()
        primed = None if envelope is None else first_group(envelope, self.extensions, self.where)
        if primed is None:
            return b""  # none, or sent the usual way, as the next transaction still
        self._primed = primed
        return primed.commands

    async def _first(self, payload: bytes, reused: bool) -> tuple[int, str]:
        """Write the transaction's first command(s) (none: they are out already) and read
        MAIL's reply; ``Stale`` when a reused session is found dead (or closing) here."""
        try:
            self._write(payload)  # empty: only whether the connection still stands
            code, text = await self._reply()
        except Lost:
            if reused:
                self._abort()
                raise Stale from None
            raise
        if code == 421:
            self._abort()
            if reused and not _about_the_pace(text):
                raise Stale
        return code, text

    async def _after_data(
        self,
        recipients: tuple[str, ...],
        accepted: list[int],
        results: list[RecipientResult | None],
        code: int,
        text: str,
    ) -> list[int]:
        if code == 354 and accepted:
            return accepted
        if code == 354:
            # RFC 2920 section 3.1: no RCPT accepted but DATA was: "the client SMTP should send
            # a single dot"; the server refuses the empty message, which ends the transaction.
            self._write(b".\r\n")
            code, _ = await self._reply()
            if code == 421:
                self._abort()
            return _Done()
        reply = format_reply(code, text)
        for index in accepted:
            results[index] = result_for(recipients[index], code, reply)
        if code == 421:
            self._abort()
        else:
            # A refused DATA leaves the transaction open; the next MAIL would be "nested".
            await self._reset_quietly()
        return _Done()

    async def _drain(self, rcpts: int, data_sent: bool) -> None:
        try:
            for _ in range(rcpts):
                await self._reply()
            if data_sent:
                code, _ = await self._reply()
                if code == 354:
                    self._write(b".\r\n")
                    await self._reply()
        except Lost:
            self._abort()

    async def _send_body(self, message: bytes, after: bytes = b"") -> tuple[int, str]:
        self._write(data_section(message) + after if after else data_section(message))
        return await self._reply()

    async def _reset_quietly(self) -> None:
        try:
            code, _ = await self._command("RSET")
        except Lost:
            code = 0
        if code != 250:
            self._abort()

    # -- the wire ------------------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        if self._transport is None or self._transport.is_closing():
            raise Lost(f"connection to {self.where} lost: closed")
        self._transport.write(data)

    async def _command(self, line: str) -> tuple[int, str]:
        self._write(f"{line}\r\n".encode(self._encoding))
        return await self._reply()

    async def _reply(self) -> tuple[int, str]:
        """The next reply: its code (0 if unparseable) and its text lines joined by newlines;
        raises :class:`Lost` when the connection failed or ``timeout`` passed first."""
        assert self._replies is not None
        return await self._replies.next(self.timeout)

    # -- ending --------------------------------------------------------------------------

    async def close(self) -> None:
        """QUIT and drop the connection (drop it at once while a pipelined transaction waits
        for its body: QUIT would be read as the body); never raises."""
        if self.closed:
            return
        if self._primed is not None:
            self._primed = None
            self._abort()
            return
        if self._transport is not None and not self._transport.is_closing():
            try:
                self._write(b"QUIT\r\n")
                await asyncio.wait_for(self._reply(), min(self.timeout, _QUIT_TIMEOUT))
            except (TimeoutError, Lost, OSError):
                pass
        self._abort()

    def abort(self) -> None:
        """Drop the connection at once, without QUIT."""
        self._abort()

    def _abort(self) -> None:
        self.closed = True
        transport, self._transport = self._transport, None
        if transport is not None:
            with contextlib.suppress(Exception):  # a broken transport is already gone
                transport.abort()

    def _describe(self, error: BaseException, connecting: bool = False) -> str:
        return failure(error, self.where, self.host, self.timeout, connecting=connecting)


class _PlaintextRetry(Exception):
    pass


class _Done(list):  # type: ignore[type-arg]
    """The transaction ended before the body (results are set)."""


def _about_the_pace(text: str) -> bool:
    """Whether a 421 that ended a reused session speaks of the site's pace rather than of the
    session: every 421 slows a site down
    (:func:`~layang.destinations.shaping.is_slow_down`), but a server closing a session it kept
    for a while (``421 4.4.2 Idle too long``) says nothing of the pace."""
    return speaks_of_pace(f"421 {text}")


def _base64(value: str) -> str:
    return base64.b64encode(value.encode()).decode()
