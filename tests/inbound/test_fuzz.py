"""The inbound server takes mail from anyone: no input may crash it or stop it answering."""

from __future__ import annotations

import random
import smtplib

import pytest

from layang.models import InboundMessage
from tests.inbound.test_reports import dsn, inbound  # noqa: F401 - fixture

FEEDBACK = "fbl@bounces.127.0.0.1"
VERP = "b+nobody@bounces.127.0.0.1"
GOOD = dsn(FEEDBACK, "failed", "5.1.1", "550 5.1.1 user unknown")


def _nested(depth: int) -> bytes:
    head = b"".join(
        b'Content-Type: multipart/mixed; boundary="n%d"\r\n\r\n--n%d\r\n' % (i, i)
        for i in range(depth)
    )
    tail = b"".join(b"\r\n--n%d--\r\n" % i for i in reversed(range(depth)))
    return b"Subject: nested\r\nMIME-Version: 1.0\r\n" + head + b"text\r\n" + tail


def _inputs() -> list[tuple[str, bytes]]:
    rng = random.Random(20261123)
    cases = [(f"random {n}", rng.randbytes(n)) for n in (0, 1, 17, 1000, 65536, 300_000)]
    cases += [(f"truncated at {cut}", GOOD[:cut]) for cut in range(0, len(GOOD), 97)]
    cases += [
        ("boundary never closed", GOOD.replace(b"--b1--", b"")),
        ("boundary missing", GOOD.replace(b'boundary="b1"', b"")),
        ("boundary wrong", GOOD.replace(b"--b1\r\n", b"--zz\r\n")),
        ("boundary empty", GOOD.replace(b'boundary="b1"', b'boundary=""')),
        ("report type missing", GOOD.replace(b"report-type=delivery-status;", b"")),
        (
            "status part garbage",
            GOOD.replace(b"Reporting-MTA: dns; mx.rcpt.test", b"\x00\xff\xfe:::;;;\r\n\r\n:"),
        ),
        (
            "latin-1 everywhere",
            GOOD.replace(b"Your message", "Ihre Nachricht für".encode("latin-1")),
        ),
        ("invalid utf-8 in fields", GOOD.replace(b"user unknown", b"\xc3\x28\xa0\xa1\xff")),
        ("charset bogus", GOOD.replace(b"text/plain", b"text/plain; charset=x-no-such")),
        ("one huge header", b"Subject: " + b"a" * 2_000_000 + b"\r\n\r\nbody"),
        ("ten thousand headers", b"".join(b"X-H%d: v\r\n" % i for i in range(10_000)) + b"\r\n"),
        ("header without colon", b"this is not a header\r\nnor this\r\n\r\nbody"),
        ("nested 50", _nested(50)),
        ("nested 3000", _nested(3000)),
        (
            "report inside a report",
            b"Content-Type: multipart/report; report-type=feedback-report; boundary=a\r\n\r\n"
            b"--a\r\nContent-Type: message/feedback-report\r\n\r\n--a\r\n"
            b"Content-Type: message/rfc822\r\n\r\n" + GOOD + b"\r\n--a--\r\n",
        ),
        ("base64 broken", b"Content-Transfer-Encoding: base64\r\n\r\n!!!not base64===\r\n"),
        ("lone dots and CRs", b"\r\r\r.\r\n..\r\n.\r\r\n\n\n"),
    ]
    return cases


INPUTS = _inputs()


@pytest.mark.parametrize("rcpt", [FEEDBACK, VERP], ids=["feedback", "verp"])
def test_any_input_is_answered_and_the_server_keeps_answering(inbound, rcpt):  # noqa: F811
    if rcpt == VERP:
        # Only a signed address of a live record is accepted: a made-up one is refused early,
        # however the message would have looked.
        with smtplib.SMTP(inbound.hostname, inbound.port, local_hostname="fuzz.test") as smtp:
            smtp.ehlo()
            smtp.mail("")
            assert smtp.rcpt(rcpt)[0] == 550
        return
    accepted = 0
    for name, data in INPUTS:
        with smtplib.SMTP(inbound.hostname, inbound.port, local_hostname="fuzz.test") as smtp:
            smtp.ehlo()
            smtp.mail("")
            assert smtp.rcpt(rcpt)[0] == 250, name
            code, reply = smtp.data(data)
            # A line over SMTP's 1,000 characters is refused as RFC 5321 allows; all else taken.
            assert code == 250 or (code, reply[:18]) == (500, b"Line too long (see"), name
            accepted += code == 250
            assert smtp.noop()[0] == 250, name
    assert accepted >= len(INPUTS) - 6
    # Nothing above was a readable report about an email of ours: each was kept.
    assert InboundMessage.select().count() == accepted
