"""Idempotency keys and the rate limit hold across processes (docs/api.md): real `layang serve`
processes with several gunicorn workers and a real `layang smtpd`, on SQLite and PostgreSQL,
hit at once by many clients."""

from __future__ import annotations

import concurrent.futures
import smtplib
import socket
import time
from email.message import EmailMessage

import httpx
import pytest

from layang.domain import accounts
from layang.models import Transmission
from tests.conftest import BACKENDS
from tests.delivery.test_crash import _healthy, free_port, process_env, start, stop, wait_until
from tests.submission.test_submission import client_context

pytestmark = pytest.mark.parametrize("backend", BACKENDS)

LIMIT = 40
URL = "/v1/layang/transmissions"


def body(subject):
    return {
        "from": {"email": "shop@sender.test"},
        "subject": subject,
        "to": [{"email": "ana@rcpt.test"}],
        "bodyText": "x",
    }


@pytest.fixture
def services(config, app, tmp_path):
    """Two `layang serve` processes of 3 workers each and one `layang smtpd`, one database."""
    ports = [free_port(), free_port()]
    smtp_port = free_port()
    env = process_env(
        config,
        LAYANG_HTTP_WORKERS=3,
        LAYANG_HTTP_THREADS=4,
        LAYANG_RATE_LIMIT=f"{LIMIT}/min",
        LAYANG_SMTP_BIND=f"127.0.0.1:{smtp_port}",
    )
    processes = [
        start(["serve"], {**env, "LAYANG_HTTP_BIND": f"127.0.0.1:{port}"}, tmp_path / "api.log")
        for port in ports
    ]
    processes.append(start(["smtpd"], env, tmp_path / "smtpd.log"))
    try:
        for port in ports:
            wait_until(lambda port=port: _healthy(port), 30, "the API did not come up")
        wait_until(lambda: _listening(smtp_port), 30, "the SMTP server did not come up")
        yield [f"http://127.0.0.1:{port}" for port in ports], smtp_port
    finally:
        for process in processes:
            stop(process)


def _listening(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def test_concurrent_duplicates_across_processes_store_one_message(services):
    bases, _ = services
    key = accounts.create_api_key(accounts.create_account("dup", live=True))[1]
    headers = {"Authorization": f"Bearer {key}", "Idempotency-Key": "reset-password-ana"}

    def attempt(n):
        with httpx.Client(base_url=bases[n % 2], timeout=30) as http:
            response = http.post(URL, json=body("Reset"), headers=headers)
            return response.status_code, response.json()

    with concurrent.futures.ThreadPoolExecutor(24) as pool:
        answers = list(pool.map(attempt, range(72)))
    (stored,) = Transmission.select().where(Transmission.subject == "Reset")
    for status, answer in answers:
        assert (status, answer) == (200, {"transmissionId": stored.id}) or (
            status == 409 and answer["error"] == "idempotency_in_flight"
        ), (status, answer)
    # Once the first is answered every repeat is a replay, whichever process it reaches.
    for n in range(4):
        assert attempt(n) == (200, {"transmissionId": stored.id})


def smtp_submit(port, account_name, key, n):
    smtp = smtplib.SMTP("127.0.0.1", port, local_hostname="client.test", timeout=30)
    try:
        smtp.starttls(context=client_context())
        smtp.login(account_name, key)
        msg = EmailMessage()
        msg["From"] = "shop@sender.test"
        msg["To"] = "ana@rcpt.test"
        msg["Subject"] = f"smtp-{n}"
        msg.set_content("x")
        smtp.mail("shop@sender.test")
        smtp.rcpt("ana@rcpt.test")
        return smtp.data(msg.as_bytes())[0]
    finally:
        smtp.quit()


def test_the_rate_limit_holds_across_processes_and_smtp(services):
    bases, smtp_port = services
    account = accounts.create_account("busy", live=True)
    key = accounts.create_api_key(account)[1]
    auth = {"Authorization": f"Bearer {key}"}
    # The limit is per fixed minute: run the burst inside one.
    if time.time() % 60 > 30:
        time.sleep(60.5 - time.time() % 60)
    started = time.time()

    def over_http(n):
        with httpx.Client(base_url=bases[n % 2], timeout=30) as http:
            return http.post(URL, json=body(f"http-{n}"), headers=auth).status_code

    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        # SMTP first: its TLS handshake makes it the slower way in.
        smtp_calls = [pool.submit(smtp_submit, smtp_port, account.name, key, n) for n in range(20)]
        http_calls = [pool.submit(over_http, n) for n in range(60)]
        http_codes = [call.result() for call in http_calls]
        smtp_codes = [call.result() for call in smtp_calls]
    assert time.time() // 60 == started // 60, "the burst crossed a window boundary"

    assert set(http_codes) <= {200, 429} and set(smtp_codes) <= {250, 451}
    accepted = http_codes.count(200) + smtp_codes.count(250)
    assert accepted == LIMIT, (http_codes, smtp_codes)
    assert Transmission.select().where(Transmission.account == account.id).count() == LIMIT
    assert smtp_codes.count(250) > 0 and http_codes.count(200) > 0
