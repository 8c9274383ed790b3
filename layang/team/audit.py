"""The audit log (CONTRACT section 21): who changed what, when, and from where.

Every change made through the API, the console or the command line by a person or an API key is
recorded with :func:`record`, in the same transaction as the change where the caller has one.
Entries are kept 400 days (``KEEP_MS``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from layang.clock import now_ms
from layang.domain.errors import InvalidInput
from layang.models import Account, AuditEntry

KEEP_MS = 400 * 24 * 3600 * 1000
SYSTEM = "system"
CLI = "cli"


def user_actor(email: str) -> str:
    """The actor string of a person signed in as ``email``."""
    return f"user:{email.lower()}"


def key_actor(key_id: str) -> str:
    """The actor string of an API key, by its public id (never its secret)."""
    return f"key:{key_id}"


def address_hash(address: str) -> str:
    """SHA-256 (hex) of an address, lower-cased: how an erasure names the person it erased."""
    return hashlib.sha256(address.strip().lower().encode("utf-8")).hexdigest()


def record(
    account: Account | int | None,
    actor: str,
    action: str,
    target: str = "",
    *,
    source: str = CLI,
    detail: dict[str, Any] | None = None,
    at: int | None = None,
) -> AuditEntry:
    """Store one audit entry and return it.

    ``account`` is the account changed (``None`` for a change outside any account), ``actor`` one
    of :func:`user_actor`, :func:`key_actor` or ``SYSTEM``, ``action`` a dotted verb
    (``domain.created``), ``target`` what was changed (at most 512 characters, cut beyond),
    ``source`` the client's IP address or ``CLI``, ``detail`` a JSON-serialisable object.
    """
    return AuditEntry.create(
        account=account,
        at=now_ms() if at is None else at,
        actor=actor[:320],
        action=action[:64],
        target=target[:512],
        source=source[:64],
        detail=json.dumps(detail or {}, sort_keys=True, separators=(",", ":")),
    )


def expire(before_ms: int) -> int:
    """Delete entries recorded before ``before_ms`` (epoch ms); returns how many."""
    return AuditEntry.delete().where(AuditEntry.at < before_ms).execute()


@dataclass(frozen=True, slots=True)
class AuditPage:
    """Entries newest first, and the cursor of the next (older) page, None at the end."""

    items: list[AuditEntry]
    next_cursor: str | None


def browse(
    account: Account | int,
    *,
    since: int | None = None,
    actor: str | None = None,
    action: str | None = None,
    cursor: str | None = None,
    limit: int = 50,
) -> AuditPage:
    """The account's entries, newest first: recorded at or after ``since`` (epoch ms), by
    ``actor`` (exact), of ``action`` (exact, or every action under a prefix ending in ``.``),
    older than ``cursor``. Raises ``InvalidInput`` on field ``cursor`` for a cursor this did
    not give."""
    query = AuditEntry.select().where(AuditEntry.account == account)
    if since is not None:
        query = query.where(AuditEntry.at >= since)
    if actor:
        query = query.where(AuditEntry.actor == actor)
    if action:
        if action.endswith("."):
            query = query.where(AuditEntry.action.startswith(action))
        else:
            query = query.where(AuditEntry.action == action)
    if cursor:
        if not cursor.isdigit() or len(cursor) > 18:
            raise InvalidInput("cursor", "Not a cursor given by this list.")
        query = query.where(AuditEntry.id < int(cursor))
    rows = list(query.order_by(AuditEntry.id.desc()).limit(limit + 1))
    more = len(rows) > limit
    rows = rows[:limit]
    return AuditPage(rows, str(rows[-1].id) if more and rows else None)


def detail_of(entry: AuditEntry) -> dict[str, Any]:
    """An entry's ``detail`` as the object it was recorded as."""
    return json.loads(entry.detail or "{}")
