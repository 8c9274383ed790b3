"""The mailbox simulator: each simulator address gets its outcome through the normal pipeline
(intake, outbox, the worker's recording, Activity), and none of them ever reaches the relay."""

from __future__ import annotations

import json
import re
import smtplib
from dataclasses import replace
from email.message import EmailMessage
from pathlib import Path

import pytest

from layang.delivery.worker import Worker
from layang.domain import accounts
from layang.models import AuthorizedRecipient, Recipient
from layang.submission.server import submission_server
from tests.conftest import drain
from tests.delivery.test_crash import free_port
from tests.submission.test_submission import client_context

REAL = "ana@rcpt.test"
SIMULATED = [
    "success@simulator.layang.test",
    "bounce@simulator.layang.test",
    "softbounce@simulator.layang.test",
    "block@simulator.layang.test",
    "complaint@simulator.layang.test",
    "nobody@simulator.layang.test",
]
# address → (final status, the statuses of its events oldest first, bounce classes)
EXPECTED = {
    "success@simulator.layang.test": ("Delivery", ["Injection", "Delivery"], []),
    "bounce@simulator.layang.test": ("Bounce", ["Injection", "Bounce"], ["hard"]),
    "softbounce@simulator.layang.test": (
        "Delivery",
        ["Injection", "Delay", "Delivery"],
        ["soft"],
    ),
    "block@simulator.layang.test": ("Bounce", ["Injection", "Bounce"], ["block"]),
    "complaint@simulator.layang.test": ("Delivery", ["Injection", "Delivery", "Complaint"], []),
    "nobody@simulator.layang.test": ("Bounce", ["Injection", "Bounce"], ["hard"]),
}
REPLIES = {
    "success@simulator.layang.test": "250 2.0.0 simulated delivery",
    "bounce@simulator.layang.test": "550 5.1.1",
    "block@simulator.layang.test": "554 5.7.1",
    "nobody@simulator.layang.test": "550 5.1.1 <nobody@simulator.layang.test>: no such simulator",
}


def send_over_http(client, auth, sender="shop@sender.test", to=(REAL, *SIMULATED)):
    response = client.post(
        "/v1/layang/transmissions",
        headers=auth,
        json={
            "from": {"email": sender},
            "subject": "Simulated",
            "to": [{"email": address} for address in to],
            "bodyText": "Hello.",
        },
    )
    assert response.status_code == 200, response.get_json()
    return response.get_json()["transmissionId"]


def send_over_smtp(config, user, key, sender="shop@sender.test", to=(REAL, *SIMULATED)):
    server = submission_server(config)
    server.start()
    try:
        host, port = config.smtp_host_port
        with smtplib.SMTP(host, port, local_hostname="client.test", timeout=10) as smtp:
            smtp.starttls(context=client_context())
            smtp.login(user, key)
            msg = EmailMessage()
            msg["From"] = sender
            msg["To"] = ", ".join(to)
            msg["Subject"] = "Simulated"
            msg.set_content("Hello.\n")
            refused = smtp.send_message(msg, to_addrs=list(to))
            assert refused == {}
    finally:
        server.stop()
    return Recipient.get(Recipient.address == to[0]).transmission_id


def activity(client, auth, transmission_id):
    response = client.get(
        "/v1/layang/activity", query_string={"transmissionId": transmission_id}, headers=auth
    )
    assert response.status_code == 200
    return {record["recipient"]: record for record in response.get_json()["items"]}


def settled(client, auth, transmission_id):
    records = activity(client, auth, transmission_id)
    return all(record["status"] not in ("Injection", "Delay") for record in records.values())


@pytest.fixture(params=["capture", "smtp"])
def worker(request, config, upstream):
    """A worker relaying to a capture directory or to a real SMTP server."""
    relay_url = upstream.url if request.param == "smtp" else config.relay_url
    sender = Worker(replace(config, relay_url=relay_url), name="simulator-test")
    sender.mode = request.param
    yield sender
    sender.close()


def relayed(worker, config, upstream):
    """The recipients the relay was given: at the SMTP server, or captured files."""
    if worker.mode == "smtp":
        return [rcpt for received in upstream.received for rcpt in received.rcpt_tos]
    outbox = config.data_dir / "outbox"
    return [line.split(b": ", 1)[1].strip().decode() for line in _delivered_to(outbox)]


def _delivered_to(outbox):
    return [
        line
        for path in sorted(outbox.glob("*.eml"))
        for line in path.read_bytes().splitlines()
        if line.startswith(b"Delivered-To: ")
    ]


@pytest.mark.parametrize("way_in", ["http", "smtp"])
def test_each_simulator_address_gets_its_outcome_and_none_reaches_the_relay(
    client, auth, account, api_key, config, upstream, worker, way_in
):
    if way_in == "http":
        tid = send_over_http(client, auth)
    else:
        smtp_config = replace(config, smtp_bind=f"127.0.0.1:{free_port()}")
        tid = send_over_smtp(smtp_config, account.name, api_key)

    drain(worker, until=lambda: settled(client, auth, tid))

    assert relayed(worker, config, upstream) == [REAL]
    records = activity(client, auth, tid)
    assert records[REAL]["status"] == "Delivery"
    for address, (status, statuses, classes) in EXPECTED.items():
        record = records[address]
        events = record["events"]
        assert record["status"] == status, (address, events)
        assert [event["status"] for event in events] == statuses, address
        assert [e["bounceClass"] for e in events if "bounceClass" in e] == classes, address
        if address in REPLIES:
            delivery_or_bounce = events[1]
            assert delivery_or_bounce["detail"]["reply"].startswith(REPLIES[address])
    softbounce = records["softbounce@simulator.layang.test"]["events"]
    assert softbounce[1]["detail"]["reply"].startswith("451 4.2.1")
    complaint = records["complaint@simulator.layang.test"]["events"][-1]
    assert complaint["detail"]["source"] == "mailbox simulator"


def test_a_message_only_to_simulator_addresses_never_contacts_the_relay(
    client, auth, config, upstream, relay_to
):
    tid = send_over_http(client, auth, to=["success@Simulator.Layang.Test"])
    drain(relay_to(upstream), until=lambda: settled(client, auth, tid))
    assert upstream.connections == 0
    (record,) = activity(client, auth, tid).values()
    assert record["status"] == "Delivery"


@pytest.fixture
def trial(app):
    account = accounts.create_account("trial-shop")  # sandbox
    key = accounts.create_api_key(account)[1]
    return account, key


def test_a_sandbox_account_may_send_to_simulator_addresses_without_consent(
    client, config, trial, upstream, relay_to
):
    account, key = trial
    auth = {"Authorization": f"Bearer {key}"}
    tid = send_over_http(client, auth, sender=config.sandbox_sender, to=SIMULATED)
    smtp_config = replace(config, smtp_bind=f"127.0.0.1:{free_port()}")
    smtp_tid = send_over_smtp(
        smtp_config, account.name, key, sender=config.sandbox_sender, to=SIMULATED[:2]
    )
    drain(relay_to(upstream), until=lambda: settled(client, auth, tid))
    assert activity(client, auth, tid)["success@simulator.layang.test"]["status"] == "Delivery"
    assert activity(client, auth, smtp_tid)["bounce@simulator.layang.test"]["status"] == "Bounce"
    assert upstream.received == []
    assert AuthorizedRecipient.select().count() == 0


def test_the_sandbox_still_refuses_real_recipients_and_other_senders(client, config, trial):
    _, key = trial
    auth = {"Authorization": f"Bearer {key}"}
    body = {"subject": "s", "bodyText": "t"}
    mixed = client.post(
        "/v1/layang/transmissions",
        headers=auth,
        json=body
        | {
            "from": {"email": config.sandbox_sender},
            "to": [{"email": "success@simulator.layang.test"}, {"email": REAL}],
        },
    )
    assert mixed.status_code == 422
    assert mixed.get_json()["error"] == "recipient_not_authorized"
    assert REAL in mixed.get_json()["message"]
    assert "simulator" not in mixed.get_json()["message"]
    other_sender = client.post(
        "/v1/layang/transmissions",
        headers=auth,
        json=body
        | {
            "from": {"email": "shop@sender.test"},
            "to": [{"email": "success@simulator.layang.test"}],
        },
    )
    assert other_sender.status_code == 422
    assert other_sender.get_json()["error"] == "sender_not_allowed"


def test_the_readmes_example_run_again_after_clearing_shows_the_same_outcomes(client, auth, worker):
    readme = (Path(__file__).resolve().parents[2] / "docs" / "delivery.md").read_text()
    section = readme.split("## The mailbox simulator", 1)[1].split("\n## ", 1)[0]
    example = json.loads(re.search(r"-d '(\{.*?\})'", section, re.S).group(1))
    clear = re.search(r"curl -s -X DELETE \$API(/suppressions/\S+)", section).group(1)

    def run() -> dict[str, str]:
        response = client.post("/v1/layang/transmissions", headers=auth, json=example)
        assert response.status_code == 200, response.get_json()
        tid = response.get_json()["transmissionId"]
        drain(worker, until=lambda: settled(client, auth, tid))
        return {r: record["status"] for r, record in activity(client, auth, tid).items()}

    first = run()
    assert first == {
        "success@simulator.layang.test": "Delivery",
        "bounce@simulator.layang.test": "Bounce",
    }
    assert run()["bounce@simulator.layang.test"] == "Suppressed"  # as the README warns
    assert client.delete(f"/v1/layang{clear}", headers=auth).status_code == 204
    assert run() == first
