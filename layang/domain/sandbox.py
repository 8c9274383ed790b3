"""The sandbox: who a sandbox account may send to, and how a recipient gives consent."""

from __future__ import annotations

import hashlib
import html
import secrets
from collections.abc import Iterable

import peewee

from layang.clock import now_ms
from layang.config import Config
from layang.db import write_transaction
from layang.domain.errors import Conflict, NotFound, RecipientNotAuthorized, SenderNotAllowed
from layang.mail.message import Mailbox, OutgoingMessage, is_simulated
from layang.mail.outbox import queue_message
from layang.models import UNVERIFIED, VERIFIED, Account, AuthorizedRecipient
from layang.pagination import Page, keyset_page

TOKEN_LIFETIME_MS = 7 * 24 * 3600 * 1000


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _new_token() -> tuple[str, str]:
    token = secrets.token_urlsafe(32)  # 256 random bits
    return token, _token_hash(token)


def _get(account: Account, recipient_id: str) -> AuthorizedRecipient:
    recipient = AuthorizedRecipient.get_or_none(
        (AuthorizedRecipient.id == recipient_id) & (AuthorizedRecipient.account == account.id)
    )
    if recipient is None:
        raise NotFound(f"No authorized recipient {recipient_id!r}.")
    return recipient


def _send_verification(
    account: Account, recipient: AuthorizedRecipient, token: str, config: Config
) -> str:
    """Queue the consent email through the normal pipeline, so it shows in Activity."""
    link = f"{config.public_url}/consent/{token}"
    who = account.name
    text = (
        f"Hello,\n\n{who} would like to send test email to {recipient.email} from the "
        f"Layang sandbox.\n\nIf that is fine with you, open this link and press Give Consent:\n"
        f"{link}\n\nThe link works once and expires in 7 days. If you do not know {who}, "
        f"ignore this email: nothing will be sent to you.\n"
    )
    body = (
        f"<p>Hello,</p><p><strong>{html.escape(who)}</strong> would like to send test email to "
        f"{html.escape(recipient.email)} from the Layang sandbox.</p>"
        f'<p><a href="{html.escape(link)}">Review the request and give consent</a></p>'
        f"<p>The link works once and expires in 7 days. If you do not know "
        f"{html.escape(who)}, ignore this email: nothing will be sent to you.</p>"
    )
    message = OutgoingMessage(
        sender=Mailbox(config.sandbox_sender, "Layang Sandbox"),
        to=(Mailbox(recipient.email, recipient.name or None),),
        subject=f"{who} would like to send you test email",
        text=text,
        html=f"<!DOCTYPE html><html><body>{body}</body></html>",
    )
    metadata = {"purpose": "sandbox-verification", "authorizedRecipientId": recipient.id}
    return queue_message(account, message, metadata, source="sandbox")


def add_authorized_recipient(
    account: Account, email: str, name: str | None, config: Config
) -> AuthorizedRecipient:
    """Add ``email`` as unverified and send it a verification email. ``Conflict`` if present.

    ``email`` must already be normalised.
    """
    token, digest = _new_token()
    now = now_ms()
    try:
        with write_transaction():
            recipient = AuthorizedRecipient.create(
                account=account.id,
                email=email,
                email_key=email.lower(),
                name=name,
                status=UNVERIFIED,
                created_at=now,
                token_hash=digest,
                token_expires_at=now + TOKEN_LIFETIME_MS,
            )
            _send_verification(account, recipient, token, config)
    except peewee.IntegrityError:
        raise Conflict(f"email: {email} is already an authorized recipient.") from None
    return recipient


def list_authorized_recipients(
    account: Account, *, limit: int = 50, cursor: str | None = None
) -> Page[AuthorizedRecipient]:
    """One page of the account's authorized recipients, newest first."""
    query = AuthorizedRecipient.select().where(AuthorizedRecipient.account == account.id)
    return keyset_page(query, AuthorizedRecipient.id, limit=limit, cursor=cursor)


def get_authorized_recipient(account: Account, recipient_id: str) -> AuthorizedRecipient:
    return _get(account, recipient_id)


def delete_authorized_recipient(account: Account, recipient_id: str) -> None:
    """Remove the recipient; the account may no longer send to it."""
    with write_transaction():
        _get(account, recipient_id).delete_instance()


def resend_verification(account: Account, recipient_id: str, config: Config) -> str:
    """Send a new verification email; the previous link stops working. Returns its
    transmission id. ``Conflict`` when the recipient has already given consent."""
    token, digest = _new_token()
    with write_transaction():
        recipient = _get(account, recipient_id)
        if recipient.status == VERIFIED:
            raise Conflict(f"{recipient.email} has already given consent.")
        recipient.token_hash = digest
        recipient.token_expires_at = now_ms() + TOKEN_LIFETIME_MS
        recipient.save()
        return _send_verification(account, recipient, token, config)


def find_consent_request(token: str) -> AuthorizedRecipient | None:
    """The unverified recipient a live consent token belongs to, or None."""
    if not token or len(token) > 128:
        return None
    recipient = (
        AuthorizedRecipient.select(AuthorizedRecipient, Account)
        .join(Account)
        .where(
            AuthorizedRecipient.token_hash == _token_hash(token),
            AuthorizedRecipient.status == UNVERIFIED,
            AuthorizedRecipient.token_expires_at > now_ms(),
        )
        .first()
    )
    return recipient


def give_consent(token: str) -> AuthorizedRecipient:
    """Mark the token's recipient verified and spend the token. ``NotFound`` if the token is
    unknown, used or expired."""
    with write_transaction():
        recipient = find_consent_request(token)
        if recipient is None:
            raise NotFound("This consent link is not valid any more.")
        recipient.status = VERIFIED
        recipient.verified_at = now_ms()
        recipient.token_hash = None
        recipient.token_expires_at = None
        recipient.save()
    return recipient


def verified_addresses(account: Account, addresses: Iterable[str]) -> set[str]:
    """The lower-cased addresses among ``addresses`` that ``account`` may send to: its verified
    authorized recipients, and the mailbox simulator's addresses (they reach no one, so need
    no consent)."""
    keys = {a.lower() for a in addresses}
    simulated = {key for key in keys if is_simulated(key)}
    keys -= simulated
    if not keys:
        return simulated
    query = AuthorizedRecipient.select(AuthorizedRecipient.email_key).where(
        AuthorizedRecipient.account == account.id,
        AuthorizedRecipient.status == VERIFIED,
        AuthorizedRecipient.email_key.in_(list(keys)),
    )
    return {row.email_key for row in query} | simulated


def sender_allowed(account: Account, sender: str, config: Config) -> bool:
    """Whether ``account`` may send from ``sender``: a sandbox account only from the sandbox
    sender, a live account from anywhere."""
    return not account.is_sandbox or sender.lower() == config.sandbox_sender.lower()


def check_sender(account: Account, sender: str, config: Config) -> None:
    """``SenderNotAllowed`` unless ``sender_allowed``."""
    if not sender_allowed(account, sender, config):
        raise SenderNotAllowed(sender, config.sandbox_sender)


def check_recipients(account: Account, recipients: dict[str, list[str]]) -> None:
    """``RecipientNotAuthorized`` listing every address, by field, that a sandbox account may
    not send to. ``recipients`` maps a kind (to, cc, bcc) to addresses."""
    if not account.is_sandbox:
        return
    allowed = verified_addresses(account, (a for addrs in recipients.values() for a in addrs))
    offending = {
        kind: [
            (i, address) for i, address in enumerate(addresses) if address.lower() not in allowed
        ]
        for kind, addresses in recipients.items()
    }
    offending = {kind: pairs for kind, pairs in offending.items() if pairs}
    if offending:
        raise RecipientNotAuthorized(offending)
