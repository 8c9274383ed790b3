"""The smarthost is a site with a session limit shared by every process, sessions take mail only
once they are ready, and suspending a site stops its open sessions (CONTRACT section 19)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pytest

from layang.delivery import smtp
from layang.delivery.smarthost import RelayConfigError, relay_from_url
from layang.delivery.worker import Worker
from layang.destinations import sites
from layang.models import Event, Recipient
from tests.delivery.test_engine import delivered, run_worker, send_batch

SMTP_SINK = ("/usr/sbin/smtp-sink", "/usr/lib/postfix/sbin/smtp-sink")


def smtp_sink() -> str:
    for path in SMTP_SINK:
        if Path(path).exists():
            return path
    if os.environ.get("LAYANG_REQUIRE_TOOLS"):
        pytest.fail("Postfix's smtp-sink is required here (apt-get install postfix)")
    pytest.skip("Postfix's smtp-sink is not installed (apt-get install postfix)")


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_the_relay_url_sets_the_smarthosts_session_limit_and_names_its_site():
    relay = relay_from_url("smtp://Relay.Example:2525?sessions=7&tls=off")
    assert relay.sessions == 7
    assert relay.site == "relay.example:2525"
    assert relay.rule.connections == 7
    assert relay_from_url("smtp://relay.example").sessions == 50
    for bad in ("0", "-1", "x", "10001"):
        with pytest.raises(RelayConfigError, match="sessions"):
            relay_from_url(f"smtp://relay.example?sessions={bad}")


def test_two_workers_together_keep_within_the_smarthosts_session_limit(
    client, auth, config, upstream
):
    upstream.latency = 0.05
    send_batch(client, auth, 200, "shared")
    url = f"{upstream.url}&sessions=3"
    workers = [Worker(replace(config, relay_url=url, worker_connections=20)) for _ in range(2)]
    running = [run_worker(worker) for worker in workers]
    try:
        wait_until(lambda: delivered("shared") == 200, 120, "not all delivered")
    finally:
        for stop, _ in running:
            stop.set()
        for _, thread in running:
            thread.join(30)
    assert 1 <= upstream.peak_connections <= 3
    assert sites.session_counts() == {}  # every slot given back


def test_suspending_the_smarthost_stops_its_open_sessions_within_a_second(
    client, auth, config, upstream
):
    upstream.latency = 0.05  # a transaction takes about 0.25 s: the session stays busy
    send_batch(client, auth, 60, "held")
    worker = Worker(replace(config, relay_url=f"{upstream.url}&sessions=1"))
    site = relay_from_url(upstream.url).site
    stop, thread = run_worker(worker)
    try:
        wait_until(lambda: delivered("held") >= 2, 30, "nothing delivered")
        sites.suspend(site, None, "operator")
        suspended = time.monotonic()
        time.sleep(1.0)
        at_one_second = len(upstream.received)
        time.sleep(2.0)
        assert len(upstream.received) == at_one_second, "a transaction started after 1 s"
        waiting = Recipient.select().where(Recipient.address.startswith("held"))
        held = [r for r in waiting if r.status != "Delivery"]
        assert held and all(r.status == "Delay" for r in held)
        delays = Event.select().where(Event.status == "Delay")
        assert {json.loads(e.detail)["reply"] for e in delays} and all(
            "suspended" in json.loads(e.detail)["reply"] or "operator" in e.detail for e in delays
        )
        assert time.monotonic() - suspended < 10
        sites.resume(site)
        wait_until(lambda: delivered("held") == 60, 60, "resume did not release the mail")
    finally:
        stop.set()
        thread.join(30)
    counts = [a.lower() for r in upstream.received for a in r.rcpt_tos]
    assert len(counts) == len(set(counts)) == 60


@pytest.fixture
def limited_sink():
    """Postfix's smtp-sink serving at most 4 sessions at once (``-m 4``): the others wait in its
    listen queue, ungreeted, as behind any server at its process limit."""
    binary = smtp_sink()
    port = free_port()
    dumps = Path(tempfile.mkdtemp(prefix="layang-sink-"))
    dumps.chmod(0o777)  # written by the user smtp-sink runs as
    process = subprocess.Popen(
        [binary, *_as_nobody(), "-m", "4", "-d", f"{dumps}/%M.", f"127.0.0.1:{port}", "256"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_until(lambda: _accepts(port), 10, "smtp-sink did not start")
        yield port, dumps
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(10)
        shutil.rmtree(dumps, ignore_errors=True)


def _as_nobody() -> list[str]:
    # As root, smtp-sink must be told which user to run as (-u), and writes its dumps as it.
    return ["-u", "nobody"] if os.geteuid() == 0 else []


def _accepts(port: int) -> bool:
    import socket

    try:
        socket.create_connection(("127.0.0.1", port), 0.5).close()
    except OSError:
        return False
    return True


def test_mail_never_waits_on_a_session_the_server_leaves_ungreeted(
    client, auth, config, limited_sink, monkeypatch
):
    port, dumps = limited_sink
    monkeypatch.setattr(smtp, "GREETING_SECONDS", 2.0)
    send_batch(client, auth, 400, "limited")
    url = f"smtp://127.0.0.1:{port}?tls=off&sessions=30"
    worker = Worker(replace(config, relay_url=url, worker_connections=30))
    started = time.monotonic()
    stop, thread = run_worker(worker)
    site = f"127.0.0.1:{port}"
    try:
        wait_until(lambda: delivered("limited") == 400, 120, "not all delivered")
        took = time.monotonic() - started
        # Not greeted within the limit: the site's session limit comes down (AIMD, section 13).
        wait_until(
            lambda: (sites.views([site])[site].limit or 30) < 30, 20, "the limit stayed at 30"
        )
    finally:
        stop.set()
        thread.join(30)
    # The four greeted sessions carried everything while the others waited for a greeting:
    # nothing was delayed (as it was when mail was handed to a session before it was ready,
    # and waited with it until the setup timed out).
    assert Event.select().where(Event.status == "Delay").count() == 0
    assert took < 20  # not waiting for idle sessions to close, 30 s, as then
    transactions = [p for p in dumps.rglob("*") if p.is_file()]
    assert len(transactions) == 400  # each message once


def test_the_queue_lists_the_smarthost_as_a_site_with_its_mail_sessions_and_limit(
    client, auth, config, upstream
):
    from layang.domain.queue_view import site_queues

    upstream.stall()  # accepts connections, never answers: the mail waits at the smarthost
    send_batch(client, auth, 5, "waiting", domain="one.example")
    send_batch(client, auth, 5, "waiting", domain="two.example")
    worker = Worker(replace(config, relay_url=f"{upstream.url}&sessions=4"))
    site = relay_from_url(upstream.url).site
    stop, thread = run_worker(worker)
    try:

        def listed():
            rows = {row.site: row for row in site_queues()}
            row = rows.get(site)
            return row is not None and row.queued == 10 and row.sessions >= 1 and row

        wait_until(listed, 30, "the smarthost is not listed with its mail")
        row = listed()
        assert sorted(row.domains) == ["one.example", "two.example"]
        assert row.limit == 4
    finally:
        upstream.release()
        stop.set()
        thread.join(30)
