"""The audit log (CONTRACT section 21): who changed what, when, and from where.

Every change made through the API, the console or the command line by a person or an API key is
recorded with :func:`record`, in the same transaction as the change where the caller has one.
Entries are kept 400 days (``KEEP_MS``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from layang.clock import now_ms
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
