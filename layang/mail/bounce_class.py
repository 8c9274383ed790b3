"""Bounce classes: what a failed or deferred delivery says about the address.

``hard``: the address does not exist (5.1.x); mail to it will never arrive. ``soft``: the
mailbox is full or the failure is temporary (4.x.x, 5.2.2). ``block``: the receiving server
refused the sender (policy, spam, reputation: 5.7.x, 4.7.x and known block texts).
``undetermined``: nothing to go by. Only ``hard`` adds the address to the suppression list.

The enhanced status code (RFC 3463) decides first; the wording decides when the code is absent
or only generic (5.0.0, or none), as many servers still answer.
"""

from __future__ import annotations

import re

HARD = "hard"
SOFT = "soft"
BLOCK = "block"
UNDETERMINED = "undetermined"
BOUNCE_CLASSES = (HARD, SOFT, BLOCK, UNDETERMINED)

_ENHANCED = re.compile(r"(?<![\d.])([245])\.(\d{1,3})\.(\d{1,3})(?![\d.])")

# Checked in this order: a block text wins over "user unknown" in "rejected: blocked, unknown".
_BLOCK_TEXTS = re.compile(
    r"spamhaus|spamcop|barracuda|blocklist|blacklist|block ?list|blocked|"
    r"listed (?:at|on|in)|\bRBL\b|DNSBL|poor reputation|bad reputation|sender reputation|"
    r"reputation|spam|junk mail|polic(?:y|ies)|not authori[sz]ed|access denied|prohibit|"
    r"authentication (?:failed|required)|DMARC|SPF|DKIM|unsolicited|"
    r"rejected by (?:the )?(?:recipient|receiving) (?:domain|server)|"
    r"too many (?:connections|messages)|rate limit|throttl",
    re.IGNORECASE,
)
_SOFT_TEXTS = re.compile(
    r"mailbox (?:is )?full|over ?quota|quota exceeded|exceeded (?:the )?(?:storage|quota)|"
    r"insufficient (?:system )?storage|mailbox (?:is )?(?:temporarily unavailable|busy)|"
    r"try (?:again )?later|temporar|out of storage|too much mail",
    re.IGNORECASE,
)
_HARD_TEXTS = re.compile(
    r"user unknown|unknown user|no such (?:user|mailbox|recipient|address|domain)|"
    r"does not exist|doesn'?t exist|not exist|mailbox (?:not found|unavailable)|"
    r"invalid (?:recipient|mailbox|address)|recipient (?:address )?rejected|"
    r"address rejected|unknown (?:recipient|mailbox|address)|user not found|"
    r"account (?:has been )?(?:disabled|deactivated|closed)|no mailbox|"
    r"recipient not found|unrouteable|host or domain name not found|domain not found|"
    r"couldn'?t be found|could not be found|doesn'?t have an? [\w.-]+ account|"
    r"not a valid (?:recipient|mailbox|address|user)|non-?existent domain|"
    r"mailbox (?:is )?disabled",
    re.IGNORECASE,
)


def classify(code: int, text: str) -> str:
    """The bounce class of an SMTP reply (``code`` 0 when there was none) and its text, or of
    a bounce report's status and diagnostic."""
    if _DIRECTORY_REJECTION.search(text):
        return HARD
    match = _telling_code(text)
    if match:
        klass, subject, detail = match.group(1), match.group(2), match.group(3)
        if klass == "4" and _GREYLISTED.search(text):
            return SOFT  # greylisting (often 4.7.1) only asks to come back later
        if subject == "7":
            return BLOCK
        if klass == "4":
            return BLOCK if _BLOCK_TEXTS.search(text) else SOFT
        if klass == "5":
            if subject == "1" and detail in ("7", "8"):
                return BLOCK  # X.1.7/X.1.8: the sender's address was refused, not the recipient
            if subject == "1" or (subject == "4" and detail == "4"):
                # X.4.4, unable to route: Postfix and Exchange say it of a domain that is not.
                return HARD
            if subject == "2" and detail in ("2", "1"):
                # 5.2.2 mailbox full is temporary by nature; 5.2.1 "disabled" often is too.
                return SOFT
            if subject == "2" and not _HARD_TEXTS.search(text):
                return SOFT
        return _from_text(code, text) or (SOFT if klass == "4" else UNDETERMINED)
    return _from_text(code, text) or (SOFT if 400 <= code < 500 else UNDETERMINED)


_GREYLISTED = re.compile(r"grey ?list|gray ?list", re.IGNORECASE)


def _telling_code(text: str) -> re.Match[str] | None:
    """The first enhanced status code that says more than the generic X.0.0 a report's Status
    often carries, else the first one."""
    codes = list(_ENHANCED.finditer(text))
    specific = [m for m in codes if (m.group(2), m.group(3)) != ("0", "0")]
    return (specific or codes or [None])[0]


# Exchange Online's directory-based edge blocking: the recipient is not in the directory.
_DIRECTORY_REJECTION = re.compile(r"5\.4\.1 .*Recipient address rejected: Access denied", re.I)


def _from_text(code: int, text: str) -> str | None:
    if _BLOCK_TEXTS.search(text):
        return BLOCK
    if _SOFT_TEXTS.search(text):
        return SOFT
    if 400 <= code < 500:
        return SOFT
    if _HARD_TEXTS.search(text):
        return HARD
    return None
