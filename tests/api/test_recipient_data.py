"""Per-recipient data (CONTRACT section 23): a ``to`` entry's substitutionData and metadata,
merged over the request's for that recipient alone, as the upstream, Activity and webhooks see
them."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from layang.config import Config
from layang.webhooks.dispatcher import Dispatcher
from tests.conftest import BACKENDS, drain

pytestmark = pytest.mark.parametrize("backend", BACKENDS)

TEMPLATE = {
    "id": "hello",
    "name": "Hello",
    "subject": "Hello {{name}} from {{shop}}",
    "bodyText": "Dear {{name}}, your code is {{code}}. {{shop}}",
    "bodyHtml": '<p>Dear {{name}}</p><a href="https://shop.test/c/{{code}}">Go</a>',
}


@pytest.fixture
def config(config: Config) -> Config:
    return replace(config, webhook_allow_private=True)


def send(client, auth, **fields):
    body = {"from": {"email": "shop@sender.test"}, **fields}
    return client.post("/v1/layang/transmissions", headers=auth, json=body)


def test_each_copy_is_rendered_for_its_recipient(client, auth, upstream, relay_to):
    assert client.post("/v1/layang/templates", headers=auth, json=TEMPLATE).status_code == 201
    response = send(
        client,
        auth,
        to=[
            {"email": "ana@rcpt.test", "substitutionData": {"name": "Ana", "code": "A1"}},
            {"email": "budi@rcpt.test", "substitutionData": {"name": "Budi", "code": "B2"}},
            "citra@rcpt.test",
        ],
        cc=["dewi@rcpt.test"],
        templateId="hello",
        substitutionData={"shop": "Toko", "name": "friend", "code": "none"},
        optionsAttributes={"clickTracking": True},
    )
    assert response.status_code == 200, response.get_json()
    drain(relay_to(upstream))
    by_rcpt = {m.rcpt_tos[0]: m.message for m in upstream.received}
    assert set(by_rcpt) == {"ana@rcpt.test", "budi@rcpt.test", "citra@rcpt.test", "dewi@rcpt.test"}
    expected = {
        "ana@rcpt.test": ("Ana", "A1"),
        "budi@rcpt.test": ("Budi", "B2"),
        "citra@rcpt.test": ("friend", "none"),
        "dewi@rcpt.test": ("friend", "none"),
    }
    for address, (name, code) in expected.items():
        message = by_rcpt[address]
        assert message["Subject"] == f"Hello {name} from Toko"
        text = message.get_body(("plain",)).get_content().strip()
        assert text == f"Dear {name}, your code is {code}. Toko"
        html = message.get_body(("html",)).get_content()
        assert f"Dear {name}" in html
        # Tracked: each copy's link is rewritten for its recipient.
        assert "https://shop.test/c/" not in html and "/t/c/" in html


def test_recipient_metadata_on_records_and_webhooks(client, auth, upstream, relay_to, receiver):
    hook = client.post(
        "/v1/layang/webhooks", headers=auth, json={"url": receiver.url, "events": ["*"]}
    )
    assert hook.status_code == 201, hook.get_json()
    response = send(
        client,
        auth,
        subject="Hi",
        bodyText="Hi",
        to=[{"email": "ana@rcpt.test", "metadata": {"user": 7, "order": "X"}}, "budi@rcpt.test"],
        metadata={"order": 42, "campaign": "spring"},
    )
    assert response.status_code == 200, response.get_json()
    tid = response.json["transmissionId"]
    view = client.get(f"/v1/layang/transmissions/{tid}", headers=auth).get_json()
    metadata = {r["recipient"]: r["metadata"] for r in view["recipients"]}
    assert metadata == {
        "ana@rcpt.test": {"order": "X", "campaign": "spring", "user": 7},
        "budi@rcpt.test": {"order": 42, "campaign": "spring"},
    }
    drain(relay_to(upstream))
    dispatcher = Dispatcher(client.application.config["LAYANG"], name="d0")
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and len(receiver.events()) < 4:
            dispatcher.step()
            time.sleep(0.02)
    finally:
        dispatcher.close()
    events = receiver.events()
    assert len(events) == 4
    for event in events:
        assert event["metadata"] == metadata[event["recipient"]]


def test_refusals_name_the_recipient_field(client, auth):
    response = send(
        client,
        auth,
        subject="Hi",
        bodyText="Hi",
        to=["budi@rcpt.test", {"email": "ana@rcpt.test", "substitutionData": {"a": 1}}],
    )
    assert response.status_code == 400
    assert response.json["errors"] == {
        "to": {"1": {"substitutionData": ["substitutionData needs a templateId."]}}
    }
    big = {"blob": "x" * 11000}
    response = send(
        client, auth, subject="Hi", bodyText="Hi", to=[{"email": "ana@rcpt.test", "metadata": big}]
    )
    assert response.status_code == 400
    assert "to" in response.json["errors"], response.json
    response = send(
        client,
        auth,
        subject="Hi",
        bodyText="Hi",
        metadata={"blob": "x" * 6000},
        to=[{"email": "ana@rcpt.test", "metadata": {"more": "y" * 6000}}],
    )
    assert response.status_code == 400
    assert response.json["errors"] == {
        "to.0.metadata": [response.json["errors"]["to.0.metadata"][0]]
    }
    assert "Larger than" in response.json["message"]
    # Nothing was stored by any of them.
    assert client.get("/v1/layang/activity", headers=auth).json["items"] == []
