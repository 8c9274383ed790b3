"""Bounce classes from real-world SMTP replies."""

from __future__ import annotations

import pytest

from layang.sending.bounce_class import BLOCK, HARD, SOFT, UNDETERMINED, classify

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
]


@pytest.mark.parametrize(("code", "text", "expected"), REPLIES)
def test_a_reply_is_classified_by_its_status_code_then_its_words(
    code: int, text: str, expected: str
) -> None:
    assert classify(code, text) == expected
