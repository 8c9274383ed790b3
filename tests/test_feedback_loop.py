"""The whole way back, across its parts: a report received by the inbound server, or a
simulator outcome, puts the address on the suppression list and reaches webhooks; a later send
to it is answered but never relayed; mail to the List-Unsubscribe address unsubscribes."""

# The fixtures imported below are used as test arguments, which ruff reads as redefinitions.
# ruff: noqa: F811

from __future__ import annotations

import re
import smtplib
from dataclasses import replace

import pytest

from tests.conftest import drain
from tests.inbound.test_reports import arf, deliver, dsn, inbound, send_and_relay  # noqa: F401
from tests.support.webhook_receiver import Receiver, receiver  # noqa: F401
from tests.webhooks.test_dispatch import dispatch_until, dispatchers, endpoint  # noqa: F401

URL = "/v1/layang/transmissions"
RECIPIENT = "ana@rcpt.test"


@pytest.fixture
def config(config):
    return replace(config, webhook_allow_private=True, webhook_retry_schedule=(0.3, 0.3, 0.6))


def send(client, auth, to: str, **options: object) -> dict:
    body = {
        "from": {"email": "shop@sender.test"},
        "subject": "Again",
        "to": [{"email": to}],
        "bodyText": "Hello again.",
        **options,
    }
    response = client.post(URL, json=body, headers=auth)
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def suppression(client, auth, email: str) -> dict | None:
    response = client.get(f"/v1/layang/suppressions/{email}", headers=auth)
    return response.get_json() if response.status_code == 200 else None


def test_a_bounce_report_suppresses_the_address_and_a_later_send_is_not_relayed(
    client, auth, upstream, relay_to, inbound, receiver: Receiver, dispatchers
):
    endpoint(client, auth, receiver.url, events=["Bounce", "Suppressed"])
    _, verp = send_and_relay(client, auth, upstream, relay_to)
    first_tid = client.get(f"/v1/layang/activity?recipient={RECIPIENT}", headers=auth).get_json()[
        "items"
    ][0]["transmissionId"]
    deliver(inbound, verp, dsn(verp, "failed", "5.1.1", "550 5.1.1 user unknown"))

    entry = suppression(client, auth, RECIPIENT)
    assert entry is not None
    assert entry["reason"] == "hard_bounce"
    assert entry["transmissionId"] == first_tid

    relayed_before = len(upstream.received)
    answer = send(client, auth, RECIPIENT)
    assert answer["suppressed"] == [RECIPIENT]
    drain(relay_to(upstream))
    assert len(upstream.received) == relayed_before
    items = client.get(f"/v1/layang/activity?recipient={RECIPIENT}", headers=auth).get_json()
    later = next(i for i in items["items"] if i["transmissionId"] == answer["transmissionId"])
    assert later["status"] == "Suppressed"

    dispatch_until(dispatchers(), lambda: len(receiver.events()) >= 2)
    kinds = sorted((e["type"], e.get("bounceClass")) for e in receiver.events())
    assert kinds == [("Bounce", "hard"), ("Suppressed", None)]


def test_a_soft_bounce_report_does_not_suppress(client, auth, upstream, relay_to, inbound):
    _, verp = send_and_relay(client, auth, upstream, relay_to)
    deliver(inbound, verp, dsn(verp, "failed", "5.2.2", "552 5.2.2 mailbox full"))
    assert suppression(client, auth, RECIPIENT) is None


def test_a_complaint_suppresses_the_address(client, auth, upstream, relay_to, inbound):
    _, verp = send_and_relay(client, auth, upstream, relay_to)
    deliver(inbound, "fbl@bounces.127.0.0.1", arf(f"Return-Path: <{verp}>\r\n", "fbl@x"))
    entry = suppression(client, auth, RECIPIENT)
    assert entry is not None and entry["reason"] == "complaint"


def test_mail_to_the_list_unsubscribe_address_unsubscribes(
    client, auth, upstream, relay_to, inbound
):
    send(client, auth, RECIPIENT, optionsAttributes={"transactional": False})
    drain(relay_to(upstream))
    header = upstream.received[-1].message["List-Unsubscribe"]
    (mailto,) = re.findall(r"<mailto:([^>]+)>", header)
    assert mailto.startswith("u+") and mailto.endswith("@bounces.127.0.0.1")

    deliver(inbound, mailto, b"Subject: unsubscribe\r\n\r\nPlease stop.\r\n", "ana@rcpt.test")
    entry = suppression(client, auth, RECIPIENT)
    assert entry is not None and entry["reason"] == "unsubscribe"
    items = client.get(f"/v1/layang/activity?recipient={RECIPIENT}", headers=auth).get_json()
    assert items["items"][0]["events"][-1]["status"] == "Unsubscribe"

    # A transactional message still goes; another non-transactional one does not.
    assert "suppressed" not in send(client, auth, RECIPIENT)
    assert send(client, auth, RECIPIENT, optionsAttributes={"transactional": False})[
        "suppressed"
    ] == [RECIPIENT]


def test_a_forged_unsubscribe_address_is_refused_at_rcpt(client, auth, upstream, relay_to, inbound):
    send(client, auth, RECIPIENT, optionsAttributes={"transactional": False})
    drain(relay_to(upstream))
    (mailto,) = re.findall(r"<mailto:([^>]+)>", upstream.received[-1].message["List-Unsubscribe"])
    local, _, domain = mailto.partition("@")
    forged = local[:-1] + ("a" if local[-1] != "a" else "b") + "@" + domain
    with pytest.raises(smtplib.SMTPRecipientsRefused) as refused:
        deliver(inbound, forged, b"Subject: x\r\n\r\nx\r\n")
    assert refused.value.recipients[forged][0] == 550
    assert suppression(client, auth, RECIPIENT) is None


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("bounce@simulator.layang.test", "hard_bounce"),
        ("complaint@simulator.layang.test", "complaint"),
    ],
)
def test_the_simulators_bounce_and_complaint_suppress_like_real_ones(
    client, auth, upstream, relay_to, address, reason
):
    send(client, auth, address)
    drain(relay_to(upstream))
    entry = suppression(client, auth, address)
    assert entry is not None and entry["reason"] == reason
    assert send(client, auth, address)["suppressed"] == [address]
