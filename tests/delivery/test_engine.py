"""The delivery engine: many sessions at once, each recipient still relayed exactly once, and one
destination that stops answering never holds up another."""

from __future__ import annotations

import collections
import json
import threading
import time
from dataclasses import replace

import pytest

from layang.delivery import pool
from layang.delivery.worker import Worker
from layang.models import Event, Recipient

URL = "/v1/layang/transmissions"


def send_batch(client, auth, count, prefix, per_request=50, domain="rcpt.test"):
    for start in range(0, count, per_request):
        to = [
            {"email": f"{prefix}{n}@{domain}"}
            for n in range(start, min(count, start + per_request))
        ]
        response = client.post(
            URL,
            headers=auth,
            json={
                "from": {"email": "shop@sender.test"},
                "subject": prefix,
                "to": to,
                "bodyText": "hello",
            },
        )
        assert response.status_code == 200, response.get_json()


def delivered(prefix: str) -> int:
    return (
        Recipient.select()
        .where(Recipient.status == "Delivery", Recipient.address.startswith(prefix))
        .count()
    )


def settled(prefix: str) -> int:
    return (
        Recipient.select()
        .where(Recipient.status != "Injection", Recipient.address.startswith(prefix))
        .count()
    )


def run_worker(worker: Worker):
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    thread.start()
    return stop, thread


def timed_delivery(client, auth, config, upstream, count, prefix, connections) -> float:
    send_batch(client, auth, count, prefix)
    worker = Worker(replace(config, relay_url=upstream.url, worker_connections=connections))
    started = time.monotonic()
    stop, thread = run_worker(worker)
    try:
        deadline = started + 120
        while delivered(prefix) < count:
            assert time.monotonic() < deadline, f"delivered {delivered(prefix)} of {count}"
            time.sleep(0.05)
        return time.monotonic() - started
    finally:
        stop.set()
        thread.join(30)


def test_fifty_sessions_deliver_twenty_times_faster_than_one(client, auth, config, upstream):
    upstream.latency = 0.2  # every reply, the greeting included, leaves 200 ms after its command
    upstream.pipelining = True
    one = timed_delivery(client, auth, config, upstream, 20, "one", connections=1)
    fifty = timed_delivery(client, auth, config, upstream, 1000, "fifty", connections=50)
    speedup = (1000 / fifty) / (20 / one)
    assert speedup >= 20, f"one session: {20 / one:.1f}/s, fifty: {1000 / fifty:.1f}/s"
    counts = collections.Counter(a.lower() for r in upstream.received for a in r.rcpt_tos)
    assert len(counts) == 1020
    assert set(counts.values()) == {1}
    assert len(upstream.data_seen) == 1020  # no transaction even started twice
    assert upstream.connections <= 1 + 50


def test_a_destination_that_hangs_does_not_slow_another(client, auth, config, upstream):
    upstream.stall()  # the smarthost accepts connections and then never answers
    send_batch(client, auth, 5, "stuck")
    # The mailbox simulator is a destination of its own (these mailboxes bounce at once).
    send_batch(client, auth, 30, "ok", domain="simulator.layang.test")
    worker = Worker(replace(config, relay_url=upstream.url, lease_seconds=30))
    started = time.monotonic()
    stop, thread = run_worker(worker)
    try:
        while settled("ok") < 30:
            assert time.monotonic() - started < 10, f"settled {settled('ok')} of 30"
            time.sleep(0.02)
        assert upstream.wait_stalled(5)
        assert delivered("stuck") == 0
    finally:
        upstream.release()
        stop.set()
        thread.join(30)


def test_delivery_events_name_host_address_tls_attempt_and_duration(
    client, auth, config, tls_upstream, relay_to
):
    send_batch(client, auth, 1, "detail")
    worker = relay_to(tls_upstream)
    worker.run_once()
    (event,) = Event.select().where(Event.status == "Delivery")
    detail = json.loads(event.detail)
    assert detail["host"] == "127.0.0.1"
    assert detail["address"] == "127.0.0.1"
    assert detail["attempt"] == 1
    assert isinstance(detail["durationMs"], int)
    assert detail["tls"]["version"].startswith("TLS")
    assert detail["tls"]["cipher"]
    assert detail["tls"]["verified"] is False


def test_421_on_a_reused_session_is_retried_once_on_a_fresh_session(
    client, auth, upstream, relay_to
):
    upstream.pipelining = True
    worker = relay_to(upstream, worker_connections=1)
    send_batch(client, auth, 1, "first")
    worker.run_once()
    assert delivered("first") == 1
    # The server closes the session it kept, at the next transaction's MAIL: nothing was
    # sent, so that email and every one queued behind it go on a new session, not to a retry.
    upstream.script_mail("421 4.4.2 Idle too long")
    send_batch(client, auth, 3, "then", per_request=1)
    worker.run_once()
    assert delivered("then") == 3
    assert upstream.connections == 2
    assert not Event.select().where(Event.status == "Delay").exists()


def test_a_stream_of_mail_on_one_session_costs_one_round_trip_a_message(
    client, auth, upstream, relay_to
):
    upstream.pipelining = True  # PIPELINING without CHUNKING
    worker = relay_to(upstream, worker_connections=1)
    send_batch(client, auth, 20, "stream", per_request=1)
    runs = 0
    while delivered("stream") < 20 and runs < 10:
        worker.run_once()  # one claim each; what it claimed, it sends
        runs += 1
    assert delivered("stream") == 20
    assert sorted(r.rcpt_tos[0] for r in upstream.received) == sorted(
        f"stream{n}@rcpt.test" for n in range(20)
    )
    assert upstream.connections == 1
    # Each message after the first of a claim begins behind the previous one's end of data
    # (RFC 2920): one round trip a message, where MAIL and DATA each waited for one before.
    behind = [chunk for chunk in upstream.reads if b"\r\n.\r\nMAIL FROM:" in chunk]
    assert len(behind) == 20 - runs
    assert not Event.select().where(Event.status == "Delay").exists()


def test_mail_begun_behind_a_body_is_held_with_its_site_when_the_server_closes(
    client, auth, upstream, relay_to
):
    upstream.pipelining = True
    # The first message's end of data is answered 421 (the server closes: a slow-down for the
    # smarthost's site). The second, begun behind that body, never had its own body sent: it
    # is held with the site's other mail, once, and not sent on that session.
    upstream.script_data("421 4.3.2 Shutting down")
    worker = relay_to(upstream, worker_connections=1)
    send_batch(client, auth, 2, "begun", per_request=1)
    worker.run_once()
    deadline = time.monotonic() + 10
    while Event.select().where(Event.status == "Delay").count() < 2:
        assert time.monotonic() < deadline, "the begun email was neither held nor delayed"
        time.sleep(0.05)
    assert upstream.received == []
    delays = list(Event.select().where(Event.status == "Delay"))
    assert sorted(e.recipient.address for e in delays) == ["begun0@rcpt.test", "begun1@rcpt.test"]
    replies = {e.recipient.address: json.loads(e.detail)["reply"] for e in delays}
    assert replies["begun0@rcpt.test"] == "421 4.3.2 Shutting down"
    assert "421" not in replies["begun1@rcpt.test"].split()[0]  # the site's words, not a reply


@pytest.mark.parametrize("pipelining", [True, False])
@pytest.mark.parametrize("gone", ["dropped", "restarted"])
def test_a_session_the_server_let_go_is_replaced_without_a_delay(
    client, auth, upstream, relay_to, pipelining, gone
):
    upstream.pipelining = pipelining
    worker = relay_to(upstream, worker_connections=1)
    send_batch(client, auth, 1, "first")
    worker.run_once()
    if gone == "dropped":
        upstream.kick()
    else:
        upstream.stop()
        upstream.start()
    send_batch(client, auth, 2, "then", per_request=1)
    worker.run_once()
    assert delivered("then") == 2
    assert upstream.received[0].rcpt_tos == ["first0@rcpt.test"]
    assert len(upstream.received) == 3
    assert not Event.select().where(Event.status == "Delay").exists()


def test_an_idle_session_is_closed_rather_than_reused(
    client, auth, upstream, relay_to, monkeypatch
):
    monkeypatch.setattr(pool, "IDLE_SECONDS", 0.1)
    worker = relay_to(upstream)
    send_batch(client, auth, 1, "first")
    worker.run_once()
    deadline = time.monotonic() + 5
    while ("QUIT", "") not in upstream.attempts:
        assert time.monotonic() < deadline, "the idle session was not closed"
        time.sleep(0.05)
    send_batch(client, auth, 1, "then")
    worker.run_once()
    assert delivered("then") == 1
    assert upstream.connections == 2
    assert [verb for verb, _ in upstream.attempts if verb == "RSET"] == []
