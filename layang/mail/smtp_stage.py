"""Which SMTP command (RFC 5321 §3) a refusal answered, as bounce reports say it.

A reply to the greeting, EHLO/HELO or MAIL FROM is a verdict on the sending host or sender
(§3.1, §4.1.1.2); a reply to RCPT TO, on the address (§4.1.1.3); a reply after DATA, on the
message (§4.1.1.4). Reports say which in their MTA's own words: Postfix "in reply to RCPT TO
command", Exim "after RCPT TO:", Sendmail's ``>>> RCPT To:`` transcript, qmail's "most progress
was RCPT TO response", Yahoo's ``[RCPT_TO]``…
"""

from __future__ import annotations

import re

# Said of the greeting, HELO/EHLO or MAIL FROM: before any recipient was named.
BEFORE_RCPT = re.compile(
    r"in reply to (?:MAIL FROM|HELO|EHLO)\b|after (?:MAIL FROM|EHLO|HELO|initial connection)\b|"
    r"my name was rejected|refused\s+to\s+talk\s+to\s+me",
    re.IGNORECASE,
)
# Said of the greeting alone: the server would not serve this client at all (§3.1, a 554 or
# 421 instead of the 220).
AT_GREETING = re.compile(
    r"after\s+initial\s+connection\b|refused\s+to\s+talk\s+to\s+me", re.IGNORECASE
)
AT_RCPT = re.compile(
    r"in reply to RCPT TO|after RCPT(?: TO)?(?: command)?\b|>>> RCPT TO|RCPT TO command|"
    r"SMTP command:? RCPT|\bRCPT(?: TO)?:?\s*<|does not like recipient|"
    r"did not like our RCPT TO|\[RCPT_TO\]|RCPT TO response|\bSMTP:RCPT\b|"
    # Postfix says this only of a restriction on the RCPT TO address
    r"Recipient address rejected:",
    re.IGNORECASE,
)
AFTER_DATA = re.compile(
    r"in reply to (?:end of )?DATA|after (?:end of )?data\b|>>> DATA|"
    r"DATA command|SMTP command:? DATA|\[DATA\]",
    re.IGNORECASE,
)
# With PIPELINING (RFC 2920) a client sends RCPT TO and DATA together and a Sendmail transcript
# shows every reply after ">>> DATA"; a DATA reply of "no valid recipients" says the refusal
# before it answered the RCPT TO.
_NO_VALID_RECIPIENTS = re.compile(r"no valid recipients", re.IGNORECASE)


def before_rcpt(said: str) -> bool:
    """Whether ``said`` (a report's words) places the refusal before RCPT TO."""
    return BEFORE_RCPT.search(said) is not None


def at_greeting(said: str) -> bool:
    """Whether the server refused the connection itself, in its greeting."""
    return AT_GREETING.search(said) is not None


def at_rcpt(said: str) -> bool:
    """Whether ``said`` places the refusal at RCPT TO (pipelined replies after DATA included)."""
    if AT_RCPT.search(said):
        return True
    return bool(AFTER_DATA.search(said) and _NO_VALID_RECIPIENTS.search(said))


def after_data(said: str) -> bool:
    """Whether ``said`` places the refusal after DATA, not at a pipelined RCPT TO."""
    return AFTER_DATA.search(said) is not None and not at_rcpt(said)
