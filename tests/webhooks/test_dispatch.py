"""Webhooks delivered: real mail through a real upstream, events POSTed to a real HTTP receiver,
signatures checked with the standardwebhooks reference library."""

from __future__ import annotations

import collections
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import replace

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from layang.clock import now_ms
from layang.config import Config
from layang.domain import webhooks as domain
from layang.models import Account, WebhookEndpoint, WebhookEvent
from layang.webhooks import dispatcher as webhook_dispatcher
from layang.webhooks.dispatcher import Dispatcher
from tests.conftest import drain
from tests.support.tls_pki import LocalCA
from tests.support.upstream import make_self_signed_cert, server_tls_context
from tests.support.webhook_receiver import Receiver


@pytest.fixture
def config(config: Config) -> Config:
    return replace(config, webhook_allow_private=True, webhook_retry_schedule=(0.3, 0.3, 0.6))


@pytest.fixture
def dispatchers(config: Config):
    made: list[Dispatcher] = []

    def make(**options: object) -> Dispatcher:
        settings = {k: options.pop(k) for k in list(options) if hasattr(config, k)}
        dispatcher = Dispatcher(replace(config, **settings), name=f"d{len(made)}", **options)
        made.append(dispatcher)
        return dispatcher

    yield make
    for dispatcher in made:
        dispatcher.close()


def dispatch_until(dispatcher: Dispatcher, done: Callable[[], bool], timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        dispatcher.step()
        if done():
            return
        time.sleep(0.02)
    raise AssertionError("the dispatcher did not get there in time")


def send(client, auth, *recipients: str, subject: str = "Hello") -> str:
    response = client.post(
        "/v1/layang/transmissions",
        headers=auth,
        json={
            "from": {"email": "shop@sender.test", "name": "Shop"},
            "subject": subject,
            "to": [{"email": address} for address in recipients],
            "bodyText": "hi",
            "metadata": {"order": 42},
        },
    )
    assert response.status_code == 200, response.get_json()
    return response.json["transmissionId"]


def endpoint(client, auth, url: str, events=("*",)) -> dict:
    response = client.post(
        "/v1/layang/webhooks", headers=auth, json={"url": url, "events": list(events)}
    )
    assert response.status_code == 201, response.get_json()
    return response.json


def verified(request, secret: str) -> dict:
    return Webhook(secret).verify(request.body, request.headers)


def test_real_mail_reaches_the_endpoint_as_signed_events(
    client, auth, upstream, relay_to, receiver: Receiver, dispatchers
):
    hook = endpoint(client, auth, receiver.url)
    upstream.script_rcpt("gone@rcpt.test", "550 5.1.1 <gone@rcpt.test>: no such user")
    tid = send(client, auth, "ana@rcpt.test", "gone@rcpt.test")
    drain(relay_to(upstream))

    dispatcher = dispatchers()
    dispatch_until(dispatcher, lambda: len(receiver.events()) >= 4)
    dispatch_until(dispatcher, lambda: recorded_delivered(hook["id"]) == len(receiver.requests))
    events = receiver.events()
    assert sorted((e["recipient"], e["type"]) for e in events) == [
        ("ana@rcpt.test", "Delivery"),
        ("ana@rcpt.test", "Injection"),
        ("gone@rcpt.test", "Bounce"),
        ("gone@rcpt.test", "Injection"),
    ]
    for request in receiver.delivered():
        assert verified(request, hook["secret"])["type"] == "layang.events"
        assert request.headers["webhook-id"].startswith("msg_")
        assert abs(int(request.headers["webhook-timestamp"]) - time.time()) < 60
    bounce = next(e for e in events if e["type"] == "Bounce")
    assert bounce["bounceClass"] == "hard"
    assert "5.1.1" in bounce["detail"]["reply"]
    delivery = next(e for e in events if e["type"] == "Delivery")
    assert delivery["transmissionId"] == tid
    assert delivery["from"] == {"email": "shop@sender.test", "name": "Shop"}
    assert delivery["subject"] == "Hello"
    assert delivery["metadata"] == {"order": 42}
    assert delivery["recipientType"] == "to"
    assert delivery["messageId"].startswith(f"<{tid}@")
    assert "bounceClass" not in delivery
    assert len({e["id"] for e in events}) == 4

    attempts = client.get(f"/v1/layang/webhooks/{hook['id']}/deliveries", headers=auth).json
    assert {a["status"] for a in attempts["items"]} == {"delivered"}
    assert sorted(i for a in attempts["items"] for i in a["eventIds"]) == sorted(
        e["id"] for e in events
    )


def test_only_subscribed_types_and_enabled_endpoints_get_events(
    client, auth, upstream, relay_to, receiver: Receiver, dispatchers
):
    endpoint(client, auth, receiver.url, events=["Delivery"])
    paused = endpoint(client, auth, receiver.url + "?paused", events=["*"])
    client.patch(f"/v1/layang/webhooks/{paused['id']}", headers=auth, json={"enabled": False})
    send(client, auth, "ana@rcpt.test")
    drain(relay_to(upstream))
    dispatch_until(dispatchers(), lambda: len(receiver.events()) >= 1)
    time.sleep(0.3)
    dispatchers().step()
    assert [e["type"] for e in receiver.events()] == ["Delivery"]
    assert len(receiver.requests) == 1


def test_an_outage_is_retried_with_the_same_webhook_id_until_it_recovers(
    client, auth, config, receiver: Receiver, dispatchers
):
    hook = endpoint(client, auth, receiver.url)
    send(client, auth, "ana@rcpt.test")
    receiver.hang_seconds = 2
    receiver.script(500, "hang")
    dispatcher = dispatchers(
        timeout=0.5, webhook_retry_schedule=(0.2, 0.2, 0.2, 0.2, 0.2), worker_poll_seconds=0.05
    )
    dispatch_until(dispatcher, lambda: len(receiver.requests) >= 2)
    # Now the port refuses connections, then comes back.
    receiver.stop()
    dispatch_until(
        dispatcher,
        lambda: any("Connect" in (a.error or "") for a in domain_attempts(hook["id"])),
    )
    receiver.start()
    dispatch_until(dispatcher, lambda: recorded_delivered(hook["id"]) == 1)

    ids = {request.headers["webhook-id"] for request in receiver.requests}
    assert len(ids) == 1  # one delivery, retried under one id
    assert [r.answered for r in receiver.requests] == [500, None, 204]
    assert verified(receiver.delivered()[0], hook["secret"])["events"][0]["type"] == "Injection"

    attempts = client.get(f"/v1/layang/webhooks/{hook['id']}/deliveries", headers=auth).json
    items = list(reversed(attempts["items"]))  # oldest first
    assert [a["status"] for a in items] == ["pending", "pending", "pending", "delivered"]
    assert items[0]["responseStatus"] == 500 and items[0]["error"] == "receiver says no"
    assert items[1]["responseStatus"] is None and "timed out" in items[1]["error"]
    assert "Connect" in items[2]["error"]
    assert all(a["nextAttemptAt"] for a in items[:3]) and items[3]["nextAttemptAt"] is None
    assert len({tuple(a["eventIds"]) for a in items}) == 1


def recorded_delivered(endpoint_id: str) -> int:
    """How many of the endpoint's attempts are recorded as delivered (an attempt is recorded
    once its answer is back, a moment after the receiver has the request)."""
    return sum(a.status == "delivered" for a in domain_attempts(endpoint_id))


def domain_attempts(endpoint_id: str):
    owner = WebhookEndpoint.get_by_id(endpoint_id).account
    return domain.list_attempts(owner, endpoint_id, limit=100).items


def test_a_delivery_failing_past_the_schedule_is_failed_and_kept(
    client, auth, receiver: Receiver, dispatchers
):
    hook = endpoint(client, auth, receiver.url)
    send(client, auth, "ana@rcpt.test")
    receiver.script(500, 502, 503)
    dispatcher = dispatchers(webhook_retry_schedule=(0.1, 0.1))
    dispatch_until(dispatcher, lambda: len(domain_attempts(hook["id"])) >= 3)
    time.sleep(0.4)
    dispatcher.step()
    attempts = client.get(f"/v1/layang/webhooks/{hook['id']}/deliveries", headers=auth).json
    assert [a["status"] for a in attempts["items"]] == ["failed", "pending", "pending"]
    assert [a["responseStatus"] for a in attempts["items"]] == [503, 502, 500]
    assert len(receiver.requests) == 3
    # The failed one no longer holds back the recipient's later events.
    send(client, auth, "ana@rcpt.test")
    dispatch_until(dispatcher, lambda: receiver.delivered())


def test_a_recipients_later_event_waits_for_its_earlier_one(
    client, auth, upstream, relay_to, receiver: Receiver, dispatchers
):
    endpoint(client, auth, receiver.url)
    send(client, auth, "ana@rcpt.test")
    receiver.script(500)
    dispatcher = dispatchers(webhook_retry_schedule=(0.5,))
    dispatch_until(dispatcher, lambda: len(receiver.requests) == 1)
    drain(relay_to(upstream))  # the Delivery event is written while the Injection is pending
    dispatch_until(dispatcher, lambda: len(receiver.events()) == 2)
    types = [[e["type"] for e in r.events] for r in receiver.requests]
    assert types == [["Injection"], ["Injection"], ["Delivery"]]


def test_a_test_event_reaches_only_its_endpoint(client, auth, receiver: Receiver, dispatchers):
    hook = endpoint(client, auth, receiver.url)
    endpoint(client, auth, receiver.url + "?other")
    response = client.post(f"/v1/layang/webhooks/{hook['id']}/test", headers=auth)
    assert response.status_code == 202
    dispatch_until(dispatchers(), lambda: receiver.delivered())
    (request,) = receiver.delivered()
    event = verified(request, hook["secret"])["events"][0]
    assert event["type"] == "Test" and event["id"] == response.json["eventId"]


def test_after_rotation_both_secrets_sign_for_a_day_then_only_the_new_one(
    client, auth, receiver: Receiver, dispatchers, monkeypatch
):
    hook = endpoint(client, auth, receiver.url)
    rotated = client.post(f"/v1/layang/webhooks/{hook['id']}/rotate-secret", headers=auth).json
    assert rotated["secret"] != hook["secret"] and rotated["secret"].startswith("whsec_")
    dispatcher = dispatchers()
    client.post(f"/v1/layang/webhooks/{hook['id']}/test", headers=auth)
    dispatch_until(dispatcher, lambda: len(receiver.delivered()) == 1)
    first = receiver.delivered()[0]
    assert len(first.headers["webhook-signature"].split(" ")) == 2
    verified(first, hook["secret"])
    verified(first, rotated["secret"])

    day_later = now_ms() + 24 * 3600 * 1000 + 1000
    monkeypatch.setattr(webhook_dispatcher, "now_ms", lambda: day_later)
    client.post(f"/v1/layang/webhooks/{hook['id']}/test", headers=auth)
    dispatch_until(dispatcher, lambda: len(receiver.delivered()) == 2)
    second = receiver.delivered()[1]
    assert len(second.headers["webhook-signature"].split(" ")) == 1
    verified(second, rotated["secret"])
    with pytest.raises(WebhookVerificationError):
        verified(second, hook["secret"])


def test_a_name_resolving_to_a_private_address_is_refused_at_delivery(
    client, auth, config, receiver: Receiver, dispatchers, monkeypatch, account: Account
):
    real = socket.getaddrinfo

    def resolver(host, *args, **kwargs):
        # hooks.example.test stands for a public name re-pointed at loopback.
        return real("127.0.0.1" if host == "hooks.example.test" else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    strict = replace(config, webhook_allow_private=False)
    hook = domain.create_endpoint(
        account, f"https://hooks.example.test:{receiver.port}/", ["*"], "", strict
    )
    send(client, auth, "ana@rcpt.test")
    dispatcher = dispatchers(webhook_allow_private=False)
    dispatch_until(dispatcher, lambda: domain_attempts(hook.id))
    (attempt,) = domain_attempts(hook.id)
    assert attempt.status == "pending"
    # The account learns that the name is refused, never the internal address it points at.
    assert "hooks.example.test resolves to a private address" in attempt.error
    assert "127.0.0.1" not in attempt.error
    assert receiver.requests == []


def test_an_endpoint_failing_for_five_days_is_disabled(
    client, auth, receiver: Receiver, dispatchers
):
    hook = endpoint(client, auth, receiver.url)
    WebhookEndpoint.update(failing_since=now_ms() - 5 * 24 * 3600 * 1000 - 1).where(
        WebhookEndpoint.id == hook["id"]
    ).execute()
    send(client, auth, "ana@rcpt.test")
    receiver.script(500)

    def current() -> dict:
        return client.get(f"/v1/layang/webhooks/{hook['id']}", headers=auth).json

    # The attempt is recorded once its answer is back, after the receiver has the request.
    dispatch_until(dispatchers(), lambda: current()["enabled"] is False)
    assert len(receiver.requests) == 1
    shown = current()
    assert shown["disabledAt"] and "5 days" in shown["disabledReason"]
    # Enabling it again resumes the pending delivery.
    client.patch(f"/v1/layang/webhooks/{hook['id']}", headers=auth, json={"enabled": True})
    dispatch_until(dispatchers(), lambda: receiver.delivered())


def test_many_events_go_in_batches_of_at_most_100(client, auth, receiver, dispatchers):
    endpoint(client, auth, receiver.url)
    for n in range(3):
        send(client, auth, *[f"r{n}-{i}@rcpt.test" for i in range(90)])
    dispatch_until(dispatchers(), lambda: len(receiver.events()) == 270)
    sizes = [len(request.events) for request in receiver.delivered()]
    assert max(sizes) <= 100 and len(sizes) >= 3
    counts = collections.Counter(e["id"] for e in receiver.events())
    assert set(counts.values()) == {1}


def test_an_injection_writes_one_outbox_row_per_subscribed_endpoint(client, auth, receiver):
    every = endpoint(client, auth, receiver.url)
    endpoint(client, auth, receiver.url + "?bounces", events=["Bounce"])
    send(client, auth, "ana@rcpt.test", "ben@rcpt.test")
    rows = WebhookEvent.select().order_by(WebhookEvent.id)
    assert [(row.endpoint_id, row.status) for row in rows] == [(every["id"], "Injection")] * 2


@pytest.mark.parametrize(
    ("certified", "arrives"), [("hooks.example.test", True), ("other.test", False)]
)
def test_https_connects_to_the_checked_address_and_verifies_the_host_name(
    client, auth, tmp_path, monkeypatch, dispatchers, certified, arrives
):
    real = socket.getaddrinfo
    asked = []

    def resolver(host, *args, **kwargs):
        asked.append(host)
        return real("127.0.0.1" if host == "hooks.example.test" else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    # The certificate also names 127.0.0.1: only a check against the host name can refuse it.
    certfile, keyfile = make_self_signed_cert(tmp_path, certified)
    secure = Receiver(tls=server_tls_context(certfile, keyfile), host="hooks.example.test")
    try:
        hook = endpoint(client, auth, secure.url)
        client.post(f"/v1/layang/webhooks/{hook['id']}/test", headers=auth)
        dispatcher = dispatchers(verify=ssl.create_default_context(cafile=str(certfile)))
        dispatch_until(dispatcher, lambda: domain_attempts(hook["id"]))
        (attempt,) = domain_attempts(hook["id"])
        if arrives:
            assert attempt.status == "delivered"
            (request,) = secure.delivered()
            assert request.headers["host"] == f"hooks.example.test:{secure.port}"
            verified(request, hook["secret"])
        else:
            assert attempt.status == "pending" and "CERTIFICATE_VERIFY_FAILED" in attempt.error
            assert secure.requests == []
        assert asked.count("hooks.example.test") == 1  # resolved once, by the check
    finally:
        secure.stop()


def test_names_are_resolved_at_the_configured_dns_resolver_and_rebinding_is_refused(
    client, auth, config, dns_zone, receiver: Receiver, dispatchers, account: Account
):
    # hooks.rebind.test exists only in this zone: the system resolver does not know it.
    dns_zone.add_address("hooks.rebind.test", "127.0.0.1")
    hook = domain.create_endpoint(
        account, f"http://hooks.rebind.test:{receiver.port}/hooks", ["*"], "", config
    )
    dispatcher = dispatchers(dns_resolver=dns_zone.address)
    client.post(f"/v1/layang/webhooks/{hook.id}/test", headers=auth)
    dispatch_until(dispatcher, lambda: recorded_delivered(hook.id) == 1)
    assert receiver.delivered()[0].headers["host"] == f"hooks.rebind.test:{receiver.port}"
    assert ("hooks.rebind.test", "A") in dns_zone.queries

    # The name is re-pointed at the metadata service (NAT64 form), refused even here.
    dns_zone.remove("hooks.rebind.test")
    dns_zone.add_address("hooks.rebind.test", "64:ff9b::a9fe:a9fe")
    client.post(f"/v1/layang/webhooks/{hook.id}/test", headers=auth)
    dispatch_until(dispatcher, lambda: len(domain_attempts(hook.id)) == 2)
    refused = domain_attempts(hook.id)[0]
    assert refused.status == "pending"
    assert refused.error == "refused: hooks.rebind.test resolves to a private address"
    assert len(receiver.requests) == 1


def test_a_rebound_name_is_refused_in_production_mode_without_naming_the_address(
    client, auth, config, dns_zone, receiver: Receiver, dispatchers, account: Account
):
    dns_zone.add_address("hooks.rebind.test", "10.20.30.40")
    strict = replace(config, webhook_allow_private=False)
    hook = domain.create_endpoint(account, "https://hooks.rebind.test/hooks", ["*"], "", strict)
    client.post(f"/v1/layang/webhooks/{hook.id}/test", headers=auth)
    dispatcher = dispatchers(webhook_allow_private=False, dns_resolver=dns_zone.address)
    dispatch_until(dispatcher, lambda: domain_attempts(hook.id))
    (attempt,) = domain_attempts(hook.id)
    assert attempt.error == "refused: hooks.rebind.test resolves to a private address"
    assert "10.20.30.40" not in attempt.error


def test_a_private_ca_in_layang_tls_cafile_is_trusted(
    client, auth, tmp_path, monkeypatch, dispatchers
):
    real = socket.getaddrinfo
    monkeypatch.setattr(
        socket,
        "getaddrinfo",
        lambda host, *a, **k: real("127.0.0.1" if host == "hooks.example.test" else host, *a, **k),
    )
    ca = LocalCA(tmp_path / "ca")
    secure = Receiver(tls=ca.server_context("hooks.example.test"), host="hooks.example.test")
    try:
        hook = endpoint(client, auth, secure.url)
        client.post(f"/v1/layang/webhooks/{hook['id']}/test", headers=auth)
        untrusting = dispatchers()
        dispatch_until(untrusting, lambda: domain_attempts(hook["id"]))
        assert "CERTIFICATE_VERIFY_FAILED" in domain_attempts(hook["id"])[0].error
        trusting = dispatchers(tls_cafile=str(ca.cafile), webhook_retry_schedule=(0.01,) * 3)
        dispatch_until(trusting, lambda: len(secure.delivered()) == 1)
    finally:
        secure.stop()
