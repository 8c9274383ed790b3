"""Bounce classes from real-world SMTP replies."""

from __future__ import annotations

import pytest

from layang.mail.bounce_class import BLOCK, HARD, SOFT, UNDETERMINED, classify

REPLIES = [
    # Gmail
    (550, "550 5.1.1 The email account that you tried to reach does not exist.", HARD),
    (552, "552 5.2.2 The email account that you tried to reach is over quota.", SOFT),
    (421, "421 4.7.0 Try again later, closing connection.", BLOCK),
    (550, "550 5.7.1 Our system has detected an unusual rate of unsolicited mail", BLOCK),
    (450, "450 4.2.1 The user you are trying to contact is receiving mail too quickly.", SOFT),
    # Outlook / Exchange Online
    (550, "550 5.4.1 Recipient address rejected: Access denied. AS(201806281)", HARD),
    (550, "550 5.7.1 Unfortunately, messages from [1.2.3.4] weren't sent. (S3140)", BLOCK),
    # Yahoo
    (554, "554 delivery error: dd This user doesn't have a yahoo.com account", HARD),
    (421, "421 4.7.0 [TSS04] Messages from 1.2.3.4 temporarily deferred", BLOCK),
    # Postfix
    (550, "550 5.1.1 <a@b.example>: Recipient address rejected: User unknown", HARD),
    (
        554,
        "554 5.7.1 Service unavailable; Client host [1.2.3.4] blocked using zen.spamhaus.org",
        BLOCK,
    ),
    (451, "451 4.3.0 Temporary lookup failure", SOFT),
    # Exim
    (550, "550 Requested action not taken: mailbox unavailable", HARD),
    # Nothing to go by
    (0, "Connection refused", UNDETERMINED),
    (554, "554 Transaction failed", UNDETERMINED),
    # Gmail, more
    (
        550,
        "550-5.1.1 The email account that you tried to reach does not exist. Please try "
        "double-checking the recipient's email address for typos or unnecessary spaces. "
        "https://support.google.com/mail/?p=NoSuchUser",
        HARD,
    ),
    (452, "452-4.2.2 The email account that you tried to reach is over quota.", SOFT),
    (
        550,
        "550-5.7.26 This mail is unauthenticated, which poses a security risk to the sender "
        "and Gmail users, and has been blocked.",
        BLOCK,
    ),
    (
        421,
        "421-4.7.28 Gmail has detected an unusual rate of unsolicited mail originating "
        "from your DKIM domain",
        BLOCK,
    ),
    (
        550,
        "550-5.7.25 The IP address sending this message does not have a PTR record setup",
        BLOCK,
    ),
    (421, "421-4.3.0 Temporary System Problem. Try again later (10).", SOFT),
    (451, "451-4.3.0 Mail server temporarily rejected message.", SOFT),
    # Outlook.com / Exchange Online
    (550, "550 5.5.0 Requested action not taken: mailbox unavailable (S2017062302)", HARD),
    (
        550,
        "550 5.1.10 RESOLVER.ADR.RecipientNotFound; Recipient not found by SMTP address lookup",
        HARD,
    ),
    (550, "550 5.7.606 Access denied, banned sending IP [1.2.3.4].", BLOCK),
    (
        451,
        "451 4.7.650 The mail server [1.2.3.4] has been temporarily rate limited due to IP "
        "reputation.",
        BLOCK,
    ),
    (
        550,
        "550 5.7.520 Access denied, Your organization does not allow external forwarding.",
        BLOCK,
    ),
    (
        550,
        "550 OU-002 (COL004-MC1F2) Unfortunately, messages from 1.2.3.4 weren't sent. Please "
        "contact your Internet service provider since part of their network is on our block "
        "list.",
        BLOCK,
    ),
    (452, "452 4.5.3 Too many recipients", SOFT),
    # Exchange on-premises (its NDR wording)
    (0, "#550 5.1.1 RESOLVER.ADR.RecipNotFound; not found ##", HARD),
    (0, "#554 5.4.4 SMTPSEND.DNS.NonExistentDomain; nonexistent domain ##", HARD),
    (0, "#550 5.2.2 STOREDRV.Deliver.Exception:QuotaExceededException; mailbox full ##", SOFT),
    (0, "#550 5.7.1 RESOLVER.RST.AuthRequired; authentication required ##", BLOCK),
    (0, "#550 4.4.7 QUEUE.Expired; message expired ##", SOFT),
    # Yahoo / AOL
    (
        554,
        "554 5.7.9 Message not accepted for policy reasons. "
        "See https://help.yahoo.com/kb/postmaster/SLN7007.html",
        BLOCK,
    ),
    (
        553,
        "553 5.7.1 [BL21] Connections will not be accepted from 1.2.3.4, because the ip is in "
        "Spamhaus's list",
        BLOCK,
    ),
    (552, "552 1 Requested mail action aborted, mailbox not found", HARD),
    (
        554,
        "554 30 Sorry, your message to a@yahoo.com cannot be delivered. This mailbox is "
        "disabled (554.30).",
        HARD,
    ),
    (451, "451 Message temporarily deferred - [160]", SOFT),
    (421, "421 4.7.1 [TSS11] Excessive unknown recipients - possible Open Relay", BLOCK),
    (554, "554 delivery error: dd Not a valid recipient - atlas-a.mail.aol.com", HARD),
    # Postfix
    (
        550,
        "550 5.1.1 <a@b.example>: Recipient address rejected: User unknown in virtual "
        "mailbox table",
        HARD,
    ),
    (554, "554 5.7.1 <a@b.example>: Relay access denied", BLOCK),
    (450, "450 4.2.0 <a@b.example>: Recipient address rejected: Greylisted", SOFT),
    (451, "451 4.7.1 <a@b.example>: Recipient address rejected: Greylisted, see x", SOFT),
    (550, "550 5.1.8 <shop@sender.example>: Sender address rejected: Domain not found", BLOCK),
    # Exim and cPanel
    (550, "550 Unrouteable address", HARD),
    (550, "550 No Such User Here", HARD),
    (550, "550 Administrative prohibition", BLOCK),
    (550, "550 Mailbox quota exceeded", SOFT),
    # qmail
    (0, "Sorry, no mailbox here by that name. (#5.1.1)", HARD),
    (0, "Sorry, I couldn't find any host named rcpt.invalid. (#5.1.2)", HARD),
    (553, "553 sorry, that domain isn't in my list of allowed rcpthosts (#5.7.1)", BLOCK),
    # Filters in front of mailboxes
    (550, "550 Invalid Recipient - https://community.mimecast.com/docs/DOC-1369#550", HARD),
    (554, "554 Email rejected due to security policies - https://mimecast.example/", BLOCK),
    (
        554,
        "554 Service unavailable; Client host [1.2.3.4] blocked using Barracuda Reputation",
        BLOCK,
    ),
    (550, "550 5.7.1 Message rejected as spam by Content Filtering.", BLOCK),
]

# A bounce report's Status field, then its Diagnostic-Code, as the inbound server classifies
# them (layang.domain.feedback).
REPORTS = [
    (
        "5.1.1",
        "host mx.b.example[192.0.2.1] said: 550 5.1.1 <a@b.example>: Recipient address "
        "rejected: User unknown (in reply to RCPT TO command)",
        HARD,
    ),
    (
        "5.0.0",
        "550 5.1.1 <a@b.example>... User unknown",
        HARD,
    ),
    (
        "5.0.0",
        "550-5.7.1 [192.0.2.1] Our system has detected that this message is likely "
        "unsolicited mail.",
        BLOCK,
    ),
    ("5.4.4", "Host or domain name not found. Name service error for name=b.example", HARD),
    ("4.4.1", "connect to mx.b.example[192.0.2.1]:25: Connection timed out", SOFT),
    ("4.2.2", "452 4.2.2 The email account that you tried to reach is over quota.", SOFT),
    ("5.2.2", "552 5.2.2 Mailbox full", SOFT),
    ("5.7.1", "554 5.7.1 Service unavailable; Client host blocked using zen.spamhaus.org", BLOCK),
    ("5.0.0", "smtp; 554 Transaction failed", UNDETERMINED),
]


@pytest.mark.parametrize(("code", "text", "expected"), REPLIES)
def test_a_reply_is_classified_by_its_status_code_then_its_words(
    code: int, text: str, expected: str
) -> None:
    assert classify(code, text) == expected


@pytest.mark.parametrize(("status", "diagnostic", "expected"), REPORTS)
def test_a_report_is_classified_by_its_status_and_diagnostic(
    status: str, diagnostic: str, expected: str
) -> None:
    assert classify(0, f"{status} {diagnostic}") == expected
