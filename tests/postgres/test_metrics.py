"""``/metrics``: totals and queue figures from the database, relay latency from the process."""

from __future__ import annotations

import time

from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import drain


def scrape(client) -> dict[str, float]:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.content_type.startswith("text/plain; version=0.0.4")
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(response.get_data(as_text=True))
        for sample in family.samples
    }


def send(client, auth, subject, to):
    response = client.post(
        "/v1/layang/transmissions",
        headers=auth,
        json={
            "from": {"email": "shop@sender.test"},
            "subject": subject,
            "to": [{"email": address} for address in to],
            "bodyText": "hello",
        },
    )
    assert response.status_code == 200


def test_metrics_count_what_the_database_holds(client, auth, upstream, relay_to):
    empty = scrape(client)
    assert empty["layang_database_up"] == 1
    assert empty["layang_messages_accepted_total"] == 0
    assert empty["layang_queue_depth"] == 0
    assert empty["layang_queue_oldest_age_seconds"] == 0
    relayed = empty.get("layang_relay_latency_seconds_count", 0)  # by earlier tests, if any

    upstream.script_rcpt("gone@rcpt.test", "550 5.1.1 No such user")
    upstream.script_rcpt("later@rcpt.test", "451 4.3.0 Try again")
    send(client, auth, "one", ["ana@rcpt.test", "gone@rcpt.test", "later@rcpt.test"])
    send(client, auth, "two", ["bo@rcpt.test"])
    time.sleep(0.05)
    queued = scrape(client)
    assert queued["layang_messages_accepted_total"] == 4
    assert queued["layang_queue_depth"] == 4
    assert queued["layang_queue_due"] == 4
    assert queued["layang_queue_oldest_age_seconds"] >= 0.05

    worker = relay_to(upstream, retry_base_seconds=60)
    drain(worker)
    after = scrape(client)
    assert after["layang_messages_delivered_total"] == 2
    assert after["layang_messages_bounced_total"] == 1
    assert after["layang_messages_delayed_total"] == 1
    assert after["layang_queue_depth"] == 1  # waiting for its retry
    assert after["layang_queue_due"] == 0
    # Relayed by this process (as in `layang run`): its own latency histogram shows up too.
    assert (
        after["layang_relay_latency_seconds_count"] == relayed + 4
    )  # one SMTP transaction per recipient: each has its own return path
    assert after["layang_relay_latency_seconds_sum"] > 0


def test_metrics_need_no_api_key(client):
    assert client.get("/metrics").status_code == 200
