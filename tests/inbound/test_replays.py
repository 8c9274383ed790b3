"""A report counts once per email, however many copies of it come back.

Anyone can mail a report again (a provider's retries, a forwarder, a stranger replaying it to
the VERP address): each copy, and each other form of the same news (a DSN after a provider's
own notice, a bounce after the synchronous one), must not add a second complaint or hard
bounce to the activity, the suppression list, the circuit breaker's counters or the overview.
Real SMTP to a real inbound server, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import smtplib
import threading
from email.message import EmailMessage

import peewee
import pytest

from layang.models import ActivityCount, BreakerCount
from tests.conftest import BACKENDS
from tests.inbound.test_reports import (
    QMAIL,
    RECIPIENT,
    arf,
    deliver,
    dsn,
    inbound,
    record,
    send_and_relay,
)

__all__ = ["inbound"]  # the fixture, used by name

pytestmark = pytest.mark.parametrize("backend", BACKENDS)


def breaker_counts(account) -> tuple[int, int]:
    """(hard bounces, complaints) the breaker counts for the account, account-wide."""
    hard, complaints = (
        BreakerCount.select(
            peewee.fn.COALESCE(peewee.fn.SUM(BreakerCount.hard_bounces), 0),
            peewee.fn.COALESCE(peewee.fn.SUM(BreakerCount.complaints), 0),
        )
        .where((BreakerCount.account == account.id) & (BreakerCount.domain == ""))
        .tuples()
        .first()
    )
    return int(hard), int(complaints)


def overview_count(account, kind: str) -> int:
    total = (
        ActivityCount.select(peewee.fn.COALESCE(peewee.fn.SUM(ActivityCount.count), 0))
        .where((ActivityCount.account == account.id) & (ActivityCount.kind == kind))
        .scalar()
    )
    return int(total)


def statuses(client, auth, record_id: str) -> list[str]:
    return [event["status"] for event in record(client, auth, record_id)["events"]]


def deliver_at_once(server, rcpt: str, data: bytes, copies: int) -> None:
    """``copies`` sessions delivering ``data`` together, as a replay would."""
    errors: list[BaseException] = []

    def one() -> None:
        try:
            deliver(server, rcpt, data)
        except (OSError, smtplib.SMTPException) as error:
            errors.append(error)

    threads = [threading.Thread(target=one) for _ in range(copies)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors


def test_a_complaint_replayed_to_its_verp_address_counts_once(
    client, auth, upstream, relay_to, inbound, account
):
    record_id, verp = send_and_relay(client, auth, upstream, relay_to)
    complaint = arf(f"Return-Path: <{verp}>\r\n", verp)
    deliver(inbound, verp, complaint)
    deliver_at_once(inbound, verp, complaint, copies=3)
    # The same complaint by the feedback mailbox, found by the original's Return-Path.
    deliver(inbound, "fbl@bounces.127.0.0.1", complaint)

    assert statuses(client, auth, record_id) == ["Injection", "Delivery", "Complaint"]
    assert breaker_counts(account) == (0, 1)
    assert overview_count(account, "Complaint") == 1
    entries = client.get("/v1/layang/suppressions", headers=auth).get_json()["items"]
    assert [(e["email"], e["reason"]) for e in entries] == [(RECIPIENT, "complaint")]


def test_a_bounce_in_any_form_counts_once(client, auth, upstream, relay_to, inbound, account):
    record_id, verp = send_and_relay(client, auth, upstream, relay_to)
    report = dsn(verp, "failed", "5.1.1", "550 5.1.1 No such user")
    deliver(inbound, verp, report)
    deliver_at_once(inbound, verp, report, copies=3)
    # The same news in a provider's own words (a qmail notice), and a late delay notice.
    notice = EmailMessage()
    notice["From"] = "MAILER-DAEMON@mx.rcpt.test"
    notice["To"] = verp
    notice["Subject"] = "failure notice"
    notice.set_content(QMAIL)
    deliver(inbound, verp, notice.as_bytes())
    deliver(inbound, verp, dsn(verp, "delayed", "4.2.2", "452 4.2.2 Mailbox full"))

    assert statuses(client, auth, record_id) == ["Injection", "Delivery", "Bounce"]
    assert breaker_counts(account) == (1, 0)
    assert overview_count(account, "Bounce:hard") == 1
    entries = client.get("/v1/layang/suppressions", headers=auth).get_json()["items"]
    assert [(e["email"], e["reason"]) for e in entries] == [(RECIPIENT, "hard_bounce")]


def test_an_auto_reply_replayed_is_recorded_once(client, auth, upstream, relay_to, inbound):
    record_id, verp = send_and_relay(client, auth, upstream, relay_to)
    reply = EmailMessage()
    reply["From"] = RECIPIENT
    reply["To"] = verp
    reply["Subject"] = "Out of office"
    reply["Auto-Submitted"] = "auto-replied"
    reply.set_content("Back on Monday.")
    for _ in range(3):
        deliver(inbound, verp, reply.as_bytes())
    assert statuses(client, auth, record_id) == ["Injection", "Delivery", "AutoReply"]
