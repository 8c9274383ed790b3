"""The sandbox: authorized recipients, the consent flow end to end, and the sending rules."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from layang.clock import now_ms
from layang.domain import accounts
from layang.models import AuthorizedRecipient, Recipient, Transmission
from tests.conftest import drain

RECIPIENTS = "/v1/layang/sandbox/authorized-recipients"
SANDBOX_SENDER = "sandbox@sandbox.layang.test"


@pytest.fixture
def sandbox(app):
    account = accounts.create_account("trial-shop")
    return {"Authorization": f"Bearer {accounts.create_api_key(account)[1]}"}


class FormParser(HTMLParser):
    def __init__(self):
        super().__init__()
        self.forms, self.buttons, self.text = [], [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "form":
            self.forms.append(
                {"action": attrs.get("action"), "method": attrs.get("method"), "fields": {}}
            )
        elif tag == "input" and self.forms:
            self.forms[-1]["fields"][attrs.get("name")] = attrs.get("value", "")

    def handle_data(self, data):
        self.text.append(data)


def parse(html):
    parser = FormParser()
    parser.feed(html)
    return parser


def add(client, auth, email, **extra):
    response = client.post(RECIPIENTS, json={"email": email, **extra}, headers=auth)
    assert response.status_code == 201, response.get_json()
    return response.get_json()


def consent_link(upstream, address):
    for received in reversed(upstream.received):
        if address in received.rcpt_tos:
            text = received.message.get_body(("plain",)).get_content()
            return re.search(r"http://127\.0\.0\.1:8000(/consent/\S+)", text).group(1)
    raise AssertionError(f"no verification email to {address}")


def send(client, auth, to, sender=SANDBOX_SENDER, **extra):
    return client.post(
        "/v1/layang/transmissions",
        headers=auth,
        json={
            "from": {"email": sender},
            "subject": "Test",
            "bodyText": "hi",
            "to": [{"email": a} for a in to],
            **extra,
        },
    )


def test_consent_flow_end_to_end(client, sandbox, upstream, relay_to):
    created = add(client, sandbox, "ana@rcpt.test", name="Ana")
    assert created["status"] == "unverified" and created["verifiedAt"] is None
    assert created["email"] == "ana@rcpt.test" and created["name"] == "Ana"
    drain(relay_to(upstream))

    (mail,) = upstream.received
    assert mail.mail_from.startswith("b+")  # the consent email has a VERP return path too
    assert mail.message["From"].addresses[0].addr_spec == SANDBOX_SENDER
    assert mail.rcpt_tos == ["ana@rcpt.test"]
    assert "trial-shop" in mail.message["Subject"]
    link = consent_link(upstream, "ana@rcpt.test")

    # The verification email went through the normal pipeline: it is in Activity.
    activity = client.get("/v1/layang/activity", headers=sandbox).get_json()["items"]
    assert [(r["recipient"], r["status"]) for r in activity] == [("ana@rcpt.test", "Delivery")]
    assert activity[0]["metadata"]["purpose"] == "sandbox-verification"

    # GET shows the request and changes nothing (scanners and previewers open links).
    for _ in range(2):
        page = client.get(link)
        assert page.status_code == 200
        assert page.headers["X-Frame-Options"] == "DENY"
        assert "frame-ancestors 'none'" in page.headers["Content-Security-Policy"]
    html = page.get_data(as_text=True)
    assert "trial-shop" in html and "Give Consent" in html
    recipient_url = f"{RECIPIENTS}/{created['id']}"
    assert client.get(recipient_url, headers=sandbox).get_json()["status"] == "unverified"

    form = parse(html).forms[0]
    assert form["method"] == "post"
    assert client.post(form["action"], data={}).status_code == 400  # no CSRF token
    assert client.post(form["action"], data={"csrf_token": "forged"}).status_code == 400
    assert client.get(recipient_url, headers=sandbox).get_json()["status"] == "unverified"

    done = client.post(form["action"], data=form["fields"])
    assert done.status_code == 200
    assert "You have given consent" in done.get_data(as_text=True)
    record = client.get(recipient_url, headers=sandbox).get_json()
    assert record["status"] == "verified" and record["verifiedAt"]

    # Single use: the link is spent.
    reused = client.get(link)
    assert reused.status_code == 404
    assert "not valid any more" in reused.get_data(as_text=True)
    assert client.post(form["action"], data=form["fields"]).status_code == 404

    # Now the sandbox account may send to Ana, and the mail arrives.
    response = send(client, sandbox, ["ana@rcpt.test"])
    assert response.status_code == 200
    drain(relay_to(upstream))
    assert upstream.received[-1].message["Subject"] == "Test"


def test_tokens_are_unguessable_and_stored_hashed(client, sandbox, upstream, relay_to):
    add(client, sandbox, "ana@rcpt.test")
    drain(relay_to(upstream))
    token = consent_link(upstream, "ana@rcpt.test").rsplit("/", 1)[1]
    assert len(token) >= 22  # ≥ 128 bits in URL-safe Base64
    stored = AuthorizedRecipient.get()
    assert token not in (stored.token_hash, stored.id)
    assert client.get("/consent/" + token[:-2] + "xx").status_code == 404


def test_expired_token_is_refused(client, sandbox, upstream, relay_to):
    add(client, sandbox, "ana@rcpt.test")
    drain(relay_to(upstream))
    link = consent_link(upstream, "ana@rcpt.test")
    AuthorizedRecipient.update(token_expires_at=now_ms() - 1).execute()
    assert client.get(link).status_code == 404


def test_resend_invalidates_the_previous_link(client, sandbox, upstream, relay_to):
    created = add(client, sandbox, "ana@rcpt.test")
    drain(relay_to(upstream))
    first = consent_link(upstream, "ana@rcpt.test")
    response = client.post(f"{RECIPIENTS}/{created['id']}/resend", headers=sandbox)
    assert response.status_code == 202
    assert response.get_json()["transmissionId"]
    drain(relay_to(upstream))
    second = consent_link(upstream, "ana@rcpt.test")
    assert first != second
    assert client.get(first).status_code == 404
    assert client.get(second).status_code == 200


def test_resend_after_consent_is_a_conflict(client, sandbox, upstream, relay_to):
    created = add(client, sandbox, "ana@rcpt.test")
    drain(relay_to(upstream))
    form = parse(client.get(consent_link(upstream, "ana@rcpt.test")).get_data(as_text=True))
    client.post(form.forms[0]["action"], data=form.forms[0]["fields"])
    response = client.post(f"{RECIPIENTS}/{created['id']}/resend", headers=sandbox)
    assert response.status_code == 409
    assert response.get_json()["error"] == "conflict"


def test_list_get_delete_and_duplicates(client, sandbox):
    a = add(client, sandbox, "a@rcpt.test")
    add(client, sandbox, "b@rcpt.test")
    duplicate = client.post(RECIPIENTS, json={"email": "A@rcpt.test"}, headers=sandbox)
    assert duplicate.status_code == 409
    assert duplicate.get_json()["error"] == "conflict"
    listed = client.get(RECIPIENTS, headers=sandbox).get_json()
    assert [r["email"] for r in listed["items"]] == ["b@rcpt.test", "a@rcpt.test"]
    assert listed["nextCursor"] is None
    page = client.get(RECIPIENTS, query_string={"limit": 1}, headers=sandbox).get_json()
    assert len(page["items"]) == 1 and page["nextCursor"]
    assert client.delete(f"{RECIPIENTS}/{a['id']}", headers=sandbox).status_code == 204
    assert client.get(f"{RECIPIENTS}/{a['id']}", headers=sandbox).status_code == 404
    bad = client.post(RECIPIENTS, json={"email": "nope"}, headers=sandbox)
    assert bad.status_code == 400 and "email" in bad.get_json()["errors"]


def test_sandbox_rules_refuse_and_queue_nothing(client, sandbox, upstream, relay_to):
    add(client, sandbox, "ana@rcpt.test")
    drain(relay_to(upstream))
    transmissions = Transmission.select().count()

    unverified = send(client, sandbox, ["ana@rcpt.test"])
    assert unverified.status_code == 422
    body = unverified.get_json()
    assert body["error"] == "recipient_not_authorized"
    assert "ana@rcpt.test" in body["message"]

    form = parse(client.get(consent_link(upstream, "ana@rcpt.test")).get_data(as_text=True))
    client.post(form.forms[0]["action"], data=form.forms[0]["fields"])

    mixed = send(
        client,
        sandbox,
        ["ana@rcpt.test"],
        cc=[{"email": "x@rcpt.test"}],
        bcc=[{"email": "y@rcpt.test"}],
    )
    assert mixed.status_code == 422
    body = mixed.get_json()
    assert "x@rcpt.test" in body["message"] and "y@rcpt.test" in body["message"]
    assert "ana@rcpt.test" not in body["message"]
    assert set(body["errors"]) == {"cc", "bcc"}

    sender = send(client, sandbox, ["ana@rcpt.test"], sender="me@shop.test")
    assert sender.status_code == 422
    assert sender.get_json()["error"] == "sender_not_allowed"
    assert Transmission.select().count() == transmissions

    assert send(client, sandbox, ["ANA@rcpt.test"]).status_code == 200


def test_live_accounts_are_not_restricted(client, auth):
    assert send(client, auth, ["anyone@rcpt.test"], sender="me@shop.test").status_code == 200


def test_accounts_cannot_see_each_others_recipients(client, sandbox, auth):
    created = add(client, sandbox, "ana@rcpt.test")
    assert client.get(f"{RECIPIENTS}/{created['id']}", headers=auth).status_code == 404
    assert client.delete(f"{RECIPIENTS}/{created['id']}", headers=auth).status_code == 404
    assert client.post(f"{RECIPIENTS}/{created['id']}/resend", headers=auth).status_code == 404
    assert client.get(RECIPIENTS, headers=auth).get_json()["items"] == []


def test_deleted_recipient_can_no_longer_receive(client, sandbox, upstream, relay_to):
    created = add(client, sandbox, "ana@rcpt.test")
    drain(relay_to(upstream))
    form = parse(client.get(consent_link(upstream, "ana@rcpt.test")).get_data(as_text=True))
    client.post(form.forms[0]["action"], data=form.forms[0]["fields"])
    assert send(client, sandbox, ["ana@rcpt.test"]).status_code == 200
    client.delete(f"{RECIPIENTS}/{created['id']}", headers=sandbox)
    assert send(client, sandbox, ["ana@rcpt.test"]).status_code == 422
    assert Recipient.select().where(Recipient.address == "ana@rcpt.test").count() == 2
