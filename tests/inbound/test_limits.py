"""What one inbound message may cost: its MIME shape is measured before parsing, its parse is
bounded in CPU time away from the server's event loop, and unreadable mail is kept only so
long and so much."""

from __future__ import annotations

import smtplib
import socket
import threading
import time
from dataclasses import replace

import pytest

from layang.clock import now_ms
from layang.domain.feedback import DeliveryReport, Unrecognised, list_unrecognised
from layang.inbound.parsing import ReportReader
from layang.inbound.reports import read_report
from layang.inbound.server import inbound_server
from layang.models import InboundMessage
from tests.conftest import BACKENDS
from tests.delivery.test_crash import free_port
from tests.inbound.test_fuzz import FEEDBACK, GOOD, _nested

MIB = 1024 * 1024


def mime_bomb(parts: int = 50_000) -> bytes:
    body = b"".join(b"--x\r\nContent-Type: text/plain\r\n\r\nhi\r\n" for _ in range(parts))
    return (
        b"From: someone@example.net\r\nSubject: many parts\r\nMIME-Version: 1.0\r\n"
        b'Content-Type: multipart/mixed; boundary="x"\r\n\r\n' + body + b"--x--\r\n"
    )


def multipart(parts: int) -> bytes:
    """A message of ``parts`` MIME parts in all, itself included."""
    return mime_bomb(parts - 1)


@pytest.fixture
def inbound_config(config):
    return replace(config, inbound_bind=f"127.0.0.1:{free_port()}")


@pytest.fixture
def server(app, inbound_config):
    controller = inbound_server(inbound_config)
    controller.start()
    yield controller
    controller.stop()


def deliver(server, data: bytes) -> None:
    with smtplib.SMTP(server.hostname, server.port, local_hostname="mx.test", timeout=60) as smtp:
        smtp.sendmail("", [FEEDBACK], data)


def test_more_than_100_parts_or_10_levels_is_kept_unparsed():
    assert read_report(multipart(100)).reason == "not a delivery status or feedback report"
    assert "more than 100 MIME parts" in read_report(multipart(101)).reason
    assert "nested more than 10 levels" in read_report(_nested(11)).reason
    assert "nested" not in read_report(_nested(10)).reason
    # A report nested in attached messages counts their levels too.
    attached = GOOD
    for _ in range(11):
        attached = b"Content-Type: message/rfc822\r\n\r\n" + attached
    assert "nested more than 10 levels" in read_report(attached).reason
    assert isinstance(read_report(GOOD), DeliveryReport)


def test_a_parse_is_stopped_once_it_used_its_cpu_time():
    reader = ReportReader(processes=1, cpu_seconds=0.05)
    try:
        slow = b"Subject: long\r\n\r\n" + b"a line of text\r\n" * 1_500_000
        report = reader.read(slow)
        assert isinstance(report, Unrecognised)
        assert "more than 0.05 s of CPU" in report.reason
        # The same child goes on reading the next message.
        assert isinstance(reader.read(GOOD), DeliveryReport)
    finally:
        reader.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_mime_bombs_in_parallel_do_not_hold_the_server(server):
    bomb = mime_bomb()
    assert len(bomb) > 1_800_000
    errors: list[BaseException] = []

    def send() -> None:
        try:
            deliver(server, bomb)
        except BaseException as error:  # reported below, from the test's thread
            errors.append(error)

    started = time.monotonic()
    senders = [threading.Thread(target=send) for _ in range(6)]
    for sender in senders:
        sender.start()
    # Meanwhile the server greets a new client at once.
    with socket.create_connection((server.hostname, server.port), timeout=5) as probe:
        greeted = time.monotonic()
        assert probe.recv(100).startswith(b"220")
        assert time.monotonic() - greeted < 2
    for sender in senders:
        sender.join(timeout=120)
    elapsed = time.monotonic() - started
    assert not errors, errors
    # Before the limits, these six took about a minute of CPU.
    assert elapsed < 30, f"six MIME bombs took {elapsed:.1f} s"
    kept = list_unrecognised(limit=10)
    assert len(kept) == 6
    assert all("more than 100 MIME parts" in entry.reason for entry in kept)


@pytest.mark.parametrize("backend", BACKENDS)
def test_unreadable_mail_is_kept_only_so_long_and_so_much(app, inbound_config):
    controller = inbound_server(replace(inbound_config, inbound_keep_mb=1, inbound_keep_days=7))
    controller.start()
    try:
        week_old = now_ms() - 8 * 86_400_000
        InboundMessage.create(
            received_at=week_old, mail_from="", rcpt_to="[]", size=1, raw=b"x", reason="old"
        )
        junk = b"Subject: junk\r\n\r\n" + (b"j" * 998 + b"\r\n") * 300
        for number in range(6):
            deliver(controller, junk.replace(b"junk", b"junk%d" % number))
            # Enforced as each message is kept, not later.
            stored = sum(len(bytes(row.raw)) for row in InboundMessage.select())
            assert stored <= 1 * MIB, stored
    finally:
        controller.stop()
    kept = list_unrecognised(limit=10)
    assert "old" not in [entry.reason for entry in kept]  # past LAYANG_INBOUND_KEEP_DAYS
    subjects = [entry.raw.split(b"\r\n", 1)[0] for entry in kept]
    # The oldest went first: what is left is the newest, as many as fit.
    assert subjects == [b"Subject: junk%d" % n for n in range(5, 5 - len(kept), -1)]
    assert len(kept) == 4  # 256 KiB kept of each
