"""What a report must show before an address is suppressed, and the verdicts reporting systems
state themselves: inputs of our own, beyond the corpus's examples of each kind."""

from __future__ import annotations

import pytest

from layang.domain.feedback import DeliveryReport, RecipientStatus, bounce_class
from layang.inbound.reports import read_report


def judged(status: str, diagnostic: str, told: str = "") -> str:
    return bounce_class(RecipientStatus("failed", status, diagnostic, "ana@b.example", told))


@pytest.mark.parametrize(
    ("status", "diagnostic", "told", "expected"),
    [
        # Unknown-user words of no command, no code and no named address: a relay's summary
        # or a filter's mask, never a suppression.
        ("5.0.0", "", "ana@b.example [User unknown]", "block"),
        ("5.0.0", "Recipient Not Found", "", "block"),
        ("5.0.0", "", "ana@b.example Invalid Address, ERROR_CODE :550", "block"),
        ("5.0.0", "", "<ana@b.example>:\nThis user doesn't have a b.example account", "block"),
        # ... and with any of what shows the address itself refused, hard.
        ("5.0.0", "550 ana@b.example... No such user", "", "hard"),
        ("5.0.0", "", "Unknown user: ana@b.example", "hard"),
        ("5.0.0", "", "<ana@b.example>:\n550: <ana@b.example>: User unknown", "hard"),
        ("5.0.0", "550 Recipient Not Found", "SMTP:RCPT host 192.0.2.8: 550", "hard"),
        ("5.0.0", "", "Remote host said: 550 Recipient Not Found\n[RCPT_TO]", "hard"),
        ("5.0.0", "550 sorry, no such mailbox", "mx.b.example did not like our RCPT TO:", "hard"),
        (
            "5.0.0",
            "554 delivery error: dd This user doesn't have a ymail.com account",
            "",
            "hard",
        ),
        (
            "5.0.0",
            "",
            "ana@b.example on 1/2/03\n  Unknown Recipient\n  MSEXCH:IMS (000C05A6)",
            "hard",
        ),
        # the domain itself is gone: the reporting MTA's own lookup decides
        ("5.0.0", "", "ana@b.example: Domain does not exist", "hard"),
        # Postfix says "Recipient address rejected:" only at RCPT TO, whatever the code
        (
            "5.2.1",
            "550 5.2.1 <ana@b.example>: Recipient address rejected: User unknown",
            "",
            "hard",
        ),
        # pipelined: the transcript shows every reply after ">>> DATA"; the DATA reply "no
        # valid recipients" places the refusal before it at RCPT TO
        (
            "5.5.0",
            "550 5.5.0 Invalid recipient",
            ">>> DATA\n<<< 550 5.5.0 Invalid recipient\n"
            "550 5.1.1 <ana@b.example>... User unknown\n<<< 554 5.5.1 Error: no valid recipients",
            "hard",
        ),
        # a refusal after DATA alone stays a refusal of the message
        ("5.0.0", "550 Invalid recipient", ">>> DATA\n<<< 550 Invalid recipient", "block"),
    ],
)
def test_hard_needs_the_report_to_show_the_address_refused(status, diagnostic, told, expected):
    assert judged(status, diagnostic, told) == expected


@pytest.mark.parametrize(
    ("told", "expected"),
    [
        ("host mx.b.example refused to talk to me: 421 Service not available", "block"),
        ("host mx.b.example refused to talk to me: 554 No SMTP service here", "block"),
        ("SMTP error from remote mail server after initial connection:\n554 quota", "block"),
        # a limit on connections is the receiving side's load, not a verdict on the sender
        ("host mx.b.example refused to talk to me: 421 Too many connections", "soft"),
    ],
)
def test_a_refused_greeting_is_a_verdict_on_the_sending_host(told, expected):
    reply = told.rpartition(": ")[2]
    assert judged("4.0.0" if reply.startswith("4") else "5.0.0", reply, told) == expected


def dsn(fields: str, headers: str = "", notice: str = "Delivery failed.") -> bytes:
    return (
        "From: MAILER-DAEMON@mx.a.example\nTo: shop@a.example\nSubject: Delivery failure\n"
        f"{headers}MIME-Version: 1.0\n"
        'Content-Type: multipart/report; report-type=delivery-status; boundary="b"\n\n'
        f"--b\nContent-Type: text/plain\n\n{notice}\n"
        "--b\nContent-Type: message/delivery-status\n\nReporting-MTA: dns; mx.a.example\n\n"
        f"Final-Recipient: rfc822; ana@b.example\nAction: failed\n{fields}\n--b--\n"
    ).encode()


def classes(data: bytes) -> list[str]:
    report = read_report(data)
    assert isinstance(report, DeliveryReport)
    return [bounce_class(s) for s in report.statuses]


@pytest.mark.parametrize(
    ("category", "expected"),
    [
        ("bad-mailbox", "hard"),
        ("bad-domain", "hard"),
        ("spam-related", "block"),
        ("quota-issues", "soft"),
        ("other", "block"),
    ],
)
def test_powermtas_bounce_category_is_its_verdict(category, expected):
    # the reply alone (5.7.1, words of no command) would be block
    fields = (
        "Status: 5.7.1\nDiagnostic-Code: smtp;550 5.7.1 Recipient rejected\n"
        f"X-PowerMTA-BounceCategory: {category}"
    )
    assert classes(dsn(fields)) == [expected]


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("550 5.1.1 Mailbox does not exist", "block"),
        ("554 5.0.0 Unknown failure", "undetermined"),
        ("450 4.0.0 Temporary failure", "undetermined"),
        ("552 5.2.2 Mailbox full", "soft"),
    ],
)
def test_an_amazon_ses_receipt_rules_bounce_is_the_rules_answer(reply, expected):
    fields = f"Status: {reply.split()[1]}\nDiagnostic-Code: smtp; {reply}"
    ses = dsn(
        fields, "X-SES-Outgoing: 2024.01.01-192.0.2.7\n", "This message could not be delivered."
    )
    assert classes(ses) == [expected]


def test_the_same_reply_from_elsewhere_is_read_as_it_says():
    fields = "Status: 5.1.1\nDiagnostic-Code: smtp; 550 5.1.1 Mailbox does not exist"
    assert classes(dsn(fields)) == ["hard"]
    # SES sending (not a receipt rule) passes on the remote server's reply
    relayed = dsn(fields, "X-SES-Outgoing: 2024.01.01-192.0.2.7\n", "Delivery failed.")
    assert classes(relayed) == ["hard"]
