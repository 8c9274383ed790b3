"""``Idempotency-Key`` on the API (docs/api.md): a repeat is answered, never sent again."""

from __future__ import annotations

import concurrent.futures
import threading

import pytest

from layang.api.transmissions import TransmissionRequestSchema
from layang.delivery.worker import Worker
from layang.domain import accounts, idempotency
from layang.domain.errors import IdempotencyInFlight
from layang.domain.intake import accept_transmission
from layang.lifecycle import housekeeping
from layang.models import IdempotencyAnswer, IdempotencyKey, Transmission
from tests.conftest import BACKENDS, drain
from tests.delivery.test_crash import wait_until

pytestmark = pytest.mark.parametrize("backend", BACKENDS)

URL = "/v1/layang/transmissions"


def send_body(subject="Your order"):
    return {
        "from": {"email": "shop@sender.test"},
        "subject": subject,
        "to": [{"email": "ana@rcpt.test"}],
        "bodyText": "Thanks.",
    }


def keyed(auth, key):
    return {**auth, "Idempotency-Key": key}


def test_a_repeat_gets_the_first_answer_and_nothing_is_sent_twice(client, auth, upstream, relay_to):
    first = client.post(URL, json=send_body(), headers=keyed(auth, "order-1"))
    assert first.status_code == 200
    assert "Idempotent-Replayed" not in first.headers
    again = client.post(URL, json=send_body(), headers=keyed(auth, "order-1"))
    assert again.status_code == 200
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.get_json() == first.get_json()
    assert Transmission.select().count() == 1

    drain(relay_to(upstream))
    assert len(upstream.received) == 1

    other = client.post(URL, json=send_body(), headers=keyed(auth, "order-2"))
    assert other.get_json() != first.get_json()
    assert Transmission.select().count() == 2


def test_the_same_key_with_a_different_body_is_422(client, auth):
    assert client.post(URL, json=send_body(), headers=keyed(auth, "k")).status_code == 200
    reused = client.post(URL, json=send_body("Other"), headers=keyed(auth, "k"))
    assert reused.status_code == 422
    assert reused.get_json()["error"] == "idempotency_key_reused"
    # Same body on another path is another request too.
    elsewhere = client.post(
        "/v1/layang/templates",
        json={"id": "t", "name": "T", "subject": "S", "bodyText": "x"},
        headers=keyed(auth, "k"),
    )
    assert elsewhere.status_code == 422
    assert Transmission.select().count() == 1


def test_keys_belong_to_their_account(client, auth, account):
    other = accounts.create_account("other", live=True)
    other_auth = {"Authorization": f"Bearer {accounts.create_api_key(other)[1]}"}
    mine = client.post(URL, json=send_body(), headers=keyed(auth, "shared"))
    theirs = client.post(URL, json=send_body(), headers=keyed(other_auth, "shared"))
    assert theirs.status_code == 200 and "Idempotent-Replayed" not in theirs.headers
    assert theirs.get_json() != mine.get_json()


def test_a_failed_request_gives_its_key_back(client, auth):
    body = {**send_body(), "templateId": "welcome"}
    del body["bodyText"]
    missing = client.post(URL, json=body, headers=keyed(auth, "welcome-ana"))
    assert missing.status_code == 404
    assert IdempotencyKey.select().count() == 0
    created = client.post(
        "/v1/layang/templates",
        json={"id": "welcome", "name": "W", "subject": "Hi", "bodyText": "Welcome"},
        headers=auth,
    )
    assert created.status_code == 201
    retried = client.post(URL, json=body, headers=keyed(auth, "welcome-ana"))
    assert retried.status_code == 200 and "Idempotent-Replayed" not in retried.headers
    invalid = client.post(URL, json={"subject": "x"}, headers=keyed(auth, "bad"))
    assert invalid.status_code == 400
    assert IdempotencyKey.select().where(IdempotencyKey.key == "bad").count() == 0


def test_other_posts_replay_with_their_status_and_commit_with_their_work(client, auth):
    template = {"id": "t1", "name": "T", "subject": "S", "bodyText": "x"}
    created = client.post("/v1/layang/templates", json=template, headers=keyed(auth, "tpl"))
    assert created.status_code == 201
    replayed = client.post("/v1/layang/templates", json=template, headers=keyed(auth, "tpl"))
    assert replayed.status_code == 201
    assert replayed.headers["Idempotent-Replayed"] == "true"
    assert replayed.get_json() == created.get_json()
    # Without the key, the same request is a new one: the id is taken.
    assert client.post("/v1/layang/templates", json=template, headers=auth).status_code == 409


def test_a_request_still_in_flight_is_409_until_its_holder_is_presumed_dead(client, auth, account):
    body = send_body()
    response = client.post(URL, json=body, headers=keyed(auth, "slow"))
    IdempotencyAnswer.delete().execute()
    Transmission.delete().execute()
    # As if the request were still running: its key is claimed and it has not answered.
    assert response.status_code == 200
    in_flight = client.post(URL, json=body, headers=keyed(auth, "slow"))
    assert in_flight.status_code == 409
    assert in_flight.get_json()["error"] == "idempotency_in_flight"
    assert Transmission.select().count() == 0

    # Its holder died: after the timeout a repeat takes the key over and is processed.
    IdempotencyKey.update(
        claimed_at=IdempotencyKey.claimed_at - idempotency.CLAIM_TIMEOUT_MS - 1
    ).execute()
    taken_over = client.post(URL, json=body, headers=keyed(auth, "slow"))
    assert taken_over.status_code == 200 and "Idempotent-Replayed" not in taken_over.headers
    assert Transmission.select().count() == 1


def test_two_holders_of_one_key_never_both_store_their_message(client, auth, account, config):
    """A holder taken for dead was only slow: whichever commits second fails on the answer's
    unique key, and its message is not stored."""
    body = send_body()
    slow = idempotency.begin(account, "twice", "fingerprint-of-the-body")
    assert isinstance(slow, idempotency.Claim)
    IdempotencyKey.delete().execute()  # taken over: the repeat gets a claim of its own
    taken_over = client.post(URL, json=body, headers=keyed(auth, "twice"))
    assert taken_over.status_code == 200

    request = TransmissionRequestSchema().load(body)
    with pytest.raises(IdempotencyInFlight):
        accept_transmission(account, request, config, slow)
    assert Transmission.select().count() == 1


def test_expired_keys_start_over_and_the_worker_deletes_them(client, auth, config):
    first = client.post(URL, json=send_body(), headers=keyed(auth, "daily"))
    for model in (IdempotencyKey, IdempotencyAnswer):
        model.update(expires_at=model.expires_at - idempotency.KEY_LIFETIME_MS).execute()
    again = client.post(URL, json=send_body(), headers=keyed(auth, "daily"))
    assert again.status_code == 200 and "Idempotent-Replayed" not in again.headers
    assert again.get_json() != first.get_json()

    client.post(URL, json=send_body(), headers=keyed(auth, "old"))
    IdempotencyKey.update(expires_at=1).where(IdempotencyKey.key == "old").execute()
    IdempotencyAnswer.update(expires_at=1).where(IdempotencyAnswer.key == "old").execute()
    stop = threading.Event()
    housekeeper = Worker(config, name="housekeeper", chores=[housekeeping.delete_expired])
    worker = threading.Thread(target=housekeeper.run, args=(stop,))
    worker.start()
    try:
        wait_until(lambda: {k.key for k in IdempotencyKey.select()} == {"daily"}, 10, "not deleted")
    finally:
        stop.set()
        worker.join(10)
    assert {a.key for a in IdempotencyAnswer.select()} == {"daily"}
    assert housekeeping.delete_expired() == 0


@pytest.mark.parametrize("key", ["", "x" * 256, "caf\u00e9", "tab\there"])
def test_a_malformed_key_is_400(client, auth, key):
    response = client.post(URL, json=send_body(), headers=keyed(auth, key))
    assert response.status_code == 400
    assert response.get_json()["errors"] == {
        "Idempotency-Key": ["Use 1 to 255 printable ASCII characters."]
    }
    assert Transmission.select().count() == 0


def test_concurrent_duplicates_in_threads_store_one_message(app, auth):
    def attempt(_):
        with app.test_client() as client:
            response = client.post(URL, json=send_body(), headers=keyed(auth, "burst"))
            return response.status_code, response.get_json()

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(attempt, range(48)))
    assert Transmission.select().count() == 1
    tid = Transmission.get().id
    for status, body in answers:
        assert (status, body) in ((200, {"transmissionId": tid}), (409, body))
        if status == 409:
            assert body["error"] == "idempotency_in_flight"
    assert sum(1 for status, _ in answers if status == 200) >= 1


def test_a_replayable_webhook_answer_keeps_its_secret_sealed(client, auth, config):
    headers = keyed(auth, "hook-1")
    body = {"url": "https://hooks.example.com/in", "events": ["*"]}
    made = client.post("/v1/layang/webhooks", json=body, headers=headers)
    assert made.status_code == 201
    secret = made.json["secret"]
    (stored,) = IdempotencyAnswer.select()
    assert secret not in stored.body
    assert secret.removeprefix("whsec_") not in stored.body
    assert "hooks.example.com" not in stored.body  # the whole answer is sealed

    again = client.post("/v1/layang/webhooks", json=body, headers=headers)
    assert again.status_code == 201
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json == made.json

    rotated = client.post(
        f"/v1/layang/webhooks/{made.json['id']}/rotate-secret", headers=keyed(auth, "rotate-1")
    )
    stored = IdempotencyAnswer.get(IdempotencyAnswer.key == "rotate-1")
    assert rotated.json["secret"] not in stored.body
