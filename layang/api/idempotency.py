"""``Idempotency-Key`` on every POST under /v1 (docs/api.md, "Idempotency, rate limits, key
scopes"); the rules are in ``layang.domain.idempotency``.

Before the view, the key is claimed or its recorded answer replayed. A send records its answer
in the transaction that stores the message (``accept_transmission``); any other view runs
inside a write transaction that also records its answer (``answered_with_work``). After the
view, a claim whose request failed is released, so that a retry is processed afresh.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import flask
from flask import current_app, g, request

from layang.api.body import body_bytes
from layang.db import write_transaction
from layang.domain import idempotency
from layang.domain.idempotency import Claim, Replay

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
# Views that record their answer in their own work's transaction: they get the claim.
ANSWERED_BY_VIEW = frozenset({"transmissions.Transmissions", "transmissions.TransmissionBatch"})


def claim_or_replay() -> flask.Response | None:
    """Before a keyed POST under /v1: claim its key (kept in ``g.idempotency_claim``) or answer
    with the first request's answer. Raises the domain's idempotency errors."""
    key = request.headers.get(HEADER)
    if key is None or request.method != "POST" or g.get("account") is None:
        return None
    if request.url_rule is None or request.routing_exception is not None:
        return None
    idempotency.check_key(key)
    path = request.path + (f"?{request.query_string.decode()}" if request.query_string else "")
    fingerprint = idempotency.fingerprint(request.method, path, body_bytes(request))
    secret_key = current_app.config["LAYANG"].secret_key
    outcome = idempotency.begin(g.account, key, fingerprint, secret_key)
    if isinstance(outcome, Replay):
        response = current_app.response_class(
            outcome.body, status=outcome.status, mimetype="application/json"
        )
        response.headers[REPLAYED_HEADER] = "true"
        return response
    g.idempotency_claim = outcome
    return None


def current_claim() -> Claim | None:
    """The key this request holds, for a view in ``ANSWERED_BY_VIEW`` to record its answer."""
    return g.get("idempotency_claim")


def release_unanswered(response: flask.Response) -> flask.Response:
    """After a keyed request: a failed one gives its key back."""
    claim = g.pop("idempotency_claim", None)
    if claim is not None and not 200 <= response.status_code < 300:
        idempotency.release(claim)
    return response


def answered_with_work(view: Callable[..., Any]) -> Callable[..., Any]:
    """Run a keyed request's view in one write transaction with the recording of its answer,
    so that its work and its answer commit together or not at all."""

    @functools.wraps(view)
    def run(*args: Any, **kwargs: Any) -> Any:
        claim = current_claim()
        if claim is None or request.endpoint in ANSWERED_BY_VIEW:
            return view(*args, **kwargs)
        with write_transaction():
            response = current_app.make_response(view(*args, **kwargs))
            if 200 <= response.status_code < 300:
                idempotency.record(
                    claim,
                    response.status_code,
                    response.get_data(as_text=True),
                    current_app.config["LAYANG"].secret_key,
                )
        return response

    return run


def wrap_views(app: flask.Flask, endpoints: list[str]) -> None:
    """Make ``endpoints`` (the API's) record their answers with their work."""
    for endpoint in endpoints:
        app.view_functions[endpoint] = answered_with_work(app.view_functions[endpoint])
