"""Over SMTP as over the API (docs/api.md): an ``Idempotency-Key`` header stores a message once,
the rate limit counts SMTP and API messages together, and a read key cannot log in."""

from __future__ import annotations

import smtplib
from dataclasses import replace

import pytest

from layang.config import RateLimit
from layang.domain import accounts
from layang.models import Transmission
from layang.submission.server import submission_server
from tests.conftest import drain
from tests.submission import test_submission as submission
from tests.submission.test_submission import SANDBOX_SENDER, connect, message

# The submission tests' fixtures, shared.
smtp_config = submission.smtp_config
server = submission.server
trial = submission.trial


@pytest.fixture
def limited_config(smtp_config):
    return replace(smtp_config, rate_limit=RateLimit(3, 3600))


@pytest.fixture
def limited_server(app, limited_config):
    controller = submission_server(limited_config)
    controller.start()
    yield controller
    controller.stop()


def submit(smtp, msg):
    smtp.mail(SANDBOX_SENDER)
    smtp.rcpt("ana@rcpt.test")
    return smtp.data(msg.as_bytes())


def test_a_repeat_with_the_same_key_gets_the_first_id(
    server, smtp_config, trial, upstream, relay_to
):
    account, key = trial
    smtp = connect(smtp_config)
    smtp.login(account.name, key)
    msg = message(Idempotency_Key="reset-ana-1")
    first = submit(smtp, msg)
    again = submit(smtp, msg)
    smtp.quit()
    assert first[0] == again[0] == 250
    assert first[1].startswith(b"2.0.0 OK queued as ")
    assert again[1] == first[1]
    (stored,) = Transmission.select()
    assert b"Idempotency-Key" not in bytes(stored.raw)

    drain(relay_to(upstream))
    (received,) = upstream.received
    assert received.message["Idempotency-Key"] is None
    assert received.message["Subject"] == "Submitted over SMTP"


def test_the_same_key_on_another_message_is_refused(server, smtp_config, trial):
    account, key = trial
    smtp = connect(smtp_config)
    smtp.login(account.name, key)
    assert submit(smtp, message(Idempotency_Key="k1"))[0] == 250
    code, reply = submit(smtp, message(Idempotency_Key="k1", subject="Another"))
    smtp.quit()
    assert code == 554 and reply.startswith(b"5.7.0")
    assert Transmission.select().count() == 1


def test_a_read_key_cannot_log_in_and_a_send_key_can(server, smtp_config, trial):
    account, _ = trial
    read_key = accounts.create_api_key(account, scope="read")[1]
    send_key = accounts.create_api_key(account, scope="send")[1]
    smtp = connect(smtp_config)
    with pytest.raises(smtplib.SMTPAuthenticationError) as refused:
        smtp.login(account.name, read_key)
    assert refused.value.smtp_code == 535
    smtp.quit()
    smtp = connect(smtp_config)
    smtp.login(account.name, send_key)
    assert submit(smtp, message())[0] == 250
    smtp.quit()


def test_smtp_and_api_share_the_rate_limit(limited_server, limited_config, trial, app):
    account, key = trial
    app.config["LAYANG"] = limited_config
    auth = {"Authorization": f"Bearer {key}"}
    with app.test_client() as client:
        sent = client.post(
            "/v1/layang/transmissions",
            headers=auth,
            json={
                "from": {"email": SANDBOX_SENDER},
                "subject": "API",
                "to": [{"email": "ana@rcpt.test"}],
                "bodyText": "x",
            },
        )
        assert sent.status_code == 200
        assert sent.headers["RateLimit-Remaining"] == "2"
    smtp = connect(limited_config)
    smtp.login(account.name, key)
    assert submit(smtp, message())[0] == 250
    repeat = message(Idempotency_Key="once")
    assert submit(smtp, repeat)[0] == 250
    code, reply = submit(smtp, message())
    assert (code, reply[:5]) == (451, b"4.7.1")
    # A repeat is answered, not counted: it is still accepted over the limit.
    assert submit(smtp, repeat)[0] == 250
    smtp.quit()
    assert Transmission.select().count() == 3
