"""``LAYANG_RATE_LIMIT`` on the API (docs/api.md): 429 with Retry-After over the limit, and the
RateLimit-* headers on every /v1 answer while a limit is set. Across processes and SMTP:
``tests/test_processes_share_keys_and_limits.py``."""

from __future__ import annotations

from dataclasses import replace

import pytest

from layang.config import RateLimit
from layang.lifecycle import housekeeping
from layang.models import RateWindow, Transmission
from tests.conftest import BACKENDS

pytestmark = pytest.mark.parametrize("backend", BACKENDS)

URL = "/v1/layang/transmissions"
BODY = {
    "from": {"email": "shop@sender.test"},
    "subject": "Hi",
    "to": [{"email": "ana@rcpt.test"}, {"email": "ben@rcpt.test"}],
    "bodyText": "x",
}


def limit(app, rate_limit):
    app.config["LAYANG"] = replace(app.config["LAYANG"], rate_limit=rate_limit)


def test_over_the_limit_is_429_with_retry_after(app, client, auth):
    limit(app, RateLimit(2, 3600))
    answers = [client.post(URL, json=BODY, headers=auth) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 429]
    # Messages are counted, not recipients: two recipients each, two messages.
    assert [a.headers["RateLimit-Remaining"] for a in answers] == ["1", "0", "0"]
    assert {a.headers["RateLimit-Limit"] for a in answers} == {"2"}
    refused = answers[2]
    assert refused.get_json()["error"] == "rate_limited"
    assert 0 < int(refused.headers["Retry-After"]) <= 3600
    assert int(refused.headers["RateLimit-Reset"]) == int(refused.headers["Retry-After"])
    assert Transmission.select().count() == 2

    read = client.get("/v1/layang/activity", headers=auth)
    assert read.status_code == 200
    assert (read.headers["RateLimit-Limit"], read.headers["RateLimit-Remaining"]) == ("2", "0")


def test_refused_and_replayed_requests_do_not_count(app, client, auth):
    limit(app, RateLimit(2, 3600))
    invalid = client.post(URL, json={**BODY, "to": []}, headers=auth)
    assert invalid.status_code == 400
    keyed = {**auth, "Idempotency-Key": "one"}
    assert client.post(URL, json=BODY, headers=keyed).status_code == 200
    assert client.post(URL, json=BODY, headers=keyed).headers["Idempotent-Replayed"] == "true"
    assert client.post(URL, json=BODY, headers=auth).status_code == 200
    assert client.post(URL, json=BODY, headers=auth).status_code == 429
    replayed = client.post(URL, json=BODY, headers=keyed)
    assert replayed.status_code == 200 and replayed.headers["Idempotent-Replayed"] == "true"
    assert Transmission.select().count() == 2


def test_without_a_limit_there_are_no_headers(client, auth):
    response = client.post(URL, json=BODY, headers=auth)
    assert response.status_code == 200
    assert not [h for h in response.headers if h[0].lower().startswith("ratelimit")]


def test_closed_windows_are_deleted_by_the_worker(app, client, auth):
    limit(app, RateLimit(5, 1))
    client.post(URL, json=BODY, headers=auth)
    assert RateWindow.select().count() == 1
    assert housekeeping.delete_expired(RateWindow.get().ends_at) == 1
