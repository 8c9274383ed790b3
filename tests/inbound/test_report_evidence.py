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


@pytest.mark.parametrize(
    ("status", "diagnostic", "told", "expected"),
    [
        # Postfix's check_recipient_access REJECT refuses the recipient address itself
        (
            "5.7.1",
            "554 5.7.1 <ana@b.example>: Recipient address rejected: Access denied",
            "after RCPT TO:<ana@b.example>:",
            "hard",
        ),
        # a reply to RCPT TO with no enhanced code of its own: the report's 5.7.1 is the
        # reporting MTA's mapping of "553", the reply decides
        ("5.7.1", "553 No such recipient here", ">>> RCPT TO:<ana@b.example>\n<<< 553", "hard"),
        # ... and with a code of its own, the code does
        (
            "5.7.1",
            "553 5.7.1 No such recipient here",
            ">>> RCPT TO:<ana@b.example>\n<<< 553",
            "block",
        ),
        # Gmail's permanent receiving-rate refusal: the sender is to stop
        (
            "5.2.1",
            "550-5.2.1 The user you are trying to contact is receiving mail at a rate that "
            "550-5.2.1 prevents additional messages from being delivered.",
            "",
            "block",
        ),
        # the message's From refused
        ("5.2.0", "550 5.2.0 <shop@a.example> From: Address is invalid", "", "block"),
        # Spectrum's own codes
        ("5.1.0", "550 5.1.0 sender rejected. AUP#In-1320", "", "soft"),
        ("5.7.1", "554 5.7.1 AUP#Out-1220", "", "block"),
        ("4.0.0", "421 too busy AUP#I-1530", "", "soft"),
    ],
)
def test_what_decides_where_the_code_and_the_words_disagree(status, diagnostic, told, expected):
    assert judged(status, diagnostic, told) == expected


HEADERS = (
    "From: MAILER-DAEMON@mx.a.example\nTo: shop@a.example\nSubject: Returned mail\n"
    "MIME-Version: 1.0\n"
)
STATUS_PART = (
    "Content-Type: message/delivery-status\n\nReporting-MTA: dns; mx.a.example\n\n"
    "Final-Recipient: rfc822; ana@b.example\nAction: failed\nStatus: 5.2.2\n"
    "Diagnostic-Code: smtp; 552 5.2.2 Mailbox full\n\n"
    "Final-Recipient: rfc822; bo@b.example\nAction: failed\nStatus: 5.1.1\n"
    "Diagnostic-Code: smtp; 550 5.1.1 <bo@b.example>: User unknown\n"
)


@pytest.mark.parametrize(
    "body",
    [
        # a delimiter indented by a space, as some old MTAs wrote them
        'boundary="b"\n\n--b\nContent-Type: text/plain\n\nFailed.\n\n --b\n'
        + STATUS_PART
        + " --b--\n",
        # the boundary used is not the one declared
        'boundary="declared"\n\n--used\nContent-Type: text/plain\n\nFailed.\n--used\n'
        + STATUS_PART
        + "--used--\n",
    ],
    ids=["indented", "other-boundary"],
)
def test_a_report_is_read_where_its_delimiters_were_written(body):
    report = read_report(
        (HEADERS + "Content-Type: multipart/report; report-type=delivery-status; " + body).encode()
    )
    assert isinstance(report, DeliveryReport)
    assert [(s.final_recipient, s.status, bounce_class(s)) for s in report.statuses] == [
        ("ana@b.example", "5.2.2", "soft"),
        ("bo@b.example", "5.1.1", "hard"),
    ]


def test_a_report_with_no_delimiter_at_all_is_read_as_its_text():
    report = read_report(
        (
            HEADERS
            + 'Content-Type: multipart/report; report-type=delivery-status; boundary="b"\n\n'
            + "Your message cannot be delivered to the following recipients:\n\n"
            + "  Recipient address: ana@b.example\n"
            + "  Diagnostic code: smtp; 552 5.2.2 Mailbox full\n"
        ).encode()
    )
    assert isinstance(report, DeliveryReport)
    assert [(s.status, bounce_class(s)) for s in report.statuses] == [("5.2.2", "soft")]


def test_an_exim_reply_wrapped_onto_indented_lines_is_read_whole():
    notice = (
        b"From: Mail Delivery System <Mailer-Daemon@mx.a.example>\nTo: shop@a.example\n"
        b"Subject: Mail delivery failed: returning message to sender\n"
        b"X-Failed-Recipients: ana@b.example\n\n"
        b"A message that you sent could not be delivered to one or more of its\n"
        b"recipients. This is a permanent error. The following address(es) failed:\n\n"
        b"  ana@b.example\n"
        b"    host mx.b.example [192.0.2.1]\n"
        b"    SMTP error from remote mail server after end of data:\n"
        b"    550 5.7.1 <shop@a.example>:\n"
        b"    Message rejected as spam\n\n"
        b"------ This is a copy of the message, including all the headers. ------\n"
    )
    (status,) = read_report(notice).statuses
    assert status.diagnostic == "550 5.7.1 <shop@a.example>: Message rejected as spam"
    assert bounce_class(status) == "block"


@pytest.mark.parametrize(
    ("sender", "subject", "text", "expected"),
    [
        (
            "no-reply@mail.carrier.example",
            "Mail",
            "Your mail sent on: Mon, 1 Jan 2024\n"
            "     Could not be delivered to: <ana@b.example>\n     As their mailbox is full.\n",
            "soft",
        ),
        (
            "postmaster@gw.b.example",
            "Re: Your order",
            "Error: Invalid user address\n\nError message below:\n"
            "550 - Requested action not taken: no such user here\n\nMessage details:\n"
            "  Subject: Your order\n  RCPT TO: ana@b.example\n",
            "block",
        ),
    ],
    ids=["au-one-net", "apache-james"],
)
def test_a_notice_whose_subject_says_nothing_is_known_by_its_template(
    sender, subject, text, expected
):
    message = f"From: {sender}\nTo: shop@a.example\nSubject: {subject}\n\n{text}".encode()
    assert classes(message) == [expected]
    # the same words from a person are not a notice
    personal = f"From: ana@b.example\nTo: shop@a.example\nSubject: {subject}\n\n{text}"
    assert not isinstance(read_report(personal.encode()), DeliveryReport)


def test_a_nested_multipart_whose_boundary_was_lost_is_read_as_its_text():
    notice = (
        b"From: postmaster@gw.b.example\nTo: shop@a.example\nSubject: Re: Your order\n"
        b'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="outer"\n\n'
        b'--outer\nContent-Type: multipart/alternative;\nboundary="inner"\n\n'
        b"--inner\nContent-Type: text/plain\n\nError message below:\n"
        b"552 Requested mail action aborted: exceeded storage allocation\n\n--inner--\n"
        b"--outer--\n"
    )
    assert classes(notice) == ["soft"]
