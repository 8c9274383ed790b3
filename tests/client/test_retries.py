"""The retry policy, against a scripted stub: the live service does not answer 429 or 503 on
demand. Reads and sends retry 429, 5xx and failed exchanges; a send repeats one
Idempotency-Key on every attempt, so the service accepts it once."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from layang.client import (
    USER_AGENT,
    ConflictError,
    Layang,
    LayangConnectionError,
    LayangTimeoutError,
    RateLimitError,
    ServerError,
    parse_retry_after,
)
from tests.client.conftest import Reply

OK = Reply(200, {"transmissionId": "tx-1"})
SEND = {
    "from_": "Shop <shop@shop.example>",
    "to": "ana@rcpt.example",
    "subject": "Hi",
    "body_text": "x",
}


@pytest.fixture
def stub_sdk(stub):
    with Layang("lyg_stub", base_url=stub.url, retry_backoff=0.01, timeout=5) as sdk:
        yield sdk


def test_get_waits_out_retry_after(stub, stub_sdk):
    limited = Reply(
        429, {"error": "rate_limited", "message": "Slow down.", "status": 429}, {"Retry-After": "1"}
    )
    stub.answer(limited, limited, Reply(200, {"transmissionId": "tx-1"}))
    assert stub_sdk.transmissions.get("tx-1") == {"transmissionId": "tx-1"}

    assert [(r.method, r.path) for r in stub.requests] == [
        ("GET", "/v1/layang/transmissions/tx-1")
    ] * 3
    gaps = [b.at - a.at for a, b in zip(stub.requests, stub.requests[1:], strict=False)]
    assert all(gap >= 0.95 for gap in gaps), gaps
    first = stub.requests[0].headers
    assert first["authorization"] == "Bearer lyg_stub"
    assert first["user-agent"] == USER_AGENT and USER_AGENT.startswith("layang-python/0.1.0 httpx/")


def keys(stub):
    return [r.headers.get("idempotency-key") for r in stub.requests]


def test_send_is_retried_on_429_with_the_same_body(stub, stub_sdk):
    stub.answer(
        Reply(429, {"error": "rate_limited", "message": "m", "status": 429}, {"Retry-After": "0"}),
        OK,
    )
    assert stub_sdk.send(**SEND) == "tx-1"
    assert [r.method for r in stub.requests] == ["POST", "POST"]
    assert stub.requests[0].body == stub.requests[1].body
    first, second = keys(stub)
    assert first and first == second
    assert json.loads(stub.requests[0].body) == {
        "from": {"email": "shop@shop.example", "name": "Shop"},
        "to": [{"email": "ana@rcpt.example"}],
        "subject": "Hi",
        "bodyText": "x",
    }


def test_send_is_retried_after_a_5xx_with_the_same_key(stub, stub_sdk):
    unavailable = Reply(
        503,
        {"error": "service_unavailable", "message": "Later.", "status": 503},
        {"Retry-After": "0"},
    )
    stub.answer(unavailable, OK)
    assert stub_sdk.send(**SEND) == "tx-1"
    first, second = keys(stub)
    assert first and first == second


def test_a_send_in_flight_is_retried_and_the_key_given_is_used(stub, stub_sdk):
    in_flight = Reply(409, {"error": "idempotency_in_flight", "message": "m", "status": 409})
    stub.answer(in_flight, OK)
    assert stub_sdk.send(**SEND, idempotency_key="order-42") == "tx-1"
    assert keys(stub) == ["order-42", "order-42"]

    stub.requests.clear()
    stub.answer(OK, OK)
    stub_sdk.send(**SEND)
    stub_sdk.send(**SEND)
    assert len(set(keys(stub))) == 2, "each call has a key of its own"


def test_a_plain_conflict_is_not_retried(stub, stub_sdk):
    stub.answer(Reply(409, {"error": "conflict", "message": "m", "status": 409}), OK)
    with pytest.raises(ConflictError):
        stub_sdk.send(**SEND)
    assert len(stub.requests) == 1
    stub.script.clear()


def test_get_is_retried_after_a_5xx(stub, stub_sdk):
    unavailable = Reply(
        503,
        {"error": "service_unavailable", "message": "Later.", "status": 503},
        {"Retry-After": "0"},
    )
    stub.answer(
        unavailable,
        Reply(500, {"error": "internal_error", "message": "Oops.", "status": 500}),
        Reply(200, {"items": [], "nextCursor": None}),
    )
    assert list(stub_sdk.activity.list()) == []
    assert len(stub.requests) == 3


def test_retries_are_bounded(stub):
    failing = Reply(502, raw=b"<html><body><h1>502 Bad Gateway</h1></body></html>")
    stub.answer(*[failing] * 5)
    with (
        Layang("k", base_url=stub.url, max_retries=2, retry_backoff=0.01) as sdk,
        pytest.raises(ServerError) as failed,
    ):
        sdk.templates.get("t")
    error = failed.value
    assert len(stub.requests) == 3
    assert error.status == 502 and error.error == "bad_gateway" and error.errors is None
    assert (
        error.message == "HTTP 502 Bad Gateway: <html><body><h1>502 Bad Gateway</h1></body></html>"
    )


def test_a_long_retry_after_fails_at_once(stub):
    stub.answer(
        Reply(
            429,
            {"error": "rate_limited", "message": "Quota.", "status": 429},
            {"Retry-After": "120"},
        )
    )
    with (
        Layang("k", base_url=stub.url, max_retry_wait=10) as sdk,
        pytest.raises(RateLimitError) as failed,
    ):
        sdk.send(**SEND)
    assert failed.value.retry_after == 120 and failed.value.message == "Quota."
    assert len(stub.requests) == 1


def test_a_dropped_connection_retries_reads_and_keyed_sends_not_creations(stub, stub_sdk):
    stub.answer(Reply(drop=True), Reply(200, {"id": "t"}))
    assert stub_sdk.templates.get("t") == {"id": "t"}
    assert len(stub.requests) == 2

    stub.requests.clear()
    stub.answer(Reply(drop=True), OK)
    assert stub_sdk.send(**SEND) == "tx-1"
    first, second = keys(stub)
    assert first and first == second

    stub.requests.clear()
    stub.answer(Reply(drop=True), Reply(200, {"id": "t"}))
    with pytest.raises(LayangConnectionError) as failed:
        stub_sdk.templates.create(id="t", name="T", subject="S", body_text="x")
    assert failed.value.error == "connection_error" and len(stub.requests) == 1
    stub.script.clear()


def test_a_timeout_retries_reads_and_sends_not_creations(stub):
    with Layang("k", base_url=stub.url, timeout=0.2, retry_backoff=0.01) as sdk:
        stub.answer(Reply(200, {"id": "t"}, delay=0.5), Reply(200, {"id": "t"}))
        assert sdk.templates.get("t") == {"id": "t"}
        assert len(stub.requests) == 2

        stub.requests.clear()
        stub.answer(Reply(200, {"transmissionId": "late"}, delay=0.5), OK)
        assert sdk.send(**SEND) == "tx-1"
        first, second = keys(stub)
        assert first and first == second

        stub.requests.clear()
        stub.answer(Reply(200, {"id": "late"}, delay=0.5), Reply(200, {"id": "t"}))
        with pytest.raises(LayangTimeoutError) as failed:
            sdk.templates.create(id="t", name="T", subject="S", body_text="x")
        assert failed.value.error == "timeout" and len(stub.requests) == 1
        stub.script.clear()


def test_update_sends_if_match_and_preview_is_retried(stub, stub_sdk):
    busy = Reply(503, {"error": "service_unavailable", "message": "m", "status": 503})
    stub.answer(busy, Reply(200, {"version": 2}), busy, Reply(200, {"subject": "s"}))
    assert stub_sdk.templates.update("t", name="N", body_text=None, if_match='"t-v1"') == {
        "version": 2
    }
    assert stub_sdk.templates.preview("t", {"a": 1}) == {"subject": "s"}
    put, _, preview, _ = stub.requests
    assert put.method == "PUT" and put.headers["if-match"] == '"t-v1"'
    assert json.loads(put.body) == {"name": "N", "bodyText": None}
    assert preview.path == "/v1/layang/templates/t/preview"
    assert json.loads(preview.body) == {"substitutionData": {"a": 1}}


def test_parse_retry_after():
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(" 1.5 ") == 1.5
    assert parse_retry_after("-4") == 0.0
    assert parse_retry_after(format_datetime(now + timedelta(seconds=30), usegmt=True), now) == 30.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now) == 0.0
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
