"""Tags (CONTRACT section 23): on a send (API ``tags``, SMTP ``X-Layang-Tag:``), on every
record and webhook event, the Activity filter, and the overview's figures per tag kept by the
database's triggers, on SQLite and PostgreSQL."""

from __future__ import annotations

import smtplib
import time
from dataclasses import replace

import pytest

from layang.config import Config
from layang.domain import overview
from layang.domain.accounts import create_account, create_api_key
from layang.models import AuthorizedRecipient
from layang.submission.server import submission_server
from layang.webhooks.dispatcher import Dispatcher
from tests.conftest import BACKENDS, drain
from tests.delivery.test_crash import free_port
from tests.submission.test_submission import SANDBOX_SENDER, client_context

pytestmark = pytest.mark.parametrize("backend", BACKENDS)


@pytest.fixture
def config(config: Config) -> Config:
    return replace(config, webhook_allow_private=True, smtp_bind=f"127.0.0.1:{free_port()}")


def send(client, auth, to="ana@rcpt.test", **fields):
    body = {"from": "shop@sender.test", "subject": "Hi", "bodyText": "Hi", "to": to, **fields}
    return client.post("/v1/layang/transmissions", headers=auth, json=body)


def test_tags_are_checked_and_name_the_field(client, auth):
    too_many = send(client, auth, tags=[f"t{n}" for n in range(11)])
    assert too_many.status_code == 400
    assert too_many.json["errors"] == {"tags": ["At most 10 tags."]}
    for bad, index in ((["ok", ""], "1"), (["x" * 65], "0"), (["a\nb"], "0")):
        response = send(client, auth, tags=bad)
        assert response.status_code == 400, bad
        assert list(response.json["errors"]["tags"]) == [index], response.json
        assert response.json["message"].startswith(f"tags.{index}:"), response.json
    not_strings = send(client, auth, tags=[1])
    assert not_strings.status_code == 400 and "tags" in not_strings.json["errors"]
    assert client.get("/v1/layang/activity", headers=auth).json["items"] == []
    exact = send(client, auth, tags=["x" * 64, "ünïcode tag"])
    assert exact.status_code == 200, exact.json


def test_records_filter_and_webhook_events_carry_the_tags(
    client, auth, upstream, relay_to, receiver
):
    hook = client.post(
        "/v1/layang/webhooks", headers=auth, json={"url": receiver.url, "events": ["*"]}
    )
    assert hook.status_code == 201, hook.json
    welcome = send(client, auth, ["ana@rcpt.test", "budi@rcpt.test"], tags=["welcome", "a", "a"])
    receipt = send(client, auth, "citra@rcpt.test", tags=["receipt"])
    plain = send(client, auth, "dewi@rcpt.test")
    assert {welcome.status_code, receipt.status_code, plain.status_code} == {200}
    # Another account's mail with the same tag stays its own.
    other = create_account("other", live=True)
    other_auth = {"Authorization": f"Bearer {create_api_key(other)[1]}"}
    assert send(client, other_auth, "eko@rcpt.test", tags=["welcome"]).status_code == 200

    tid = welcome.json["transmissionId"]
    view = client.get(f"/v1/layang/transmissions/{tid}", headers=auth).json
    assert [r["tags"] for r in view["recipients"]] == [["welcome", "a"]] * 2
    tagged = client.get("/v1/layang/activity?tag=welcome", headers=auth).json["items"]
    assert sorted(r["recipient"] for r in tagged) == ["ana@rcpt.test", "budi@rcpt.test"]
    receipts = client.get("/v1/layang/activity", headers=auth, query_string={"tag": "receipt"})
    assert [r["recipient"] for r in receipts.json["items"]] == ["citra@rcpt.test"]
    everything = client.get("/v1/layang/activity", headers=auth).json["items"]
    assert {r["recipient"]: r["tags"] for r in everything}["dewi@rcpt.test"] == []
    assert client.get("/v1/layang/activity?tag=", headers=auth).status_code == 400

    drain(relay_to(upstream))
    dispatcher = Dispatcher(client.application.config["LAYANG"], name="d0")
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and len(receiver.events()) < 8:
            dispatcher.step()
            time.sleep(0.02)
    finally:
        dispatcher.close()
    tags = {(e["recipient"], e["type"]): e["tags"] for e in receiver.events()}
    assert tags[("ana@rcpt.test", "Delivery")] == ["welcome", "a"]
    assert tags[("citra@rcpt.test", "Injection")] == ["receipt"]
    assert tags[("dewi@rcpt.test", "Delivery")] == []


def test_overview_counts_per_tag(client, auth, account, upstream, relay_to):
    upstream.script_rcpt("gone@rcpt.test", "550 5.1.1 <gone@rcpt.test>: no such user")
    send(client, auth, ["ana@rcpt.test", "gone@rcpt.test"], tags=["welcome", "spring"])
    send(client, auth, "budi@rcpt.test", tags=["spring"])
    send(client, auth, "citra@rcpt.test")
    drain(relay_to(upstream))
    figures = {f.tag: f for f in overview.tag_figures(account, overview.PERIODS["24h"])}
    assert list(figures) == ["spring", "welcome"]  # busiest first
    spring, welcome = figures["spring"], figures["welcome"]
    assert (spring.sent, spring.delivered, spring.bounced) == (3, 2, 1)
    assert (welcome.sent, welcome.delivered, welcome.bounced) == (2, 1, 1)


@pytest.fixture
def smtpd(app, config):
    controller = submission_server(config)
    controller.start()
    yield controller
    controller.stop()


def test_smtp_tags_are_kept_and_removed_before_relay(client, config, smtpd, upstream, relay_to):
    account = create_account("smtp-shop")
    key = create_api_key(account)[1]
    AuthorizedRecipient.create(
        account=account, email="ana@rcpt.test", email_key="ana@rcpt.test", status="verified"
    )
    host, port = config.smtp_host_port
    data = (
        f"From: Shop <{SANDBOX_SENDER}>\r\nTo: ana@rcpt.test\r\nSubject: Tagged\r\n"
        "X-Layang-Tag: welcome\r\nX-Layang-Tag:  spring \r\nX-Layang-Tag: welcome\r\n"
        "\r\nHello.\r\n"
    ).encode()
    with smtplib.SMTP(host, port, local_hostname="client.test", timeout=10) as smtp:
        smtp.starttls(context=client_context())
        smtp.login(account.name, key)
        smtp.sendmail(SANDBOX_SENDER, ["ana@rcpt.test"], data)
        bad = data.replace(b"X-Layang-Tag: welcome", b"X-Layang-Tag: " + b"w" * 65, 1)
        with pytest.raises(smtplib.SMTPDataError) as refused:
            smtp.sendmail(SANDBOX_SENDER, ["ana@rcpt.test"], bad)
        assert refused.value.smtp_code // 100 == 5
        assert b"X-Layang-Tag" in refused.value.smtp_error
    drain(relay_to(upstream))
    (received,) = upstream.received
    assert b"X-Layang-Tag" not in received.data and b"spring" not in received.data
    auth = {"Authorization": f"Bearer {key}"}
    (record,) = client.get("/v1/layang/activity", headers=auth).json["items"]
    assert record["tags"] == ["welcome", "spring"]
