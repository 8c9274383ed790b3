"""Accounts and their API keys."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

import peewee

from layang.clock import now_ms
from layang.db import database, write_transaction
from layang.domain.errors import Conflict, InvalidInput, NotFound
from layang.models import FULL, LIVE, SANDBOX, SCOPES, Account, ApiKey

KEY_PREFIX = "lyg_"
_AUTH_SQL = (
    'SELECT k."secret_hash", a."id", a."name", a."mode", a."created_at", k."id", k."scope" '
    'FROM "api_key" AS k JOIN "account" AS a ON a."id" = k."account_id" '
    'WHERE k."secret_hash" = ? AND k."revoked_at" IS NULL'
)
ACCOUNT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_KEY_SHAPE = re.compile(r"^lyg_[A-Za-z0-9_-]{43}$")


def hash_key(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def create_account(name: str, *, live: bool = False) -> Account:
    """Create an account (sandbox unless ``live``). Raises ``InvalidInput`` for a bad name
    and ``Conflict`` when the name is taken."""
    if not ACCOUNT_NAME.match(name):
        raise InvalidInput(
            "name", "Use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit."
        )
    try:
        with write_transaction():
            return Account.create(name=name, mode=LIVE if live else SANDBOX)
    except peewee.IntegrityError:
        raise Conflict(f"An account named {name!r} already exists.") from None


def get_account(name: str) -> Account:
    account = Account.get_or_none(Account.name == name)
    if account is None:
        raise NotFound(f"No account named {name!r}.")
    return account


def create_api_key(account: Account, label: str = "", scope: str = FULL) -> tuple[ApiKey, str]:
    """Issue a key for ``account`` with ``scope`` (full, send or read); returns the stored
    record and the secret, which exists nowhere else from here on. Raises ``InvalidInput``
    for an unknown scope."""
    if scope not in SCOPES:
        raise InvalidInput("scope", f"Use one of {', '.join(SCOPES)}.")
    secret = KEY_PREFIX + secrets.token_urlsafe(32)  # 256 random bits
    key = ApiKey.create(
        id="key_" + secrets.token_hex(8),
        account=account,
        label=label,
        prefix=secret[:8],
        secret_hash=hash_key(secret),
        scope=scope,
    )
    return key, secret


def list_api_keys(account: Account) -> list[ApiKey]:
    return list(ApiKey.select().where(ApiKey.account == account).order_by(ApiKey.created_at))


def revoke_api_key(key_id: str) -> ApiKey:
    """Revoke a key at once. Raises ``NotFound`` for an unknown key id."""
    with write_transaction():
        key = ApiKey.get_or_none(ApiKey.id == key_id)
        if key is None:
            raise NotFound(f"No API key with id {key_id!r}.")
        if key.revoked_at is None:
            key.revoked_at = now_ms()
            key.save()
    return key


@dataclass(frozen=True, slots=True)
class Credential:
    """A live API key as a request presents it: its account, its id and what it may do."""

    account: Account
    key_id: str
    scope: str

    def allows(self, needed: str) -> bool:
        """Whether this key may do what needs scope ``needed`` (a full key may do anything)."""
        return self.scope in (FULL, needed)


def authenticate_key(secret: str) -> Credential | None:
    """The live key ``secret`` with its account and scope, or None."""
    if not _KEY_SHAPE.match(secret):
        return None
    digest = hash_key(secret)
    # Every API call runs this: a fixed statement, because building it with peewee's query
    # builder cost more than the indexed lookup itself.
    cursor = database.execute_sql(_AUTH_SQL.replace("?", database.obj.param), (digest,))
    # fetchall, not fetchone: a statement left unfinished keeps SQLite's read snapshot open,
    # which stops WAL checkpoints and slowed every later write.
    rows = cursor.fetchall()
    cursor.close()
    row = rows[0] if rows else None
    # The index lookup already matched; the constant-time compare keeps the check honest
    # should the lookup ever become a prefix or range scan.
    if row is None or not hmac.compare_digest(row[0], digest):
        return None
    account = Account(id=row[1], name=row[2], mode=row[3], created_at=row[4])
    return Credential(account, key_id=row[5], scope=row[6])
