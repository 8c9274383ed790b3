"""REQUIRETLS (RFC 8689) from the API and SMTP submission to today's smarthost relay, and the
``TLS-Required: No`` header: real STARTTLS with a local CA trusted through LAYANG_TLS_CAFILE."""

from __future__ import annotations

import json
import smtplib
from dataclasses import replace
from pathlib import Path

import pytest

from layang.domain import accounts
from layang.models import Event, Recipient, Transmission
from layang.submission.server import submission_server, take_requiretls
from tests.conftest import drain
from tests.delivery.test_crash import free_port
from tests.submission.test_submission import client_context
from tests.support.tls_pki import LocalCA
from tests.support.upstream import Upstream, make_self_signed_cert, server_tls_context


@pytest.fixture
def ca(tmp_path: Path) -> LocalCA:
    return LocalCA(tmp_path / "ca")


def send(client, auth, *, options=None, headers=None, to="ana@rcpt.test"):
    body = {
        "from": {"email": "shop@sender.test"},
        "to": [{"email": to}],
        "subject": "Your code",
        "bodyText": "The code is 4711.",
    }
    if options is not None:
        body["optionsAttributes"] = options
    if headers is not None:
        body["headers"] = headers
    return client.post("/v1/layang/transmissions", json=body, headers=auth)


def last_event(status: str) -> dict:
    event = Event.select().where(Event.status == status).order_by(Event.id.desc()).get()
    return json.loads(event.detail)


def smarthost(ca: LocalCA, *, requiretls: bool, name: str = "127.0.0.1") -> Upstream:
    return Upstream(tls_context=ca.server_context(name), requiretls=requiretls)


def test_requiretls_message_goes_with_the_parameter(client, auth, config, ca, relay_to):
    response = send(client, auth, options={"requireTls": True})
    assert response.status_code == 200, response.json
    assert Transmission.get().tls_requirement == "requiretls"
    with smarthost(ca, requiretls=True) as server:
        drain(relay_to(server, tls_cafile=str(ca.cafile)))
        (received,) = server.wait_for(1)
        assert received.tls is True
        assert [verb for verb, _ in server.attempts if verb == "REQUIRETLS"] == ["REQUIRETLS"]
    assert Recipient.get().status == "Delivery"


def test_an_ordinary_message_does_not_ask_for_requiretls(client, auth, ca, relay_to):
    send(client, auth)
    assert Transmission.get().tls_requirement is None
    with smarthost(ca, requiretls=True) as server:
        drain(relay_to(server, tls_cafile=str(ca.cafile)))
        assert len(server.wait_for(1)) == 1
        assert "REQUIRETLS" not in [verb for verb, _ in server.attempts]


def test_a_smarthost_without_requiretls_bounces_the_message(client, auth, ca, relay_to):
    send(client, auth, options={"requireTls": True})
    with smarthost(ca, requiretls=False) as server:
        drain(relay_to(server, tls_cafile=str(ca.cafile)))
        assert server.received == []
        assert "MAIL" not in [verb for verb, _ in server.attempts]
    assert Recipient.get().status == "Bounce"
    detail = last_event("Bounce")
    assert detail["reply"].startswith("550 5.7.30 REQUIRETLS is not supported by 127.0.0.1:")
    assert detail["code"] == 550 and detail["bounceClass"] == "block"


def test_a_certificate_that_is_not_verified_bounces_a_requiretls_message(
    client, auth, tmp_path, relay_to
):
    send(client, auth, options={"requireTls": True})
    context = server_tls_context(*make_self_signed_cert(tmp_path / "self", "127.0.0.1"))
    with Upstream(tls_context=context, requiretls=True) as server:
        drain(relay_to(server))
        assert server.received == []
    detail = last_event("Bounce")
    assert detail["reply"].startswith("550 5.7.30 REQUIRETLS needs a verified certificate")


def test_a_plaintext_smarthost_bounces_a_requiretls_message(client, auth, upstream, relay_to):
    send(client, auth, options={"requireTls": True})
    drain(relay_to(upstream))
    assert upstream.received == []
    assert "not encrypted" in last_event("Bounce")["reply"]


def test_tls_required_no_is_stored(client, auth):
    send(client, auth, headers=[{"name": "TLS-Required", "value": "No"}])
    assert Transmission.get().tls_requirement == "optional"


def test_requiretls_outranks_tls_required_no(client, auth):
    send(
        client,
        auth,
        options={"requireTls": True},
        headers=[{"name": "TLS-Required", "value": "No"}],
    )
    assert Transmission.get().tls_requirement == "requiretls"


def test_require_tls_must_be_a_boolean(client, auth):
    response = send(client, auth, options={"requireTls": "always"})
    assert response.status_code == 400
    assert "requireTls" in json.dumps(response.json)


# -- SMTP submission ----------------------------------------------------------------------


@pytest.fixture
def submission(app, config):
    smtp_config = replace(config, smtp_bind=f"127.0.0.1:{free_port()}")
    controller = submission_server(smtp_config)
    controller.start()
    yield smtp_config
    controller.stop()


def open_session(smtp_config, tls: bool) -> smtplib.SMTP:
    host, port = smtp_config.smtp_host_port
    smtp = smtplib.SMTP(host, port, local_hostname="client.test", timeout=10)
    smtp.ehlo()
    if tls:
        smtp.starttls(context=client_context())
        smtp.ehlo()
    return smtp


MESSAGE = b"From: shop@sender.test\r\nTo: ana@rcpt.test\r\nSubject: Code\r\n\r\n4711\r\n"


def test_submission_offers_requiretls_only_after_starttls(submission):
    smtp = open_session(submission, tls=False)
    assert not smtp.has_extn("requiretls")
    smtp.starttls(context=client_context())
    smtp.ehlo()
    assert smtp.has_extn("requiretls")
    smtp.quit()


def test_submission_stores_the_requiretls_parameter(submission):
    account = accounts.create_account("shop", live=True)
    key = accounts.create_api_key(account)[1]
    smtp = open_session(submission, tls=True)
    smtp.login("shop", key)
    smtp.sendmail("shop@sender.test", ["ana@rcpt.test"], MESSAGE, mail_options=["REQUIRETLS"])
    smtp.sendmail("shop@sender.test", ["bob@rcpt.test"], b"TLS-Required: No\r\n" + MESSAGE)
    smtp.quit()
    stored = {
        r.address: r.transmission.tls_requirement for r in Recipient.select().join(Transmission)
    }
    assert stored == {"ana@rcpt.test": "requiretls", "bob@rcpt.test": "optional"}


def test_requiretls_parameter_is_recognised_in_mail_arguments():
    assert take_requiretls("FROM:<a@b.test> SIZE=10 REQUIRETLS") == (
        "FROM:<a@b.test> SIZE=10",
        True,
    )
    assert take_requiretls("FROM:<a@b.test> requiretls BODY=8BITMIME") == (
        "FROM:<a@b.test> BODY=8BITMIME",
        True,
    )
    assert take_requiretls("FROM:<requiretls@b.test>") == ("FROM:<requiretls@b.test>", False)
