"""The suppression list on the sending path: a hard bounce at the upstream server lists the
address, and later mail to it, over HTTP or SMTP, is answered as usual but never reaches the
upstream; the worker checks again what it claims; one-click unsubscribe adds entries that stop
only mail sent with ``transactional: false``."""

from __future__ import annotations

import json
import re
import smtplib
from dataclasses import replace
from email.message import EmailMessage

import pytest

from layang.db import insert_atomically, write_transaction
from layang.domain import accounts
from layang.domain.records import get_transmission_view
from layang.mail.events import append_events, event_batches
from layang.models import Event, Recipient, Suppression
from layang.submission.server import submission_server
from tests.conftest import BACKENDS, drain
from tests.delivery.test_crash import free_port
from tests.submission.test_submission import client_context

pytestmark = pytest.mark.parametrize("backend", BACKENDS)

SEND = "/v1/layang/transmissions"
SUPPRESSIONS = "/v1/layang/suppressions"


def send(client, auth, to, **fields):
    body = {
        "from": {"email": "shop@sender.test"},
        "subject": "Your order",
        "to": [{"email": address} for address in to],
        "bodyText": "Thanks.",
        **fields,
    }
    response = client.post(SEND, json=body, headers=auth)
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def statuses(account, transmission_id):
    view = get_transmission_view(account, transmission_id)
    return {r.recipient: [e.status for e in r.events] for r in view.recipients}


def received_for(upstream):
    return sorted(r for copy in upstream.received for r in copy.rcpt_tos)


@pytest.fixture
def smtp_server(app, config):
    smtp_config = replace(config, smtp_bind=f"127.0.0.1:{free_port()}")
    controller = submission_server(smtp_config)
    controller.start()
    yield smtp_config
    controller.stop()


def submit_over_smtp(smtp_config, account, key, recipients):
    message = EmailMessage()
    message["From"] = "shop@sender.test"
    message["To"] = ", ".join(recipients)
    message["Subject"] = "Over SMTP"
    message.set_content("Hello.\n")
    host, port = smtp_config.smtp_host_port
    with smtplib.SMTP(host, port, local_hostname="client.test", timeout=10) as smtp:
        smtp.starttls(context=client_context())
        smtp.login(account.name, key)
        smtp.mail("shop@sender.test")
        for address in recipients:
            assert smtp.rcpt(address)[0] == 250
        code, reply = smtp.data(message.as_bytes())
    assert code == 250, reply
    return reply.decode().rsplit(" ", 1)[1]


def test_a_hard_bounce_suppresses_and_later_mail_is_answered_but_never_relayed(
    client, auth, account, api_key, upstream, relay_to, smtp_server
):
    upstream.script_rcpt("gone@rcpt.test", "550 5.1.1 <gone@rcpt.test>: no such user")
    first = send(client, auth, ["gone@rcpt.test", "ana@rcpt.test"])
    assert first == {"transmissionId": first["transmissionId"]}  # nothing suppressed yet
    worker = relay_to(upstream)
    drain(worker)

    entry = client.get(f"{SUPPRESSIONS}/gone@rcpt.test", headers=auth).get_json()
    assert entry["reason"] == "hard_bounce"
    assert entry["transmissionId"] == first["transmissionId"]
    assert "no such user" in entry["detail"]
    assert received_for(upstream) == ["ana@rcpt.test"]

    # Over HTTP: 200, the address named, one Suppressed record; the other recipient goes on.
    second = send(client, auth, ["Gone@RCPT.test", "bo@rcpt.test"])
    assert second["suppressed"] == ["Gone@rcpt.test"]
    drain(worker)
    assert statuses(account, second["transmissionId"]) == {
        "Gone@rcpt.test": ["Injection", "Suppressed"],
        "bo@rcpt.test": ["Injection", "Delivery"],
    }
    suppressed = Recipient.get(Recipient.address == "Gone@rcpt.test")
    assert suppressed.status == "Suppressed" and suppressed.next_attempt_at is None

    # Over SMTP: 250, the same.
    tid = submit_over_smtp(smtp_server, account, api_key, ["gone@rcpt.test", "cy@rcpt.test"])
    drain(worker)
    assert statuses(account, tid) == {
        "gone@rcpt.test": ["Injection", "Suppressed"],
        "cy@rcpt.test": ["Injection", "Delivery"],
    }
    assert received_for(upstream) == ["ana@rcpt.test", "bo@rcpt.test", "cy@rcpt.test"]
    records = client.get("/v1/layang/activity?status=Suppressed", headers=auth).get_json()
    assert len(records["items"]) == 2


def test_soft_bounces_and_blocks_do_not_suppress(client, auth, upstream, relay_to):
    upstream.script_rcpt("full@rcpt.test", "552 5.2.2 Mailbox full")
    upstream.script_rcpt("blocked@rcpt.test", "550 5.7.1 Message rejected as spam")
    send(client, auth, ["full@rcpt.test", "blocked@rcpt.test"])
    drain(relay_to(upstream))
    assert Suppression.select().count() == 0


def test_manual_entries_stop_mail_until_removed(client, auth, account, upstream, relay_to):
    put = client.put(f"{SUPPRESSIONS}/ana@rcpt.test", json={"note": "asked us"}, headers=auth)
    assert put.status_code == 200
    answer = send(client, auth, ["ana@rcpt.test"])
    assert answer["suppressed"] == ["ana@rcpt.test"]
    worker = relay_to(upstream)
    drain(worker)
    assert upstream.received == []

    assert client.delete(f"{SUPPRESSIONS}/ana@rcpt.test", headers=auth).status_code == 204
    answer = send(client, auth, ["ana@rcpt.test"])
    assert "suppressed" not in answer
    drain(worker)
    assert received_for(upstream) == ["ana@rcpt.test"]


def test_unsubscribe_entries_stop_only_mail_that_is_not_transactional(
    client, auth, account, upstream, relay_to
):
    client.put(f"{SUPPRESSIONS}/ana@rcpt.test", json={"reason": "unsubscribe"}, headers=auth)
    receipt = send(client, auth, ["ana@rcpt.test"])
    explicit = send(client, auth, ["ana@rcpt.test"], optionsAttributes={"transactional": True})
    news = send(client, auth, ["ana@rcpt.test"], optionsAttributes={"transactional": False})
    assert "suppressed" not in receipt and "suppressed" not in explicit
    assert news["suppressed"] == ["ana@rcpt.test"]
    drain(relay_to(upstream))
    assert received_for(upstream) == ["ana@rcpt.test", "ana@rcpt.test"]
    assert statuses(account, news["transmissionId"]) == {
        "ana@rcpt.test": ["Injection", "Suppressed"]
    }


def test_the_worker_checks_again_what_it_claims(client, auth, account, upstream, relay_to):
    """An address suppressed while mail to it waits in the queue (no worker running) is not
    sent to when a worker comes; nor is queued marketing mail after an unsubscribe."""
    order = send(client, auth, ["ana@rcpt.test", "bo@rcpt.test"])
    news = send(client, auth, ["cy@rcpt.test"], optionsAttributes={"transactional": False})
    receipt = send(client, auth, ["cy@rcpt.test"])
    client.put(f"{SUPPRESSIONS}/ana@rcpt.test", json={}, headers=auth)
    client.put(f"{SUPPRESSIONS}/cy@rcpt.test", json={"reason": "unsubscribe"}, headers=auth)

    drain(relay_to(upstream))
    assert received_for(upstream) == ["bo@rcpt.test", "cy@rcpt.test"]
    assert statuses(account, order["transmissionId"]) == {
        "ana@rcpt.test": ["Injection", "Suppressed"],
        "bo@rcpt.test": ["Injection", "Delivery"],
    }
    assert statuses(account, news["transmissionId"]) == {
        "cy@rcpt.test": ["Injection", "Suppressed"]
    }
    assert statuses(account, receipt["transmissionId"]) == {
        "cy@rcpt.test": ["Injection", "Delivery"]
    }
    record = Recipient.get(Recipient.address == "ana@rcpt.test")
    assert (record.next_attempt_at, record.lease_owner) == (None, None)


def test_another_accounts_list_neither_applies_nor_shows(client, auth, upstream, relay_to):
    other = accounts.create_account("other", live=True)
    other_auth = {"Authorization": f"Bearer {accounts.create_api_key(other)[1]}"}
    client.put(f"{SUPPRESSIONS}/ana@rcpt.test", json={}, headers=other_auth)

    assert "suppressed" not in send(client, auth, ["ana@rcpt.test"])
    drain(relay_to(upstream))
    assert received_for(upstream) == ["ana@rcpt.test"]
    assert client.get(SUPPRESSIONS, headers=auth).get_json()["items"] == []
    assert client.get(f"{SUPPRESSIONS}/ana@rcpt.test", headers=auth).status_code == 404
    assert client.delete(f"{SUPPRESSIONS}/ana@rcpt.test", headers=auth).status_code == 404
    assert len(client.get(SUPPRESSIONS, headers=other_auth).get_json()["items"]) == 1


def test_an_idempotent_repeat_replays_the_suppressed_answer(client, auth):
    client.put(f"{SUPPRESSIONS}/ana@rcpt.test", json={}, headers=auth)
    body = {
        "from": {"email": "shop@sender.test"},
        "subject": "Hi",
        "to": [{"email": "ana@rcpt.test"}, {"email": "bo@rcpt.test"}],
        "bodyText": "Hi.",
    }
    keyed = {**auth, "Idempotency-Key": "order-42"}
    first = client.post(SEND, json=body, headers=keyed)
    again = client.post(SEND, json=body, headers=keyed)
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.get_json() == first.get_json()
    assert first.get_json()["suppressed"] == ["ana@rcpt.test"]
    assert Recipient.select().count() == 2


# -- one-click unsubscribe -----------------------------------------------------------------


def unsubscribe_path(received):
    header = received.message["List-Unsubscribe"]
    match = re.fullmatch(
        r"<http://127\.0\.0\.1:8000(/u/[^>]+)>, <mailto:u\+([^@>]+)@([^>]+)>", header
    )
    assert match, header
    assert match.group(1) == f"/u/{match.group(2)}"
    assert match.group(3) == "bounces.127.0.0.1"
    assert len(f"u+{match.group(2)}") <= 64  # a local part's limit
    return match.group(1)


def test_one_click_unsubscribe(client, auth, account, upstream, relay_to):
    news = send(
        client,
        auth,
        ["ana@rcpt.test", "bo@rcpt.test"],
        optionsAttributes={"transactional": False},
        headers=[{"name": "List-Unsubscribe", "value": "<https://shop.example/old>"}],
    )
    send(client, auth, ["cy@rcpt.test"])  # transactional: no such headers
    worker = relay_to(upstream)
    drain(worker)
    copies = {copy.rcpt_tos[0]: copy for copy in upstream.received}
    assert copies["cy@rcpt.test"].message["List-Unsubscribe"] is None
    for address in ("ana@rcpt.test", "bo@rcpt.test"):
        headers = copies[address].message
        assert headers.get_all("List-Unsubscribe-Post") == ["List-Unsubscribe=One-Click"]
        assert len(headers.get_all("List-Unsubscribe")) == 1  # the sender's own was replaced
    path = unsubscribe_path(copies["ana@rcpt.test"])
    assert path != unsubscribe_path(copies["bo@rcpt.test"])

    page = client.get(path)
    assert page.status_code == 200 and b"ana@rcpt.test" in page.data
    assert b'method="post"' in page.data
    assert Suppression.select().count() == 0  # looking changes nothing

    # As a mailbox provider sends it (RFC 8058): no cookie, no form token.
    for _ in range(2):
        done = client.post(
            path,
            data="List-Unsubscribe=One-Click",
            content_type="application/x-www-form-urlencoded",
        )
        assert done.status_code == 200 and "Location" not in done.headers
    (entry,) = Suppression.select()
    assert (entry.email, entry.reason) == ("ana@rcpt.test", "unsubscribe")
    assert entry.transmission_id == news["transmissionId"]
    assert statuses(account, news["transmissionId"])["ana@rcpt.test"] == [
        "Injection",
        "Delivery",
        "Unsubscribe",
    ]

    later = send(client, auth, ["ana@rcpt.test"], optionsAttributes={"transactional": False})
    assert later["suppressed"] == ["ana@rcpt.test"]
    assert "suppressed" not in send(client, auth, ["ana@rcpt.test"])


def test_tampered_or_foreign_unsubscribe_tokens_are_404(client, auth, upstream, relay_to):
    send(client, auth, ["ana@rcpt.test"], optionsAttributes={"transactional": False})
    drain(relay_to(upstream))
    path = unsubscribe_path(upstream.received[0])
    token = path.rsplit("/", 1)[1]
    rid, signature = token.split("-")
    flipped = signature[:-1] + ("a" if signature[-1] != "a" else "b")
    other_record = "0" * 26
    for bad in (f"{rid}-{flipped}", f"{other_record}-{signature}", "nonsense", rid):
        assert client.get(f"/u/{bad}").status_code == 404
        response = client.post(f"/u/{bad}", data="List-Unsubscribe=One-Click")
        assert response.status_code == 404 and "Location" not in response.headers
    assert Suppression.select().count() == 0


# -- events that add entries -----------------------------------------------------------------


def test_events_add_entries_in_their_own_transaction_on_either_path(client, auth, account):
    """``append_events`` (inside a transaction) and ``event_batches`` (committed in one go by
    ``insert_atomically``, as intake does) both list the addresses their events call for, once
    each, keeping an entry already there."""
    tid = send(client, auth, ["ana@rcpt.test", "bo@rcpt.test", "cy@rcpt.test", "dee@rcpt.test"])[
        "transmissionId"
    ]
    rid = {r.address: r.id for r in Recipient.select()}
    hard = json.dumps({"bounceClass": "hard", "reply": "550 5.1.1 unknown user"})
    soft = json.dumps({"bounceClass": "soft", "reply": "452 4.2.2 full"})
    put_before = client.put(f"{SUPPRESSIONS}/dee@rcpt.test", json={"note": "mine"}, headers=auth)
    assert put_before.status_code == 200

    insert_atomically(
        event_batches(
            [
                (rid["ana@rcpt.test"], "Bounce", 1, hard),
                (rid["ana@rcpt.test"], "Bounce", 2, hard),  # twice in one batch: one entry
                (rid["bo@rcpt.test"], "Bounce", 3, soft),
                (rid["dee@rcpt.test"], "Complaint", 4, "{}"),
            ]
        )
    )
    with write_transaction():
        append_events([(rid["cy@rcpt.test"], "Complaint", 5, "{}")])

    entries = {s.email: s for s in Suppression.select()}
    assert set(entries) == {"ana@rcpt.test", "cy@rcpt.test", "dee@rcpt.test"}
    ana = entries["ana@rcpt.test"]
    assert (ana.reason, ana.detail, ana.transmission_id) == (
        "hard_bounce",
        "550 5.1.1 unknown user",
        tid,
    )
    assert (entries["cy@rcpt.test"].reason, entries["cy@rcpt.test"].created_at) == ("complaint", 5)
    assert (entries["dee@rcpt.test"].reason, entries["dee@rcpt.test"].note) == ("manual", "mine")
    assert Event.select().count() == 5
