"""The SMTP submission server: STARTTLS, AUTH with an API key, sandbox rules, enqueue.

Every check that touches the database runs in a worker thread (``asyncio.to_thread``): the event
loop serves all sessions and must never wait on a disk or a network.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import re
import socket
import time
from typing import Any

from aiosmtpd.smtp import SMTP, AuthResult, Envelope, Session

from layang.clock import now_ms
from layang.config import Config
from layang.db import UNAVAILABLE_ERRORS, database
from layang.domain import idempotency
from layang.domain.accounts import authenticate_key
from layang.domain.errors import (
    AmbiguousAuthor,
    IdempotencyInFlight,
    IdempotencyKeyReused,
    InvalidInput,
    LayangError,
    MessageTooLarge,
    RateLimited,
    RecipientNotAuthorized,
    SenderDomainNotVerified,
    SenderNotAllowed,
    SendingPaused,
)
from layang.domain.idempotency import Replay
from layang.domain.intake import SubmittedMessage, accept_transmission
from layang.domain.sandbox import sender_allowed, verified_addresses
from layang.domain.sending_domains import check_sender_domain
from layang.ids import new_id
from layang.mail.message import MAX_RECIPIENTS, InvalidAddress, normalize_address
from layang.mail.submitted import prepare_submission
from layang.models import SEND, Account
from layang.smtp_server.capped import CappedSMTP, ListeningController
from layang.smtp_server.limits import AUTH_FAILURES_PER_CONNECTION, ConnectionLimits
from layang.submission.tls import server_tls_context

log = logging.getLogger("layang.smtpd")

MAILTARGET_USER = "smtp_mt_injection"


def check_credentials(user: str, key: str) -> Account | None:
    """The account for SMTP user ``user`` with API key ``key``, or None; a key must be allowed
    to send (scope ``full`` or ``send``).

    The user is the account's name; the fixed name used by Mailtarget clients is accepted too,
    the key alone then naming the account.
    """
    database.connect(reuse_if_open=True)
    credential = authenticate_key(key)
    if credential is None or not credential.allows(SEND):
        return None
    if user not in (credential.account.name, MAILTARGET_USER):
        return None
    return credential.account


def _decode(value: str) -> bytes | None:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None


class SubmissionHandler:
    """aiosmtpd handler: only the hooks the submission server needs."""

    def __init__(self, config: Config) -> None:
        self.config = config

    # -- authentication --------------------------------------------------------------------

    async def _login(self, server: SMTP, user: bytes, key: bytes) -> AuthResult:
        try:
            user_text, key_text = user.decode(), key.decode()
        except UnicodeDecodeError:
            return AuthResult(success=False, handled=False)
        try:
            account = await asyncio.to_thread(check_credentials, user_text, key_text)
        except UNAVAILABLE_ERRORS:
            # The worker thread's connection checks itself and reconnects on its next use.
            log.warning("smtp auth deferred: database unavailable")
            return AuthResult(
                success=False,
                handled=False,
                message="454 4.7.0 Temporary authentication failure; try again later",
            )
        if account is None:
            log.info("smtp auth failed user=%r", user_text[:64])
            if isinstance(server, SubmissionSMTP):
                server.count_auth_failure()
            return AuthResult(
                success=False, handled=False, message="535 5.7.8 Authentication credentials invalid"
            )
        return AuthResult(success=True, auth_data=account)

    @staticmethod
    async def _response(server: SMTP, args: list[str], challenge: str) -> bytes | None:
        """The client's initial response from the AUTH line, else its answer to ``challenge``;
        None when there is none (the error reply has then been sent)."""
        if len(args) == 1:
            answer = await server.challenge_auth(challenge)
            return answer if isinstance(answer, bytes) else None
        decoded = _decode(args[1])
        if decoded is None:
            await server.push("501 5.5.2 Cannot decode base64")
        return decoded

    async def auth_PLAIN(self, server: SMTP, args: list[str]) -> AuthResult:
        blob = await self._response(server, args, "")
        if blob is None:
            return AuthResult(success=False, handled=True)
        parts = blob.split(b"\0")
        if len(parts) != 3:
            await server.push("501 5.5.2 Cannot split the AUTH PLAIN value")
            return AuthResult(success=False, handled=True)
        return await self._login(server, parts[1], parts[2])

    async def auth_LOGIN(self, server: SMTP, args: list[str]) -> AuthResult:
        user = await self._response(server, args, "Username:")
        if user is None:
            return AuthResult(success=False, handled=True)
        key = await server.challenge_auth("Password:")
        if not isinstance(key, bytes):
            return AuthResult(success=False, handled=True)
        return await self._login(server, user, key)

    async def handle_EHLO(
        self,
        server: SMTP,
        session: Session,
        envelope: Envelope,
        hostname: str,
        responses: list[str],
    ) -> list[str]:
        session.host_name = hostname
        if session.ssl is not None:
            # RFC 8689: REQUIRETLS is offered only on a TLS session.
            responses = [*responses[:-1], "250-REQUIRETLS", responses[-1]]
        return responses

    # -- the envelope ----------------------------------------------------------------------

    async def handle_MAIL(
        self,
        server: SMTP,
        session: Session,
        envelope: Envelope,
        address: str,
        mail_options: list[str],
    ) -> str:
        account: Account = session.auth_data
        try:
            sender = normalize_address(address)
        except InvalidAddress:
            return "553 5.1.7 Sender address rejected: not a valid address"
        if not sender_allowed(account, sender, self.config):
            return (
                f"553 5.7.1 Sender not allowed: sandbox accounts send from "
                f"{self.config.sandbox_sender}"
            )
        if self.config.require_verified_domain and not account.is_sandbox:
            try:
                await asyncio.to_thread(self._check_domain, account, sender)
            except SenderDomainNotVerified as error:
                return f"553 5.7.1 Sender not allowed: {error.message}"
            except UNAVAILABLE_ERRORS:
                return "451 4.3.0 Temporary failure checking the sender; try again later"
        envelope.mail_from = sender
        envelope.mail_options.extend(mail_options)
        return "250 2.1.0 OK"

    async def handle_RCPT(
        self,
        server: SMTP,
        session: Session,
        envelope: Envelope,
        address: str,
        rcpt_options: list[str],
    ) -> str:
        account: Account = session.auth_data
        try:
            recipient = normalize_address(address)
        except InvalidAddress:
            return "553 5.1.3 Recipient address rejected: not a valid address"
        if len(envelope.rcpt_tos) >= MAX_RECIPIENTS:
            return "452 4.5.3 Too many recipients"
        if account.is_sandbox:
            try:
                allowed = await asyncio.to_thread(self._verified, account, recipient)
            except UNAVAILABLE_ERRORS:
                return "451 4.3.0 Temporary failure checking the recipient; try again later"
            if not allowed:
                return f"550 5.7.1 <{recipient}> not an authorized recipient"
        if recipient.lower() not in (r.lower() for r in envelope.rcpt_tos):
            envelope.rcpt_tos.append(recipient)
            envelope.rcpt_options.extend(rcpt_options)
        return "250 2.1.5 OK"

    def _check_domain(self, account: Account, address: str) -> None:
        database.connect(reuse_if_open=True)
        check_sender_domain(account, address, self.config)

    @staticmethod
    def _verified(account: Account, address: str) -> bool:
        database.connect(reuse_if_open=True)
        return bool(verified_addresses(account, [address]))

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        try:
            transmission_id = await asyncio.to_thread(
                self.store,
                session.auth_data,
                envelope.mail_from,
                list(envelope.rcpt_tos),
                undo_dot_stuffing(envelope.original_content or b""),
                getattr(envelope, "require_tls", False),
            )
        except LayangError as error:
            return reply_for(error)
        except Exception:
            log.exception("could not store a submitted message")
            return "451 4.3.0 Could not store the message; try again later"
        return f"250 2.0.0 OK queued as {transmission_id}"

    def store(
        self,
        account: Account,
        mail_from: str,
        recipients: list[str],
        data: bytes,
        require_tls: bool = False,
    ) -> str:
        """Durably queue the message through the same intake as the API
        (``accept_transmission``); returns its transmission id, or the first one's for a
        repeat of a message with the same ``Idempotency-Key`` header. Raises the domain's
        errors (see ``reply_for``)."""
        database.connect(reuse_if_open=True)
        transmission_id, accepted_at = new_id(), now_ms()
        submitted = SubmittedMessage(
            transmission_id=transmission_id,
            accepted_at=accepted_at,
            mail_from=mail_from,
            recipients=tuple(recipients),
            prepared=prepare_submission(data, transmission_id, accepted_at, mail_from),
            require_tls=require_tls,
        )
        claim = None
        key = submitted.prepared.idempotency_key
        if key is not None:
            idempotency.check_key(key)
            fingerprint = idempotency.fingerprint("SMTP", mail_from, *recipients, b"", data)
            outcome = idempotency.begin(account, key, fingerprint)
            if isinstance(outcome, Replay):
                return str(outcome.json()["transmissionId"])
            claim = outcome
        try:
            return accept_transmission(account, submitted, self.config, claim).transmission_id
        except BaseException:
            if claim is not None:
                idempotency.release(claim)
            raise


# A line start after a bare LF or a bare CR, where a client stuffed a dot.
_STUFFED_AFTER_BARE_END = re.compile(rb"(?:(?<!\r)\n|\r(?!\n))\.")


def undo_dot_stuffing(data: bytes) -> bytes:
    """``data`` as aiosmtpd gives it, with the dot-stuffing of RFC 5321 §4.5.2 undone at every
    line start, whatever ended the line before.

    aiosmtpd takes only CRLF for a line end, so it removes the added dot only after one; a
    client that ends lines with a bare LF (which RFC 5322 forbids, and many programs write)
    stuffs after those too, and each such dot would otherwise reach the recipient."""
    return _STUFFED_AFTER_BARE_END.sub(lambda match: match.group(0)[:-1], data)


def take_requiretls(arg: str | None) -> tuple[str | None, bool]:
    """The MAIL argument without a REQUIRETLS parameter, and whether it had one (parameters
    come after the address's closing ``>``)."""
    if not arg or ">" not in arg:
        return arg, False
    address, _, parameters = arg.rpartition(">")
    kept = [p for p in parameters.split() if p.upper() != "REQUIRETLS"]
    if len(kept) == len(parameters.split()):
        return arg, False
    return " ".join([f"{address}>", *kept]), True


def reply_for(error: LayangError) -> str:
    """The SMTP reply for a domain error raised at the end of DATA: the one place they map."""
    if isinstance(error, AmbiguousAuthor):
        return f"550 5.6.0 {error.message}"
    if isinstance(error, SenderNotAllowed):
        return f"554 5.7.1 From header not allowed: sandbox accounts send from {error.allowed}"
    if isinstance(error, SenderDomainNotVerified):
        return f"554 5.7.1 From header not allowed: {error.message}"
    if isinstance(error, RecipientNotAuthorized):
        return "550 5.7.1 A recipient is not an authorized recipient"
    if isinstance(error, MessageTooLarge):
        return f"552 5.3.4 Message too large (LAYANG_MAX_MESSAGE_BYTES is {error.limit})"
    if isinstance(error, SendingPaused):
        return f"550 5.7.1 {error.message}"
    if isinstance(error, RateLimited):
        return f"451 4.7.1 Rate limit of {error.limit} messages reached; try again later"
    if isinstance(error, IdempotencyInFlight):
        return "451 4.3.0 A message with this Idempotency-Key is still being stored; retry"
    if isinstance(error, IdempotencyKeyReused):
        return "554 5.7.0 This Idempotency-Key was used for a different message"
    if isinstance(error, InvalidInput) and error.field == "Idempotency-Key":
        return "554 5.6.0 Idempotency-Key must be 1 to 255 printable ASCII characters"
    return f"554 5.6.0 {error.message}"


class SubmissionSession(Session):
    """aiosmtpd's session without its legacy ``login_data``: aiosmtpd 1.4 sets it on every
    successful AUTH and logs a deprecation warning each time. Nothing here reads it (the
    account is ``auth_data``), so it is kept silently."""

    @property
    def login_data(self) -> Any:
        return self._login_data

    @login_data.setter
    def login_data(self, value: Any) -> None:
        self._login_data = value


class SubmissionSMTP(CappedSMTP):
    """aiosmtpd's session with the submission server's limits: AUTH only after STARTTLS, a
    connection cap, a short idle timeout until AUTH, and a bound on wrong passwords.

    The timeout works through aiosmtpd's ``_timeout_duration`` (read at every reset of the
    timer).
    """

    size_setting = "LAYANG_MAX_MESSAGE_BYTES"

    def __init__(
        self, handler: object, *, limits: ConnectionLimits, auth_timeout: float, **kwargs: Any
    ) -> None:
        super().__init__(handler, limits=limits, **kwargs)
        self._authenticated_timeout = self._timeout_duration
        self._timeout_duration = auth_timeout
        self._auth_failures = 0

    def _create_session(self) -> Session:
        return SubmissionSession(self.loop)

    def refused(self) -> None:
        _warn_refused(self.limits, self._address)

    # Not named auth_*: aiosmtpd takes every such method for a mechanism and advertises it.
    def count_auth_failure(self) -> None:
        """Count wrong credentials, for this connection and for its client address."""
        self._auth_failures += 1
        self.limits.auth_failed(self._address)

    async def smtp_AUTH(self, arg: str) -> None:
        if self.tls_context and not self._tls_protocol:
            await self.push("530 5.7.0 Must issue a STARTTLS command first")
            return
        if self.limits.auth_blocked(self._address):
            await self._close("421 4.7.0 Too many failed authentications; try again later")
            return
        await super().smtp_AUTH(arg)
        assert self.session is not None
        if self.session.authenticated:
            self._timeout_duration = self._authenticated_timeout
            self._reset_timeout()
        elif self._auth_failures >= AUTH_FAILURES_PER_CONNECTION or (
            self._auth_failures and self.limits.auth_blocked(self._address)
        ):
            await self._close("421 4.7.0 Too many failed authentications; closing")

    async def smtp_MAIL(self, arg: str) -> None:
        """MAIL with RFC 8689's REQUIRETLS parameter, which aiosmtpd does not know: taken out
        of the command, accepted only on a TLS session, and kept with the envelope."""
        arg, requiretls = take_requiretls(arg)
        if requiretls and self._tls_protocol is None:
            await self.push("530 5.7.10 REQUIRETLS needs a TLS session: issue STARTTLS first")
            return
        await super().smtp_MAIL(arg)
        if requiretls and self.envelope is not None and self.envelope.mail_from:
            self.envelope.require_tls = True  # type: ignore[attr-defined]

    async def _close(self, reply: str) -> None:
        await self.push(reply)
        assert self._handler_coroutine is not None and self.transport is not None
        self._handler_coroutine.cancel()
        self.transport.close()


_last_refusal_warning = 0.0


def _warn_refused(limits: ConnectionLimits, address: str) -> None:
    """One log line a minute at most while connections are refused: a flood must not become
    a flood of log lines."""
    global _last_refusal_warning
    now = time.monotonic()
    if now - _last_refusal_warning >= 60:
        _last_refusal_warning = now
        log.warning(
            "smtp connection refused: %d open (cap %d), %d from %s (cap %d)",
            limits.total,
            limits.max_connections,
            limits.open[address],
            address,
            limits.max_per_address,
        )


class SubmissionController(ListeningController):
    def __init__(
        self,
        handler: object,
        *,
        limits: ConnectionLimits,
        auth_timeout: float,
        listener: socket.socket | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(handler, limits=limits, listener=listener, **kwargs)
        self.auth_timeout = auth_timeout

    def factory(self) -> SMTP:
        return SubmissionSMTP(
            self.handler, limits=self.limits, auth_timeout=self.auth_timeout, **self.SMTP_kwargs
        )


def submission_server(
    config: Config, listener: socket.socket | None = None
) -> SubmissionController:
    """The configured server, not yet started (``.start()`` / ``.stop()``), on ``listener`` (a
    bound socket, which it then owns) or else on ``LAYANG_SMTP_BIND``."""
    host, port = config.smtp_host_port
    return SubmissionController(
        SubmissionHandler(config),
        listener=listener,
        limits=ConnectionLimits(
            max_connections=config.smtp_max_connections,
            max_per_address=config.smtp_max_connections_per_address,
            max_auth_failures=config.smtp_max_auth_failures,
        ),
        auth_timeout=config.smtp_auth_timeout_seconds,
        hostname=host,
        port=port,
        server_hostname=socket.gethostname(),
        tls_context=server_tls_context(config),
        require_starttls=False,
        auth_required=True,
        auth_require_tls=True,
        data_size_limit=config.max_message_bytes,
        # RFC 6531: addresses with non-ASCII local parts, relayed over SMTPUTF8 where offered.
        enable_SMTPUTF8=True,
        ident="Layang ESMTP",
    )
