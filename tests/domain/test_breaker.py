"""The reputation circuit breaker (docs/api.md): the mailbox simulator's bounce and complaint
addresses at volume trip it, through real `layang serve` (two of them), `layang smtpd` and
`layang worker` processes on one database; a paused account's broadcast mail is refused over
HTTP (422) and SMTP (550 5.7.1), its transactional mail still goes out, webhooks hear a
`Warning`, and `layang accounts resume` lifts it."""

from __future__ import annotations

import functools
import json
import re
import smtplib
import subprocess
import sys
import time
from dataclasses import replace
from email.message import EmailMessage

import httpx
import pytest

from layang.domain import accounts, breaker
from layang.domain.errors import SendingPaused
from layang.models import BreakerState, Recipient, Transmission, WebhookEvent
from tests.conftest import BACKENDS, drain
from tests.delivery.test_crash import (
    ROOT,
    _healthy,
    free_port,
    process_env,
    start,
    stop,
    wait_until,
    wait_while_running,
)
from tests.submission.test_submission import client_context
from tests.test_processes_share_keys_and_limits import _listening

pytestmark = pytest.mark.parametrize("backend", BACKENDS)

URL = "/v1/layang/transmissions"
SIM = "simulator.layang.test"
MIN_MESSAGES = 40


def body(sender, to, stream=None, subject="News"):
    sent = {
        "from": {"email": sender},
        "subject": subject,
        "to": [{"email": address} for address in to],
        "bodyText": "Hello.",
    }
    if stream:
        sent["optionsAttributes"] = {"stream": stream}
    return sent


def addresses(mailbox, count, start=0):
    return [f"{mailbox}+{n}@{SIM}" for n in range(start, start + count)]


# -- in one process: per domain and per account ------------------------------------------------


@pytest.fixture
def config(config):
    return replace(config, breaker_min_messages=20)


def test_a_bouncing_domain_is_paused_while_the_account_is_only_warned(
    client, auth, upstream, relay_to, account
):
    # a.test: 5 hard bounces in 20 (25 %); b.test: 60 clean. The account: 5 in 80 (6.25 %).
    to_a = addresses("success", 15) + addresses("bounce", 5)
    assert client.post(URL, headers=auth, json=body("shop@a.test", to_a)).status_code == 200
    clean = addresses("success", 60, start=100)
    assert client.post(URL, headers=auth, json=body("news@b.test", clean)).status_code == 200
    worker = relay_to(upstream)
    drain(worker)
    time.sleep(breaker.CACHE_SECONDS)

    refused = client.post(URL, headers=auth, json=body("shop@a.test", [f"x@{SIM}"], "broadcast"))
    assert refused.status_code == 422
    answer = refused.get_json()
    assert answer["error"] == "sending_paused"
    assert answer["message"].startswith(
        "Sending is paused for the domain a.test: hard-bounce rate 25 % (5 of 20 messages in "
        "24 h) is at or above the 10 % pause threshold."
    )
    # The account as a whole is only warned: its other domain's broadcast goes out.
    other = client.post(URL, headers=auth, json=body("news@b.test", [f"y@{SIM}"], "broadcast"))
    assert other.status_code == 200
    # transactional: false is the broadcast stream too; transactional mail is not paused.
    legacy = body("shop@a.test", [f"z@{SIM}"])
    legacy["optionsAttributes"] = {"transactional": False}
    assert client.post(URL, headers=auth, json=legacy).status_code == 422
    reset = client.post(URL, headers=auth, json=body("shop@a.test", [f"success@{SIM}"]))
    assert reset.status_code == 200
    levels = {s.domain: breaker.LEVEL_NAMES[s.level] for s in BreakerState.select()}
    assert levels == {"": "warning", "a.test": "paused"}

    assert breaker.resume(account) == 2
    time.sleep(breaker.CACHE_SECONDS)
    again = client.post(URL, headers=auth, json=body("shop@a.test", [f"x@{SIM}"], "broadcast"))
    assert again.status_code == 200


def test_below_the_minimum_volume_no_rate_trips_it(client, auth, upstream, relay_to):
    to = addresses("bounce", 19)  # every one bounces, but 19 < LAYANG_BREAKER_MIN_MESSAGES
    assert client.post(URL, headers=auth, json=body("shop@a.test", to)).status_code == 200
    drain(relay_to(upstream))
    time.sleep(breaker.CACHE_SECONDS)
    sent = client.post(URL, headers=auth, json=body("shop@a.test", [f"x@{SIM}"], "broadcast"))
    assert sent.status_code == 200
    assert BreakerState.select().count() == 0


def test_with_pause_transactional_a_paused_account_sends_nothing(
    client, auth, upstream, relay_to, account, config
):
    to = addresses("success", 16) + addresses("bounce", 4)
    assert client.post(URL, headers=auth, json=body("shop@a.test", to)).status_code == 200
    drain(relay_to(upstream))
    time.sleep(breaker.CACHE_SECONDS)
    reset = body("shop@a.test", [f"s@{SIM}"], "transactional")
    assert client.post(URL, headers=auth, json=reset).status_code == 200
    strict = replace(config, pause_transactional=True)
    with pytest.raises(SendingPaused, match="hard-bounce rate 20 %"):
        breaker.check_sending(account, "a.test", "transactional", strict)


def test_a_reported_bounce_that_crosses_the_threshold_warns_at_once(
    client, auth, upstream, relay_to, config
):
    # The account sends its 20 messages, all delivered, and then nothing more: the bounce
    # reports that come in later must raise the Warning themselves.
    from layang.domain.feedback import DeliveryReport, Mailbox, RecipientStatus, record_inbound
    from layang.mail.return_path import ReturnPaths

    hook = {"url": "https://hooks.rcpt.test/layang", "events": ["Warning"]}
    assert client.post("/v1/layang/webhooks", headers=auth, json=hook).status_code == 201
    to = addresses("success", 20)
    assert client.post(URL, headers=auth, json=body("shop@a.test", to)).status_code == 200
    drain(relay_to(upstream))
    assert BreakerState.select().count() == 0

    report = DeliveryReport(
        reported_by="mx.rcpt.test",
        statuses=(RecipientStatus("failed", "5.1.1", "550 5.1.1 No such user"),),
    )
    paths = ReturnPaths(config.secret_key, config.bounce_domain)
    for record in Recipient.select().limit(1):
        record_inbound(report, [Mailbox("b+x@bounces.test", record.id)], "", b"", paths, config)

    levels = {s.domain: breaker.LEVEL_NAMES[s.level] for s in BreakerState.select()}
    assert levels == {"": "warning", "a.test": "warning"}  # 1 of 20: 5 %
    warnings = [
        json.loads(e.detail) for e in WebhookEvent.select().where(WebhookEvent.status == "Warning")
    ]
    assert sorted((w["scope"], w["level"], w["hardBounces"]) for w in warnings) == [
        ("account", "warning", 1),
        ("domain", "warning", 1),
    ]


def test_a_delivery_batch_that_crosses_the_threshold_warns_at_once(
    client, auth, upstream, relay_to, config
):
    # 19 delivered and 1 hard bounce from the server itself (the simulator's 550), then
    # nothing more is sent: recording the batch must raise the Warning, not a later send.
    from layang.mail.breaker_levels import judge_recorded

    hook = {"url": "https://hooks.rcpt.test/layang", "events": ["Warning"]}
    assert client.post("/v1/layang/webhooks", headers=auth, json=hook).status_code == 201
    to = addresses("success", 19) + addresses("bounce", 1)
    assert client.post(URL, headers=auth, json=body("shop@a.test", to)).status_code == 200
    drain(relay_to(upstream))
    levels = {s.domain: breaker.LEVEL_NAMES[s.level] for s in BreakerState.select()}
    assert levels == {"": "warning", "a.test": "warning"}  # 1 of 20: 5 %
    warnings = [
        json.loads(e.detail) for e in WebhookEvent.select().where(WebhookEvent.status == "Warning")
    ]
    assert sorted((w["scope"], w["level"]) for w in warnings) == [
        ("account", "warning"),
        ("domain", "warning"),
    ]
    recorded = [(r.id, r.status) for r in Recipient.select()]
    assert judge_recorded(recorded, config) == []  # raised once


def test_a_bad_stream_is_named(client, auth):
    bad = body("shop@a.test", [f"x@{SIM}"], "marketing")
    answer = client.post(URL, headers=auth, json=bad)
    assert answer.status_code == 400
    assert "optionsAttributes" in answer.get_json()["errors"]
    both = body("shop@a.test", [f"x@{SIM}"], "transactional")
    both["optionsAttributes"]["transactional"] = False
    answer = client.post(URL, headers=auth, json=both)
    assert answer.status_code == 400
    assert answer.get_json()["errors"] == {
        "optionsAttributes": {
            "stream": ["transactional: false is the broadcast stream; give one or the other."]
        }
    }


# -- across processes: two API processes, SMTP and a worker ------------------------------------


@pytest.fixture
def services(config, app, tmp_path):
    """Two `layang serve` processes, one `layang smtpd` and one `layang worker`."""
    ports = [free_port(), free_port()]
    smtp_port = free_port()
    env = process_env(
        config,
        LAYANG_HTTP_WORKERS=2,
        LAYANG_HTTP_THREADS=4,
        LAYANG_SMTP_BIND=f"127.0.0.1:{smtp_port}",
        LAYANG_BREAKER_MIN_MESSAGES=MIN_MESSAGES,
        LAYANG_WEBHOOK_ALLOW_PRIVATE="true",
        LAYANG_WEBHOOK_RETRY_SCHEDULE="1,1,2",
    )
    logs = [tmp_path / f"api{n}.log" for n in range(len(ports))]
    processes = [
        start(["serve"], {**env, "LAYANG_HTTP_BIND": f"127.0.0.1:{port}"}, log)
        for port, log in zip(ports, logs, strict=True)
    ]
    processes.append(start(["smtpd"], env, tmp_path / "smtpd.log"))
    processes.append(start(["worker"], env, tmp_path / "worker.log"))
    try:
        # On a loaded machine a process starts slowly: wait as long as it runs.
        for port, process, log in zip(ports, processes, logs, strict=False):
            up = functools.partial(_healthy, port)
            wait_while_running(up, process, log, "the API did not come up")
        smtpd = functools.partial(_listening, smtp_port)
        wait_while_running(smtpd, processes[2], tmp_path / "smtpd.log", "no SMTP server")
        yield [f"http://127.0.0.1:{port}" for port in ports], smtp_port, env
    finally:
        for process in processes:
            stop(process)


def smtp_send(port, account, key, recipient, stream=None, subject="News"):
    """One message over SMTP; returns (code, reply text)."""
    message = EmailMessage()
    message["From"] = "shop@sender.test"
    message["To"] = recipient
    message["Subject"] = subject
    if stream:
        message["X-Layang-Stream"] = stream
    message.set_content("Hello.")
    with smtplib.SMTP("127.0.0.1", port, local_hostname="client.test", timeout=30) as smtp:
        smtp.starttls(context=client_context())
        smtp.login(account, key)
        try:
            smtp.sendmail("shop@sender.test", [recipient], message.as_bytes())
        except smtplib.SMTPDataError as error:
            return error.smtp_code, error.smtp_error.decode()
    return 250, ""


def all_recorded(account):
    waiting = Recipient.select().where(
        (Recipient.account == account.id) & (Recipient.status == "Injection")
    )
    return not waiting.exists()


def refused_within(send, timeout=30):
    """Send until the breaker refuses (it takes effect within seconds); returns the answer."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        answer = send()
        if answer[0] not in (200, 250):
            return answer
        time.sleep(0.3)
    raise AssertionError("the breaker never refused")


def resume(env, name):
    result = subprocess.run(
        [sys.executable, "-m", "layang", "accounts", "resume", name],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_bounces_at_volume_pause_broadcast_over_http_and_smtp_across_processes(services, receiver):
    bases, smtp_port, env = services
    account = accounts.create_account("bulk", live=True)
    key = accounts.create_api_key(account)[1]
    headers = {"Authorization": f"Bearer {key}"}
    hook = httpx.post(
        f"{bases[0]}/v1/layang/webhooks",
        headers=headers,
        json={"url": receiver.url, "events": ["Warning"]},
    )
    assert hook.status_code == 201, hook.text

    # 42 messages, one recipient each, through both API processes: 6 hard bounces. They are
    # transactional, which the breaker counts but never stops, so all of them are accepted.
    recipients = addresses("success", 36) + addresses("bounce", 6)
    for n, recipient in enumerate(recipients):
        sent = httpx.post(
            bases[n % 2] + URL,
            headers=headers,
            json=body("shop@sender.test", [recipient]),
        )
        assert sent.status_code == 200, sent.text
    wait_until(lambda: all_recorded(account), 60, "the worker did not record every message")

    def http_broadcast(n=[0]):
        n[0] += 1
        answer = httpx.post(
            bases[n[0] % 2] + URL,
            headers=headers,
            json=body("shop@sender.test", [f"success+late@{SIM}"], "broadcast"),
        )
        return answer.status_code, answer.json()

    status, answer = refused_within(http_broadcast)
    assert status == 422
    assert answer["error"] == "sending_paused"
    # The rate as it stood when a send first found it over the threshold.
    assert re.search(
        r"hard-bounce rate [\d.]+ % \([4-6] of 4\d messages in 24 h\)", answer["message"]
    )
    # Account and domain trip together; the first refusal names whichever of the two the
    # process judged last (each standing is cached on its own), both are right.
    assert "this account" in answer["message"] or "the domain sender.test" in answer["message"]
    # Both API processes refuse, each once its cache (CACHE_SECONDS) lets the pause through; the
    # deadlines here only bound a loaded machine.
    for base in bases:
        wait_until(
            lambda base=base: (
                httpx.post(
                    base + URL,
                    headers=headers,
                    json=body("shop@sender.test", [f"success+l@{SIM}"], "broadcast"),
                ).status_code
                == 422
            ),
            30,
            "an API process still accepts broadcast mail",
        )
    code, reply = refused_within(
        lambda: smtp_send(smtp_port, "bulk", key, f"success+late@{SIM}", stream="broadcast")
    )
    assert code == 550 and reply.startswith("5.7.1 Sending is paused for this account")

    # Transactional mail still goes out, over both ways in.
    reset = httpx.post(
        bases[1] + URL,
        headers=headers,
        json=body("shop@sender.test", [f"success@{SIM}"], subject="Reset"),
    )
    assert reset.status_code == 200, reset.text
    assert smtp_send(smtp_port, "bulk", key, f"success+smtp@{SIM}", subject="Code")[0] == 250
    tid = reset.json()["transmissionId"]
    wait_until(
        lambda: Recipient.get(Recipient.transmission == tid).status == "Delivery",
        30,
        "the transactional message was not delivered",
    )

    # Webhooks hear a Warning once per level reached, naming the rate. The account and its one
    # From domain trip together here. Warning events name no recipient, so nothing orders their
    # requests (docs/api.md): they are compared in the order recorded, once each has arrived.
    def recorded_warnings():
        rows = WebhookEvent.select().where(WebhookEvent.status == "Warning")
        return [(row.event_id, json.loads(row.detail)) for row in rows.order_by(WebhookEvent.id)]

    def every_warning_heard():
        recorded = recorded_warnings()
        received = {e["id"] for e in receiver.events() if e["type"] == "Warning"}
        paused = {d["scope"] for _, d in recorded if d["level"] == "paused"}
        return paused == {"account", "domain"} and {i for i, _ in recorded} <= received

    wait_until(every_warning_heard, 60, "a paused Warning was not recorded or not delivered")
    recorded = recorded_warnings()
    received = {e["id"]: e for e in receiver.events() if e["type"] == "Warning"}
    assert set(received) == {event_id for event_id, _ in recorded}
    for scope, domain in (("account", None), ("domain", "sender.test")):
        levels = [d["level"] for _, d in recorded if d["scope"] == scope]
        assert levels in (["paused"], ["warning", "paused"]), (scope, levels)
        paused = next(
            received[event_id]["detail"]
            for event_id, d in recorded
            if d["scope"] == scope and d["level"] == "paused"
        )
        assert paused["domain"] == domain and paused["reason"].startswith("hard-bounce rate")
        assert paused["hardBounces"] >= 4 and paused["messages"] >= 40

    assert resume(env, "bulk")["lifted"] >= 1
    wait_until(
        lambda: all(
            httpx.post(
                base + URL,
                headers=headers,
                json=body("shop@sender.test", [f"success+r@{SIM}"], "broadcast"),
            ).status_code
            == 200
            for base in bases
        ),
        30,
        "resume did not lift the pause",
    )


def test_complaints_at_volume_pause_broadcast_submitted_over_smtp(services):
    bases, smtp_port, _ = services
    account = accounts.create_account("news", live=True)
    key = accounts.create_api_key(account)[1]
    # A broadcast message over SMTP is kept as one.
    assert smtp_send(smtp_port, "news", key, f"success@{SIM}", stream="Broadcast")[0] == 250
    assert Transmission.get(Transmission.account == account.id).stream == "broadcast"
    # 40 more messages over SMTP, one complaint: 2.5 %, over the 0.5 % pause threshold.
    for recipient in addresses("success", 39) + addresses("complaint", 1):
        assert smtp_send(smtp_port, "news", key, recipient)[0] == 250
    wait_until(lambda: all_recorded(account), 60, "the worker did not record every message")
    code, reply = refused_within(
        lambda: smtp_send(smtp_port, "news", key, f"success+late@{SIM}", stream="broadcast")
    )
    assert code == 550
    assert re.search(r"complaint rate [\d.]+ % \(1 of 4\d messages in 24 h\)", reply)
    answer = httpx.post(
        bases[0] + URL,
        headers={"Authorization": f"Bearer {key}"},
        json=body("shop@sender.test", [f"success+late@{SIM}"], "broadcast"),
    )
    assert answer.status_code == 422 and answer.json()["error"] == "sending_paused"
    # A bad stream header is a clear refusal, not a silent default.
    code, reply = smtp_send(smtp_port, "news", key, f"x@{SIM}", stream="marketing")
    assert code == 554 and "X-Layang-Stream" in reply
