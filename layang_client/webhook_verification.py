"""Receiving webhooks: a request checked against the endpoint's secret (Standard Webhooks)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json as jsonlib
import time
from collections.abc import Mapping
from typing import Any

from layang_client.errors import LayangError

WEBHOOK_TOLERANCE_SECONDS = 5 * 60


def verify_webhook(
    payload: bytes | str,
    headers: Mapping[str, str],
    secret: str,
    *,
    now: float | None = None,
) -> dict[str, Any]:
    """Check a webhook request (Standard Webhooks) and return its parsed body.

    ``payload`` is the raw request body, exactly as received; ``headers`` its headers (any
    case); ``secret`` the endpoint's ``whsec_…`` secret (``ValueError`` when it is empty,
    ``None``, not a ``str``, or not one). Raises :class:`LayangError`
    (``error="invalid_signature"``) when a header is missing, the timestamp is more than five
    minutes from ``now`` (default: the clock) or no signature matches.
    """
    if not isinstance(secret, str):
        # None from an unset environment variable, or bytes: never a key to trust.
        raise ValueError("secret is missing: pass the endpoint's whsec_… secret as a str")
    try:
        key = base64.b64decode(secret.removeprefix("whsec_"), validate=True)
    except ValueError:
        raise ValueError("secret must be the endpoint's whsec_… secret") from None
    if not key:
        # An empty key signs what anyone can sign: refuse it rather than accept forgeries.
        raise ValueError("secret is empty: pass the endpoint's whsec_… secret")
    body = payload.encode() if isinstance(payload, str) else bytes(payload)
    lowered = {name.lower(): value for name, value in headers.items()}
    webhook_id = lowered.get("webhook-id")
    timestamp = lowered.get("webhook-timestamp")
    signatures = lowered.get("webhook-signature")
    if not (webhook_id and timestamp and signatures):
        raise _invalid("missing webhook-id, webhook-timestamp or webhook-signature header")
    try:
        sent_at = int(timestamp)
    except ValueError:
        raise _invalid("webhook-timestamp is not a number") from None
    if abs((time.time() if now is None else now) - sent_at) > WEBHOOK_TOLERANCE_SECONDS:
        raise _invalid("webhook-timestamp is more than 5 minutes away: stale or replayed")
    signed = f"{webhook_id}.{sent_at}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    for candidate in signatures.split(" "):
        version, _, value = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(value.encode(), expected.encode()):
            try:
                return jsonlib.loads(body)
            except ValueError:
                raise _invalid("the body is not JSON") from None
    raise _invalid("no signature matches the secret")


def _invalid(message: str) -> LayangError:
    return LayangError(message, error="invalid_signature")
