"""The inbound SMTP server (``layang inbound``): the MX of the return-path domains.

Plain SMTP (STARTTLS offered), no AUTH: anyone may send, but only to the addresses the domain
layer knows (``layang.domain.feedback.mailbox_for``, the ``u+<token>@`` unsubscribe addresses
of ``List-Unsubscribe``: any mail to one unsubscribes, as RFC 2369 has it, and the addresses of
the accounts' inbound routes, ``layang.domain.inbound_routing``); everything else is
``550 5.1.1`` at RCPT. A message
is answered ``250`` once it is recorded or kept, whatever it contains; only a database outage
gets a ``451`` (the sender tries again later). Database work runs in worker threads
(``asyncio.to_thread``), and parsing in child processes under a CPU-time limit
(``layang.inbound.parsing``): the event loop serves every session.
"""

from __future__ import annotations

import asyncio
import logging
import socket

from aiosmtpd.smtp import SMTP, Envelope, Session

from layang.config import Config
from layang.db import UNAVAILABLE_ERRORS, database
from layang.domain.dmarc import reporting_domain, store_reports
from layang.domain.errors import NotFound
from layang.domain.feedback import Mailbox, keep_unrecognised, mailbox_for, record_inbound
from layang.domain.inbound_mail import Arrival, store_received
from layang.domain.inbound_routing import RouteTarget, route_for
from layang.domain.suppressions import find_unsubscribe, unsubscribe
from layang.inbound.authentication import Authenticator
from layang.inbound.dmarc_reports import NotAReport
from layang.inbound.parsing import ReportReader
from layang.inbound.spamd import spam_score
from layang.mail.return_path import ReturnPaths
from layang.mail.unsubscribe import UnsubscribeTokens
from layang.models import INBOUND_REJECT
from layang.smtp_server.capped import CappedSMTP, ListeningController
from layang.smtp_server.limits import ConnectionLimits
from layang.submission.tls import server_tls_context

log = logging.getLogger("layang.inbound")

MAX_RECIPIENTS = 20
IDLE_TIMEOUT_SECONDS = 60.0
MAX_CONNECTIONS = 200
MAX_CONNECTIONS_PER_ADDRESS = 20


class InboundHandler:
    """aiosmtpd handler: only the hooks the inbound server needs."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.paths = ReturnPaths(config.secret_key, config.bounce_domain)
        self.unsubscribe_tokens = UnsubscribeTokens(
            config.secret_key, config.public_url, config.bounce_domain
        )
        self.reader = ReportReader()
        self.authenticator = Authenticator(config)

    async def handle_RCPT(
        self,
        server: SMTP,
        session: Session,
        envelope: Envelope,
        address: str,
        rcpt_options: list[str],
    ) -> str:
        if len(envelope.rcpt_tos) >= MAX_RECIPIENTS:
            return "452 4.5.3 Too many recipients"
        try:
            # Layang's own mailboxes come first: no inbound route can take a bounce, a report
            # or an unsubscribe meant for the service.
            token = await asyncio.to_thread(self._unsubscribe_token, address)
            if token is not None:
                tokens: list[str] = envelope.__dict__.setdefault("unsubscribes", [])
                if token not in tokens:
                    tokens.append(token)
                    envelope.rcpt_tos.append(address)
                return "250 2.1.5 OK"
            mailbox = await asyncio.to_thread(self._mailbox, address)
            target = None if mailbox is not None else await asyncio.to_thread(self._route, address)
        except UNAVAILABLE_ERRORS:
            return "451 4.3.0 Temporary failure checking the recipient; try again later"
        except Exception:
            log.exception("could not check an inbound recipient")
            return "451 4.3.0 Temporary failure checking the recipient; try again later"
        if isinstance(target, RouteTarget):
            if target.action == INBOUND_REJECT:
                return f"550 5.7.1 <{address}>: the recipient refuses this mail"
            routed: dict[str, list[RouteTarget]] = envelope.__dict__.setdefault("routed", {})
            if address.lower() not in {a.lower() for a in envelope.rcpt_tos}:
                routed.setdefault(target.route_id, []).append(target)
                envelope.rcpt_tos.append(address)
            return "250 2.1.5 OK"
        if mailbox is None:
            return f"550 5.1.1 <{address}>: no such recipient here"
        mailboxes: dict[str, Mailbox] = envelope.__dict__.setdefault("mailboxes", {})
        if address.lower() not in mailboxes:
            mailboxes[address.lower()] = mailbox
            envelope.rcpt_tos.append(address)
        return "250 2.1.5 OK"

    def _route(self, address: str) -> RouteTarget | bool | None:
        database.connect(reuse_if_open=True)
        return route_for(address)

    def _unsubscribe_token(self, address: str) -> str | None:
        """The token of a ``u+<token>@`` address whose email exists, else None."""
        local = address.strip().strip("<>").rpartition("@")[0]
        if not local.lower().startswith("u+"):
            return None
        database.connect(reuse_if_open=True)
        try:
            find_unsubscribe(self.unsubscribe_tokens, local[2:])
        except NotFound:
            return None
        return local[2:]

    def _mailbox(self, address: str) -> Mailbox | None:
        database.connect(reuse_if_open=True)
        return mailbox_for(address, self.paths, self.config)

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        mailboxes = list(envelope.__dict__.get("mailboxes", {}).values())
        tokens = list(envelope.__dict__.get("unsubscribes", []))
        routed: dict[str, list[RouteTarget]] = envelope.__dict__.get("routed", {})
        data = envelope.original_content or b""
        client = (session.peer[0] if isinstance(session.peer, tuple) else "", session.host_name)
        try:
            if routed:
                await asyncio.to_thread(
                    self._receive_routed, envelope.mail_from or "", client, routed, data
                )
            await asyncio.to_thread(
                self._receive, envelope.mail_from or "", mailboxes, tokens, data
            )
        except UNAVAILABLE_ERRORS:
            log.warning("inbound mail deferred: database unavailable")
            return "451 4.3.0 Could not store the message; try again later"
        except Exception:
            log.exception("could not record inbound mail")
            return "451 4.3.0 Could not store the message; try again later"
        return "250 2.0.0 OK"

    def _receive(
        self, mail_from: str, mailboxes: list[Mailbox], tokens: list[str], data: bytes
    ) -> None:
        database.connect(reuse_if_open=True)
        for token in tokens:
            try:
                unsubscribe(self.unsubscribe_tokens, token)
            except NotFound:
                log.info("unsubscribe by mail for an email deleted since RCPT")
        reports_to = [m for m in mailboxes if m.dmarc]
        mailboxes = [m for m in mailboxes if not m.dmarc]
        if reports_to:
            self._receive_dmarc(mail_from, reports_to, data)
        if mailboxes:
            report = self.reader.read(data)
            record_inbound(report, mailboxes, mail_from, data, self.paths, self.config)

    def _receive_routed(
        self,
        mail_from: str,
        client: tuple[str, str | None],
        routed: dict[str, list[RouteTarget]],
        data: bytes,
    ) -> None:
        """Read, check and score the message, then store it for each route (before ``250``)."""
        parsed = self.reader.read_routed(data)
        authentication = self.authenticator.check(data, client[0], mail_from, client[1] or "")
        score = spam_score(self.config.spamd, data) if self.config.spamd else None
        recipients = tuple(t.address for targets in routed.values() for t in targets)
        arrival = Arrival(mail_from, recipients, data, parsed, authentication.as_json(), score)
        database.connect(reuse_if_open=True)
        store_received(arrival, routed, self.config)

    def _receive_dmarc(self, mail_from: str, mailboxes: list[Mailbox], data: bytes) -> None:
        found = self.reader.read_dmarc(data)
        if isinstance(found, NotAReport):
            keep_unrecognised(mail_from, mailboxes, data, f"DMARC: {found.reason}", self.config)
        elif not store_reports(found, (reporting_domain(m.address) for m in mailboxes)):
            reason = "DMARC: a report about no verified sending domain reporting here"
            keep_unrecognised(mail_from, mailboxes, data, reason, self.config)


class InboundSMTP(CappedSMTP):
    """aiosmtpd's session with a connection cap (in all and per client address)."""


class InboundController(ListeningController):
    def factory(self) -> SMTP:
        return InboundSMTP(self.handler, limits=self.limits, **self.SMTP_kwargs)

    def stop(self, no_assert: bool = False) -> None:
        super().stop(no_assert=no_assert)
        self.handler.reader.close()


def inbound_server(config: Config, listener: socket.socket | None = None) -> InboundController:
    """The configured server, not yet started (``.start()`` / ``.stop()``), on ``listener`` (a
    bound socket, which it then owns) or else on ``LAYANG_INBOUND_BIND``."""
    host, port = config.inbound_host_port
    return InboundController(
        InboundHandler(config),
        listener=listener,
        limits=ConnectionLimits(
            max_connections=MAX_CONNECTIONS,
            max_per_address=MAX_CONNECTIONS_PER_ADDRESS,
            max_auth_failures=1,
        ),
        hostname=host,
        port=port,
        server_hostname=socket.gethostname(),
        # Offered, never required: an MX must take mail from servers without TLS too.
        tls_context=server_tls_context(config),
        require_starttls=False,
        data_size_limit=config.inbound_max_mb * 1024 * 1024,
        enable_SMTPUTF8=False,
        auth_exclude_mechanism=["LOGIN", "PLAIN"],
        timeout=IDLE_TIMEOUT_SECONDS,
        ident="Layang inbound ESMTP",
    )
