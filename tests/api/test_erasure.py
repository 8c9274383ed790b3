"""Erasing a recipient (GDPR art. 17): everything one account holds about the address goes, the
suppression entry only when asked, other accounts keep theirs, the audit log names a hash."""

from __future__ import annotations

import hashlib
import json

import pytest

from layang.domain import accounts
from layang.models import (
    AuditEntry,
    Event,
    Recipient,
    Suppression,
    Transmission,
    WebhookEndpoint,
    WebhookEvent,
)
from tests.conftest import BACKENDS, drain
from tests.lifecycle.test_retention import activity, layang, send

pytestmark = pytest.mark.parametrize("backend", BACKENDS)


@pytest.fixture
def other_auth(app):
    other = accounts.create_account("other", live=True)
    return {"Authorization": f"Bearer {accounts.create_api_key(other)[1]}"}


def _suppress(client, auth, email):
    answer = client.put(f"/v1/layang/suppressions/{email}", json={}, headers=auth)
    assert answer.status_code == 200


def test_erasing_removes_the_accounts_records_of_the_address_and_nothing_else(
    client, auth, account, other_auth, upstream, relay_to
):
    WebhookEndpoint.create(account=account, url="https://hooks.test/", events="*", secret=b"x")
    only_ana = send(client, auth, ["ana@rcpt.test"], subject="For Ana")
    send(client, auth, ["ana@rcpt.test"], subject="Again for Ana")
    shared = send(client, auth, ["Ana@Rcpt.test", "bo@rcpt.test"], subject="For both")
    theirs = send(client, other_auth, ["ana@rcpt.test"], subject="Other account")
    drain(relay_to(upstream))
    _suppress(client, auth, "ana@rcpt.test")
    _suppress(client, other_auth, "ana@rcpt.test")
    ana_ids = [r.id for r in Recipient.select().where(Recipient.address ** "ana@rcpt.test")]
    assert WebhookEvent.select().where(WebhookEvent.recipient_id.in_(ana_ids)).count() > 0

    answer = client.delete("/v1/layang/recipients/ANA@rcpt.test", headers=auth)
    assert answer.status_code == 200, answer.get_json()
    assert answer.get_json() == {"email": "ana@rcpt.test", "records": 3, "events": 3, "messages": 2}

    assert set(activity(client, auth)) == {"bo@rcpt.test"}
    assert Transmission.get_or_none(Transmission.id == only_ana) is None
    assert Transmission.get_by_id(shared).payload is not None  # bo's message stays
    assert not WebhookEvent.select().where(WebhookEvent.recipient_id.in_(ana_ids[:3])).exists()
    # The other account still has its record, events, message and suppression entry.
    assert set(activity(client, other_auth)) == {"ana@rcpt.test"}
    assert Transmission.get_by_id(theirs).payload is not None
    assert Event.select().join(Recipient).where(Recipient.transmission == theirs).count() == 1
    assert (
        client.get("/v1/layang/suppressions/ana@rcpt.test", headers=other_auth).status_code == 200
    )
    # The suppression entry stays unless asked: it keeps the person from being mailed.
    assert client.get("/v1/layang/suppressions/ana@rcpt.test", headers=auth).status_code == 200

    again = client.delete("/v1/layang/recipients/ana@rcpt.test?suppression=true", headers=auth)
    assert again.get_json() == {"email": "ana@rcpt.test", "records": 0, "events": 0, "messages": 0}
    assert client.get("/v1/layang/suppressions/ana@rcpt.test", headers=auth).status_code == 404
    assert Suppression.select().count() == 1

    # The audit log names the erasure by the address's hash, never the address.
    entries = list(AuditEntry.select().where(AuditEntry.action == "recipient.erased"))
    digest = hashlib.sha256(b"ana@rcpt.test").hexdigest()
    assert [(e.account_id, e.target, e.actor[:4]) for e in entries] == [
        (account.id, digest, "key:"),
        (account.id, digest, "key:"),
    ]
    assert json.loads(entries[0].detail)["records"] == 3
    every_entry = json.dumps([e.__data__ for e in AuditEntry.select()])
    assert "ana@" not in every_entry.lower()


def test_queued_mail_to_the_address_is_erased_and_never_sent(client, auth, upstream, relay_to):
    send(client, auth, ["ana@rcpt.test"])
    answer = client.delete("/v1/layang/recipients/ana@rcpt.test", headers=auth)
    assert answer.get_json()["records"] == 1
    drain(relay_to(upstream))
    assert upstream.received == []


@pytest.mark.parametrize("email", ["not-an-address", "ana@", "@rcpt.test"])
def test_a_bad_address_is_refused_naming_the_field(client, auth, email):
    answer = client.delete(f"/v1/layang/recipients/{email}", headers=auth)
    assert answer.status_code == 400
    body = answer.get_json()
    assert body["error"] == "validation_failed" and body["message"].startswith("email: ")
    assert AuditEntry.select().count() == 0


def test_a_read_key_may_not_erase(client, account):
    reader = accounts.create_api_key(account, scope="read")[1]
    answer = client.delete(
        "/v1/layang/recipients/ana@rcpt.test", headers={"Authorization": f"Bearer {reader}"}
    )
    assert answer.status_code == 403


def test_the_cli_erases_in_the_named_account(client, auth, other_auth, config, upstream, relay_to):
    send(client, auth, ["ana@rcpt.test"])
    send(client, other_auth, ["ana@rcpt.test"])
    drain(relay_to(upstream))
    code, out, err = layang(config, "recipients", "erase", "ana@rcpt.test", "--account", "acme")
    assert code == 0, err
    assert json.loads(out) == {"email": "ana@rcpt.test", "records": 1, "events": 1, "messages": 1}
    assert activity(client, auth) == {}
    assert set(activity(client, other_auth)) == {"ana@rcpt.test"}
    entry = AuditEntry.get(AuditEntry.action == "recipient.erased")
    assert (entry.actor, entry.source) == ("system", "cli")
    code, _, err = layang(config, "recipients", "erase", "ana", "--account", "acme")
    assert code == 1 and '"email"' in err
