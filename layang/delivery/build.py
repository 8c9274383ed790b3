"""Building the copies a delivery attempt sends: personalise, compose, return path, DKIM.

A message is composed once per attempt, or once per recipient when its copies differ (tracking
links and unsubscribe headers name the recipient). Each recipient's copy then gets its own
``X-Layang-Id`` header and VERP envelope sender, and is signed last, over the very bytes relayed;
what is kept for retries stays unsigned, so a retry is signed with whichever key is active then.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from layang.config import Config
from layang.delivery.queue import QueuedTransmission
from layang.mail.compose import compose_message
from layang.mail.dkim import DkimSigner
from layang.mail.message import OutgoingMessage
from layang.mail.return_path import ReturnPaths
from layang.mail.tracking import Tracker, link_domains
from layang.mail.unsubscribe import HEADER_NAMES as UNSUBSCRIBE_HEADERS
from layang.mail.unsubscribe import UnsubscribeTokens


@dataclass(frozen=True, slots=True)
class Copy:
    """One recipient's copy, ready for a transport: its envelope sender and its bytes."""

    mail_from: str
    data: bytes


class CopyBuilder:
    """Builds copies for the transmissions of a batch (``load`` reads the keys and verified
    domains of their accounts, once per batch)."""

    def __init__(self, config: Config) -> None:
        self.tracker = Tracker(config.secret_key, config.public_url)
        self.unsubscribe_tokens = UnsubscribeTokens(
            config.secret_key, config.public_url, config.bounce_domain
        )
        self.signer = DkimSigner(config.secret_key)
        self.return_paths = ReturnPaths(config.secret_key, config.bounce_domain)
        self.trackers: dict[int, Tracker] = {}

    def load(self, account_ids: Iterable[int]) -> None:
        """Read which keys sign, which return-path domains and which tracking domains apply
        for ``account_ids``."""
        ids = set(account_ids)
        self.signer.load(ids)
        self.return_paths.load(ids)
        self.trackers = {
            account_id: replace(self.tracker, public_url=f"https://{domain}")
            for account_id, domain in link_domains(ids).items()
        }

    @staticmethod
    def is_personal(message: OutgoingMessage | None) -> bool:
        """Whether each recipient of ``message`` needs a copy composed for it alone."""
        return message is not None and (message.tracked or not message.is_transactional)

    def body(
        self,
        transmission: QueuedTransmission,
        message: OutgoingMessage | None,
        recipient_id: str | None = None,
    ) -> bytes:
        """The message's MIME bytes: the stored ones (SMTP submissions and retries), else
        composed, personalised for ``recipient_id`` when given. Raises what composing raises."""
        if message is None:
            assert transmission.raw is not None
            return transmission.raw
        if recipient_id is not None:
            message = self.personal_message(message, recipient_id, transmission.account_id)
        return compose_message(message, transmission.message_id)

    def copy(self, transmission: QueuedTransmission, body: bytes, recipient_id: str) -> Copy:
        """The copy of ``body`` for one recipient: its VERP return path and header, for
        broadcast mail submitted over SMTP its one-click unsubscribe headers, signed."""
        if transmission.payload is None and not transmission.is_transactional:
            body = self.unsubscribe_tokens.add_to(body, recipient_id)
        token = self.return_paths.token(recipient_id)
        account_id, from_domain = transmission.account_id, transmission.from_domain
        header = self.return_paths.header(token)
        data = self.signer.sign(body, account_id, from_domain, prefix=header)
        return Copy(self.return_paths.address(token, account_id, from_domain), data)

    def personal_message(
        self, message: OutgoingMessage, recipient_id: str, account_id: int = 0
    ) -> OutgoingMessage:
        """The copy of ``message`` for one recipient: its tracking URLs (on the account's
        verified tracking domain, if it has one), and for mail that is not transactional its
        one-click unsubscribe headers (in place of any the sender gave: a message has one
        List-Unsubscribe)."""
        if message.tracked:
            tracker = self.trackers.get(account_id, self.tracker)
            html = tracker.track_html(
                message.html,
                recipient_id,
                opens=message.open_tracking,
                clicks=message.click_tracking,
            )
            message = message.with_html(html)
        if not message.is_transactional:
            kept = tuple(h for h in message.headers if h.name.lower() not in UNSUBSCRIBE_HEADERS)
            message = replace(
                message, headers=(*kept, *self.unsubscribe_tokens.headers(recipient_id))
            )
        return message
