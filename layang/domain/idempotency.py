"""Idempotency keys (docs/api.md, "Idempotency, rate limits, key scopes"): a request repeated with
the same key is answered, not redone.

How a keyed request goes, on every way in:

1. ``begin`` claims the key: a row in ``idempotency_key`` (unique per account and key), in its
   own short transaction that need not reach the disk. A key already answered gives the
   recorded answer (``Replay``); one claimed by a request still running is refused
   (``IdempotencyInFlight``); either with a different fingerprint is ``IdempotencyKeyReused``.
2. The work and its answer commit together: for a send, ``Claim.answer_rows`` joins the
   transmission's own insert (the group commit on SQLite, one round trip on PostgreSQL); any
   other request records its answer in the transaction that wraps its work (``layang.api``).
3. A request that fails ``release``s the claim, so that a retry is processed afresh.

The answer table's unique (account, key) is what makes a second send impossible, whatever
happens to claims: should two requests ever hold the same key (a claim taken over from a
holder thought dead, or a commit whose acknowledgement was lost), the second commit fails on it
and sends nothing. A process that dies between claim and commit leaves a claim with no answer;
after ``CLAIM_TIMEOUT_MS`` (longer than a request may run) a repeat takes it over.

Keys and answers expire after ``KEY_LIFETIME_MS``; the worker deletes them
(``layang.lifecycle.housekeeping``). An answer recorded by ``record`` (any request but a send) may
carry a secret (a webhook's signing secret), so it is stored sealed (``layang.sealing``), bound
to its account and key, and opened again to be replayed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
from dataclasses import dataclass
from typing import Any

from layang.clock import now_ms
from layang.db import InsertBatch, insert_rows, write_relaxed, write_transaction
from layang.domain.errors import IdempotencyInFlight, IdempotencyKeyReused, InvalidInput
from layang.models import Account, IdempotencyAnswer, IdempotencyKey
from layang.sealing import seal, unseal

KEY_LIFETIME_MS = 24 * 3600 * 1000
# gunicorn kills a request after 60 s (``layang.serving.processes``); a claim older than that has no
# live holder on a well-configured host.
CLAIM_TIMEOUT_MS = 120 * 1000
_KEY_SHAPE = re.compile(r"^[\x20-\x7e]{1,255}$")

_CLAIM_SQL = (
    'INSERT INTO "idempotency_key" '
    '("account_id", "key", "fingerprint", "token", "claimed_at", "expires_at") '
    "VALUES (?, ?, ?, ?, ?, ?) "
    'ON CONFLICT ("account_id", "key") DO NOTHING'
)
_ANSWER_FIELDS = ("account", "key", "fingerprint", "status", "body", "expires_at")
# How a sealed answer's body starts (a JSON body never does).
_SEALED = "sealed:"


def check_key(key: str) -> str:
    """``key`` if it is 1 to 255 printable ASCII characters; else ``InvalidInput``."""
    if not _KEY_SHAPE.match(key):
        raise InvalidInput("Idempotency-Key", "Use 1 to 255 printable ASCII characters.")
    return key


def fingerprint(*parts: bytes | bytearray | str) -> str:
    """What identifies a request's content (method, path and body; or an SMTP envelope and
    message): a repeat must match it exactly."""
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()


@dataclass(frozen=True, slots=True)
class Replay:
    """The answer recorded for the first request with a key: HTTP status and JSON body."""

    status: int
    body: str

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True, slots=True)
class Claim:
    """A key held by the request being processed; ``token`` tells this claim from a later one."""

    account_id: int
    key: str
    fingerprint: str
    token: str
    expires_at: int

    def answer_rows(self, status: int, body: str) -> list[InsertBatch]:
        """The insert recording ``body`` (JSON text) as the answer: give it to the transaction
        that does the work."""
        row = (self.account_id, self.key, self.fingerprint, status, body, self.expires_at)
        return [(IdempotencyAnswer, _ANSWER_FIELDS, [row])]


def begin(
    account: Account, key: str, request_fingerprint: str, secret_key: str = ""
) -> Claim | Replay:
    """Claim ``key`` for a request with ``request_fingerprint``, or return the answer already
    recorded for it (opened with ``secret_key`` when ``record`` sealed it).

    Raises ``IdempotencyInFlight`` while another request holds the key, and
    ``IdempotencyKeyReused`` when the key was used with a different fingerprint.
    """
    now = now_ms()
    token = secrets.token_hex(16)
    claim = Claim(account.id, key, request_fingerprint, token, now + KEY_LIFETIME_MS)
    # Most keys are new: claimed in one statement, without a transaction around it.
    if _insert_claim(claim, now):
        return claim
    with write_transaction(durable=False):
        answer = _answer(account.id, key)
        if answer is not None and answer.expires_at > now:
            if answer.fingerprint != request_fingerprint:
                raise IdempotencyKeyReused()
            return Replay(answer.status, _opened(answer, secret_key))
        held = IdempotencyKey.get_or_none(
            (IdempotencyKey.account == account.id) & (IdempotencyKey.key == key)
        )
        expired = held is None or held.expires_at <= now
        if not expired:
            if held.fingerprint != request_fingerprint:
                raise IdempotencyKeyReused()
            if held.claimed_at > now - CLAIM_TIMEOUT_MS:
                raise IdempotencyInFlight()
        # An expired key starts over; a claim whose holder is gone is taken over.
        IdempotencyAnswer.delete().where(
            (IdempotencyAnswer.account == account.id) & (IdempotencyAnswer.key == key)
        ).execute()
        IdempotencyKey.delete().where(
            (IdempotencyKey.account == account.id) & (IdempotencyKey.key == key)
        ).execute()
        if not _insert_claim(claim, now):
            raise IdempotencyInFlight()
        return claim


def _insert_claim(claim: Claim, now: int) -> bool:
    # ON CONFLICT DO NOTHING: a concurrent claimer waits for the first one's commit (PostgreSQL)
    # or its write lock (SQLite) and then finds the row, instead of failing the transaction.
    _, inserted = write_relaxed(
        _CLAIM_SQL,
        (claim.account_id, claim.key, claim.fingerprint, claim.token, now, claim.expires_at),
    )
    return inserted == 1


def _answer(account_id: int, key: str) -> IdempotencyAnswer | None:
    return IdempotencyAnswer.get_or_none(
        (IdempotencyAnswer.account == account_id) & (IdempotencyAnswer.key == key)
    )


def record(claim: Claim, status: int, body: str, secret_key: str) -> None:
    """Insert ``claim``'s answer inside the caller's open transaction, sealed with
    ``secret_key``."""
    sealed = seal(body.encode(), secret_key, _answer_context(claim.account_id, claim.key))
    stored = _SEALED + base64.b64encode(sealed).decode()
    for model, fields, rows in claim.answer_rows(status, stored):
        insert_rows(model, fields, rows)


def _answer_context(account_id: int, key: str) -> str:
    return f"idempotency:{account_id}:{key}"


def _opened(answer: IdempotencyAnswer, secret_key: str) -> str:
    """A recorded answer's body as first given. Raises ``KeyUnavailable`` when a sealed one
    does not open."""
    if not answer.body.startswith(_SEALED):
        return answer.body
    sealed = base64.b64decode(answer.body.removeprefix(_SEALED))
    account_id = answer.account_id
    return unseal(sealed, secret_key, _answer_context(account_id, answer.key)).decode()


def release(claim: Claim) -> None:
    """Give up ``claim`` after a failed request, so that a retry is processed afresh. A claim
    already taken over by another request is left alone."""
    with write_transaction(durable=False):
        IdempotencyKey.delete().where(
            (IdempotencyKey.account == claim.account_id)
            & (IdempotencyKey.key == claim.key)
            & (IdempotencyKey.token == claim.token)
        ).execute()
