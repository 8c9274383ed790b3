"""Webhook endpoints of an account: where its events are pushed, and what happened to them.

An endpoint subscribes to event types (or ``*``); its secret is shown once, when made or
rotated, and stored sealed with a key derived from ``LAYANG_SECRET_KEY`` (as DKIM keys are),
because the service must sign with it. After a rotation the old secret signs too for a day.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from layang import sealing
from layang.clock import now_ms
from layang.config import Config
from layang.db import write_transaction
from layang.domain.errors import InvalidInput, NotFound
from layang.ids import new_id
from layang.models import (
    WEBHOOK_EVENT_TYPES,
    Account,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookEvent,
)
from layang.pagination import Page, keyset_page
from layang.webhooks.wire import new_secret, secret_context, url_problem

ALL_EVENTS = "*"
# The type of the event ``send_test`` queues.
TEST_EVENT = "Test"
ROTATION_GRACE_MS = 24 * 3600 * 1000
# The endpoints listed here; inbound routes post through endpoints of their own kind.
EVENTS_KIND = "events"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """An endpoint as shown: never its secret, except ``secret`` right after it was made."""

    id: str
    url: str
    description: str
    events: tuple[str, ...]
    enabled: bool
    disabled_at: int | None
    disabled_reason: str | None
    created_at: int
    updated_at: int
    secret: str | None = None


@dataclass(frozen=True, slots=True)
class Attempt:
    """One POST of a delivery: ``delivered``, ``pending`` (failed, retried at
    ``next_attempt_at``) or ``failed`` (the last retry failed)."""

    id: str
    event_ids: tuple[str, ...]
    status: str
    response_status: int | None
    error: str | None
    attempted_at: int
    next_attempt_at: int | None


def _shown(row: WebhookEndpoint, secret: str | None = None) -> Endpoint:
    events = (ALL_EVENTS,) if row.events == ALL_EVENTS else tuple(row.events.strip(",").split(","))
    return Endpoint(
        id=row.id,
        url=row.url,
        description=row.description,
        events=events,
        enabled=row.disabled_at is None,
        disabled_at=row.disabled_at,
        disabled_reason=row.disabled_reason,
        created_at=row.created_at,
        updated_at=row.updated_at,
        secret=secret,
    )


def _stored_events(events: Sequence[str]) -> str:
    """``events`` as stored: ``*``, or the types between commas. Raises ``InvalidInput``."""
    if not events:
        raise InvalidInput("events", "Name at least one event type, or '*'.")
    for position, kind in enumerate(events):
        if kind != ALL_EVENTS and kind not in WEBHOOK_EVENT_TYPES:
            raise InvalidInput(
                f"events.{position}",
                f"Unknown event type {kind!r}; use '*' or {', '.join(WEBHOOK_EVENT_TYPES)}.",
            )
    if ALL_EVENTS in events:
        return ALL_EVENTS
    return "," + ",".join(dict.fromkeys(events)) + ","


def _checked_url(url: str, config: Config) -> str:
    url = url.strip()
    problem = url_problem(url, config.webhook_allow_private)
    if problem:
        raise InvalidInput("url", problem)
    return url


def _get(account: Account, endpoint_id: str) -> WebhookEndpoint:
    row = WebhookEndpoint.get_or_none(
        (WebhookEndpoint.id == endpoint_id)
        & (WebhookEndpoint.account == account.id)
        & (WebhookEndpoint.kind == EVENTS_KIND)
    )
    if row is None:
        raise NotFound(f"No webhook endpoint {endpoint_id!r}.")
    return row


def sealed_secret(secret: str, endpoint_id: str, config: Config) -> bytes:
    return sealing.seal(secret.encode(), config.secret_key, secret_context(endpoint_id))


def create_endpoint(
    account: Account, url: str, events: Sequence[str], description: str, config: Config
) -> Endpoint:
    """A new enabled endpoint, with its secret (shown this once). Raises ``InvalidInput`` for
    a URL that is not https (unless private addresses are allowed) or names a refused address
    literally, and for an unknown event type."""
    url = _checked_url(url, config)
    stored = _stored_events(events)
    endpoint_id = new_id()
    secret = new_secret()
    now = now_ms()
    row = WebhookEndpoint.create(
        id=endpoint_id,
        account=account.id,
        url=url,
        description=description,
        events=stored,
        secret=sealed_secret(secret, endpoint_id, config),
        created_at=now,
        updated_at=now,
    )
    return _shown(row, secret)


def list_endpoints(
    account: Account, *, limit: int = 50, cursor: str | None = None
) -> Page[Endpoint]:
    """One page of the account's endpoints, newest first."""
    query = WebhookEndpoint.select().where(
        (WebhookEndpoint.account == account.id) & (WebhookEndpoint.kind == EVENTS_KIND)
    )
    return keyset_page(query, WebhookEndpoint.id, limit=limit, cursor=cursor).map(_shown)


def get_endpoint(account: Account, endpoint_id: str) -> Endpoint:
    """The endpoint (without its secret). ``NotFound`` unless ``account`` has it."""
    return _shown(_get(account, endpoint_id))


def update_endpoint(
    account: Account,
    endpoint_id: str,
    config: Config,
    *,
    url: str | None = None,
    events: Sequence[str] | None = None,
    enabled: bool | None = None,
    description: str | None = None,
) -> Endpoint:
    """Change what is given. Enabling clears the reason it was disabled and its failing
    streak. Raises ``NotFound`` and ``InvalidInput`` (as ``create_endpoint``)."""
    changes: dict[str, object] = {}
    if url is not None:
        changes["url"] = _checked_url(url, config)
    if events is not None:
        changes["events"] = _stored_events(events)
    if description is not None:
        changes["description"] = description
    with write_transaction():
        row = _get(account, endpoint_id)
        now = now_ms()
        if enabled is True and row.disabled_at is not None:
            changes.update(disabled_at=None, disabled_reason=None, failing_since=None)
        elif enabled is False and row.disabled_at is None:
            changes.update(disabled_at=now, disabled_reason="Disabled through the API.")
        if changes:
            changes["updated_at"] = now
            WebhookEndpoint.update(changes).where(WebhookEndpoint.id == row.id).execute()
    return get_endpoint(account, endpoint_id)


def set_enabled(account: Account, endpoint_id: str, enabled: bool, reason: str) -> Endpoint:
    """Enable or disable the endpoint, saying why (the console's switch)."""
    with write_transaction():
        row = _get(account, endpoint_id)
        if enabled:
            changes = {"disabled_at": None, "disabled_reason": None, "failing_since": None}
        elif row.disabled_at is None:
            changes = {"disabled_at": now_ms(), "disabled_reason": reason}
        else:
            changes = {}
        if changes:
            WebhookEndpoint.update(changes, updated_at=now_ms()).where(
                WebhookEndpoint.id == row.id
            ).execute()
    return get_endpoint(account, endpoint_id)


def delete_endpoint(account: Account, endpoint_id: str) -> None:
    """Delete the endpoint with its waiting events and its deliveries. ``NotFound``."""
    with write_transaction():
        row = _get(account, endpoint_id)
        WebhookAttempt.delete().where(WebhookAttempt.endpoint == row.id).execute()
        WebhookEvent.delete().where(WebhookEvent.endpoint == row.id).execute()
        WebhookDelivery.delete().where(WebhookDelivery.endpoint == row.id).execute()
        row.delete_instance()


def rotate_secret(account: Account, endpoint_id: str, config: Config) -> Endpoint:
    """A new secret (returned this once); the one it replaces keeps signing for 24 hours,
    beside it. ``NotFound``."""
    with write_transaction():
        secret = replace_secret(_get(account, endpoint_id), config)
    return _shown(_get(account, endpoint_id), secret)


def replace_secret(row: WebhookEndpoint, config: Config) -> str:
    """Give the endpoint ``row`` (of any kind: an inbound route's too) a new secret, stored
    sealed, and return it; the one it replaces keeps signing for ``ROTATION_GRACE_MS``. Call it
    inside a write transaction."""
    secret = new_secret()
    now = now_ms()
    WebhookEndpoint.update(
        secret=sealed_secret(secret, row.id, config),
        previous_secret=row.secret,
        previous_secret_expires_at=now + ROTATION_GRACE_MS,
        updated_at=now,
    ).where(WebhookEndpoint.id == row.id).execute()
    return secret


def send_test(account: Account, endpoint_id: str) -> str:
    """Queue a ``Test`` event to this endpoint only; returns its event id. ``NotFound``."""
    row = _get(account, endpoint_id)
    event_id = new_id()
    WebhookEvent.create(
        event_id=event_id,
        endpoint=row.id,
        recipient_id=None,
        status=TEST_EVENT,
        created_at=now_ms(),
        detail=json.dumps({"test": True, "message": "A test event sent from Layang."}),
    )
    return event_id


def list_attempts(
    account: Account, endpoint_id: str, *, limit: int = 50, cursor: str | None = None
) -> Page[Attempt]:
    """One page of the endpoint's delivery attempts, newest first. ``NotFound``."""
    row = _get(account, endpoint_id)
    query = (
        WebhookAttempt.select(WebhookAttempt, WebhookDelivery.event_ids)
        .join(WebhookDelivery)
        .where(WebhookAttempt.endpoint == row.id)
    )
    page = keyset_page(query, WebhookAttempt.id, limit=limit, cursor=cursor)
    return page.map(
        lambda attempt: Attempt(
            id=attempt.id,
            event_ids=tuple(json.loads(attempt.delivery.event_ids)),
            status=attempt.status,
            response_status=attempt.response_status,
            error=attempt.error,
            attempted_at=attempt.attempted_at,
            next_attempt_at=attempt.next_attempt_at,
        )
    )
