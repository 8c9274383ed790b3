"""The suppression list (docs/api.md, "Suppression list"): addresses an account never sends to, and
the one-click unsubscribe that adds one.

Bounces, complaints and unsubscribes add entries by themselves, through the events they record
(``layang.mail.events``); here an account reads its list, adds an address by hand and takes
one off. Addresses are compared lower-cased; an entry keeps the address as first listed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import peewee
from peewee import fn

from layang.clock import now_ms
from layang.db import is_postgresql, write_transaction
from layang.domain.errors import Conflict, InvalidInput, NotFound
from layang.mail.events import append_events
from layang.mail.idn import InvalidDomain, to_ascii
from layang.mail.message import InvalidAddress, normalize_address
from layang.mail.unsubscribe import InvalidToken, UnsubscribeTokens
from layang.models import (
    MANUAL,
    UNSUBSCRIBE,
    Account,
    Event,
    Recipient,
    Suppression,
    Transmission,
)
from layang.pagination import Page, keyset_page

MAX_NOTE = 1000


def email_key(email: str) -> str:
    """``email`` normalised and lower-cased, as the list compares addresses. Raises
    ``InvalidInput`` (field ``email``) when it is not an address."""
    try:
        return normalize_address(email).lower()
    except InvalidAddress as error:
        raise InvalidInput("email", str(error)) from None


def _contains(text: str) -> peewee.Expression:
    # A position search, not LIKE: the text's own % and _ mean themselves.
    position = fn.STRPOS if is_postgresql() else fn.INSTR
    return position(Suppression.email_key, _searched_form(text.strip()).lower()) > 0


def _searched_form(text: str) -> str:
    """Search text as the list stores addresses: a non-ASCII domain (``faß.de``, or the part
    after ``@``) as its A-labels, so that a search in the form people read finds it."""
    local, at, domain = text.rpartition("@")
    if domain.isascii():
        return text
    try:
        return f"{local}{at}{to_ascii(domain)}"
    except InvalidDomain:
        return text


def list_suppressions(
    account: Account,
    *,
    reason: str | None = None,
    email: str | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> Page[Suppression]:
    """One page of the account's list, newest first: only entries for ``reason``, and whose
    address contains ``email`` (any case), when given."""
    query = Suppression.select().where(Suppression.account == account.id)
    if reason:
        query = query.where(Suppression.reason == reason)
    if email:
        query = query.where(_contains(email))
    return keyset_page(query, Suppression.id, limit=limit, cursor=cursor)


def _get(account: Account, key: str) -> Suppression | None:
    return Suppression.get_or_none(
        (Suppression.account == account.id) & (Suppression.email_key == key)
    )


def get_suppression(account: Account, email: str) -> Suppression:
    """The account's entry for ``email``. ``NotFound`` when it is not listed, ``InvalidInput``
    when it is not an address."""
    entry = _get(account, email_key(email))
    if entry is None:
        raise NotFound(f"{email} is not on the suppression list.")
    return entry


def put_suppression(
    account: Account, email: str, *, reason: str = MANUAL, note: str | None = None
) -> Suppression:
    """List ``email`` for ``reason`` with ``note``, replacing an entry already there (which
    keeps its creation time). ``InvalidInput`` when ``email`` is not an address."""
    key = email_key(email)
    for _ in range(2):
        try:
            with write_transaction():
                entry = _get(account, key)
                new = entry is None
                if new:
                    address = normalize_address(email)
                    entry = Suppression(account=account.id, email=address, email_key=key)
                entry.reason = reason
                entry.note = note or ""
                entry.transmission_id = None
                entry.detail = ""
                entry.save(force_insert=new)
            return entry
        except peewee.IntegrityError:
            continue  # listed meanwhile by a bounce or another request: replace that entry
    raise Conflict(f"{email} is being changed by another request; try again.")


def delete_suppression(account: Account, email: str) -> None:
    """Take ``email`` off the list: mail to it is sent again. ``NotFound`` when it is not
    listed, ``InvalidInput`` when it is not an address."""
    key = email_key(email)
    with write_transaction():
        deleted = (
            Suppression.delete()
            .where((Suppression.account == account.id) & (Suppression.email_key == key))
            .execute()
        )
    if not deleted:
        raise NotFound(f"{email} is not on the suppression list.")


@dataclass(frozen=True, slots=True)
class UnsubscribeRequest:
    """What an unsubscribe link names: whose mail, from whom, and whether it is done."""

    recipient_id: str
    email: str
    sender: str
    account_name: str
    unsubscribed: bool


def find_unsubscribe(tokens: UnsubscribeTokens, token: str) -> UnsubscribeRequest:
    """What ``token`` would unsubscribe; changes nothing. ``NotFound`` for a token this service
    did not sign or whose email no longer exists."""
    try:
        recipient_id = tokens.read(token)
    except InvalidToken:
        raise NotFound("This unsubscribe link is not valid.") from None
    row = (
        Recipient.select(Recipient.id, Recipient.address, Transmission.from_header, Account)
        .join_from(Recipient, Transmission)
        .join_from(Recipient, Account)
        .where(Recipient.id == recipient_id)
        .first()
    )
    if row is None:
        raise NotFound("This unsubscribe link is not valid.")
    sender = json.loads(row.transmission.from_header).get("email", "")
    listed = _get(row.account, row.address.lower())
    return UnsubscribeRequest(
        recipient_id=row.id,
        email=row.address,
        sender=sender,
        account_name=row.account.name,
        unsubscribed=listed is not None,
    )


def unsubscribe(tokens: UnsubscribeTokens, token: str) -> UnsubscribeRequest:
    """Record ``Unsubscribe`` on the token's email, which puts the address on its account's
    list (reason ``unsubscribe``). A repeat changes nothing once the address is listed.
    ``NotFound`` as ``find_unsubscribe``."""
    request = find_unsubscribe(tokens, token)
    now = now_ms()
    with write_transaction():
        done = (
            Event.select(Event.id)
            .where((Event.recipient == request.recipient_id) & (Event.status == UNSUBSCRIBE))
            .exists()
        )
        if not (done and request.unsubscribed):
            append_events([(request.recipient_id, UNSUBSCRIBE, now, json.dumps({}))])
            Recipient.update(updated_at=now).where(Recipient.id == request.recipient_id).execute()
    return UnsubscribeRequest(
        request.recipient_id, request.email, request.sender, request.account_name, True
    )
