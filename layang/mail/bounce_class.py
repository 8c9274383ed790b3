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
    r"(?<!not )listed (?:at|on|in)|\bRBL\b|DNSBL|poor reputation|bad reputation|sender reputation|"
    r"reputation|spam|junk mail|polic(?:y|ies)|not authori[sz]ed|access denied|prohibit|"
    r"authentication (?:failed|required)|DMARC|SPF|DKIM|unsolicited|"
    r"rejected by (?:the )?(?:recipient|receiving) (?:domain|server)|"
    r"too many messages|rate limit|throttl|mail rejected|message rejected|"
    r"relay(?:ing)? (?:denied|not permitted)|insecure mail relay|unable to relay|unverif|"
    # the sending host's name or address refused (no PTR, mismatched HELO)
    r"\bPTR\b|reverse DNS|\bR?DNS record|mismatches client ip|my name was rejected|"
    r"sender (?:address )?rejected|unroutable sender|sender (?:is )?not allowed|invalid ip|"
    r"not allowed to send|unauthenticated senders?|not verified|"
    # the message refused (content filters, viruses, malformed mail)
    r"virus|malware|content (?:rejected|filter)|message content|improper use of|"
    r"headers? too (?:large|long)|protocol violation|not accepting connections|"
    r"host network not allowed|domain filter|filtered|"
    # the message's From refused (GoDaddy's "From: Domain is invalid")
    r"\bFrom:?\s+(?:domain|address|header)\s+is\s+invalid|provide a valid From\b|"
    r"^\W*5\d\d[ -](?:5\.\d\.\d+ )?rejected\W*$",
    re.IGNORECASE | re.MULTILINE,
)
# Said of the sender's host or message even beside a recipient's code (a 5.1.x "sender
# rejected", an "IP address blacklisted" in a report whose Status says 5.1.1).
_STRONG_BLOCK_TEXTS = re.compile(
    r"spamhaus|spamcop|blacklist|blocklist|block ?list|sender (?:address )?rejected|"
    r"too many recipients|rate limit|not allowed to send|\bSPF\b|reputation",
    re.IGNORECASE,
)
_SOFT_TEXTS = re.compile(
    r"mailbox (?:is )?full|over ?quota|quota exceeded|exceeded (?:the )?(?:storage|quota)|"
    r"insufficient (?:system )?storage|mailbox (?:is )?(?:temporarily unavailable|busy)|"
    r"try (?:again )?later|temporar|out of storage|too much mail|quota|"
    r"mailbox .{0,40}exceeded|exceeded the local limit|mailbox is frozen|folder is full|"
    r"host not reachable|timed out|"
    # the address as sent was malformed (a mistake in the message, not a missing mailbox)
    r"incorrectly constructed|malformed address|"
    # given up after retrying: the address was never refused
    r"retry (?:timeout|time) (?:exceeded|not reached)|failing for a long time|"
    r"message expired|envelope expired|could not deliver for the last|"
    r"not delivered within|has been in the queue too long|delivery time expired|"
    r"after multiple retries|"
    r"not responding|"
    r"name service error|DNS query failed|"
    # the receiving system's own trouble
    r"too large|too big|size (?:limit|exceeds)|line limit exceeded|length exceeds|"
    r"insufficient permission|service (?:currently )?unavailable|does not support TLS|"
    r"pipe to \||command parameter not implemented|system (?:error|problem)",
    re.IGNORECASE,
)
HARD_TEXTS = re.compile(
    r"user unknown|unknown user|no such (?:user|mailbox|recipient|address|domain)|"
    r"does not exist|doesn'?t exist|not exist|no longer exists|mailbox (?:not found|unavailable)|"
    r"invalid (?:recipient|mailbox|address)|recipient (?:address )?rejected|"
    r"address rejected|unknown (?:recipient|mailbox|address)|user not found|"
    r"account (?:has been )?(?:disabled|deactivated|closed)|no mailbox|"
    r"recipient not found|unrouteable|host or domain name not found|domain not found|"
    r"couldn'?t be found|could not be found|doesn'?t have an? [\w.-]+ account|"
    r"not a valid (?:recipient|mailbox|address|user)|non-?existent domain|"
    r"mailbox (?:is )?disabled|recipient name is not recognized|unknown recipient|"
    r"recipient not found|host [\w.-]+ not found|domain is not reachable|invalid domain|"
    r"couldn'?t find a mail exchanger|no MX (?:record )?found|host unknown|"
    r"no valid recipients|"
    # Domino: the address is in no directory of the domain
    r"not listed in (?:the )?(?:public )?(?:name (?:&|and) address book|directory)|"
    # Domino and Notes in Japanese: "not found in the directory", "not in the directory list"
    r"見つかりません|リストにありません",
    re.IGNORECASE,
)


def classify(code: int, text: str) -> str:
    """The bounce class of an SMTP reply (``code`` 0 when there was none) and its text, or of
    a bounce report's status and diagnostic."""
    if _DIRECTORY_REJECTION.search(text):
        return HARD
    if _ON_HOLD.search(text):
        return UNDETERMINED  # the receiving side holds the address back: no verdict yet
    if _RECEIVING_RATE.search(text):
        return BLOCK
    aup = _SPECTRUM_AUP.search(text)
    if aup and _spectrum_class(int(aup.group(1))):
        return _spectrum_class(int(aup.group(1)))
    match = _telling_code(text)
    if match:
        klass, subject, detail = match.group(1), match.group(2), match.group(3)
        if klass == "4" and _GREYLISTED.search(text):
            return SOFT  # greylisting (often 4.7.1) only asks to come back later
        if _SUSPENDED.search(text) or (subject, detail) == ("7", "13"):
            return SOFT  # a disabled account (X.7.13) may come back; the address is real
        if (klass, subject, detail) == ("5", "6", "7"):
            return HARD  # RFC 6531: a non-ASCII address the server cannot take, for good
        if subject in ("6", "7"):
            return BLOCK  # X.6.x: the message's content was refused; X.7.x: policy
        if klass == "4":
            if CONNECTION_LIMIT.search(text):
                return SOFT
            return BLOCK if _BLOCK_TEXTS.search(text) else SOFT
        if klass == "5":
            if subject == "1" and detail in ("7", "8"):
                return BLOCK  # X.1.7/X.1.8: the sender's address was refused, not the recipient
            if subject == "1" and _STRONG_BLOCK_TEXTS.search(text):
                return BLOCK
            if subject == "1" and _MAILBOX_FULL.search(text):
                return SOFT  # "over quota (#5.1.1)": the mailbox exists
            if subject == "1":
                return HARD
            if subject == "4" and detail == "4":
                # X.4.4, unable to route: Postfix and Exchange say it of a domain that is not;
                # a name server that failed to answer says nothing of the domain.
                return HARD if HARD_TEXTS.search(text) else SOFT
            if subject == "3" and HARD_TEXTS.search(text) and not _SOFT_TEXTS.search(text):
                return HARD  # X.3.x said of a recipient the system does not have
            if subject in ("3", "4"):
                # X.3.x, the receiving system's trouble; X.4.x, network and routing: expired
                return BLOCK if _BLOCK_TEXTS.search(text) else SOFT
            if subject == "2" and detail == "1" and HARD_TEXTS.search(text):
                return HARD  # X.2.1 "mailbox disabled", said of an unknown user
            if subject == "2" and detail in ("2", "1", "3"):
                # 5.2.2 mailbox full is temporary by nature; 5.2.1 "disabled" often is too;
                # 5.2.3, too long for this mailbox.
                return SOFT
            if subject == "2" and detail != "0" and not HARD_TEXTS.search(text):
                return SOFT
        return _from_text(code, text) or (SOFT if klass == "4" else UNDETERMINED)
    return _from_text(code, text) or (SOFT if 400 <= code < 500 else UNDETERMINED)


_GREYLISTED = re.compile(r"grey ?list|gray ?list", re.IGNORECASE)
_MAILBOX_FULL = re.compile(r"over ?quota|quota exceeded|mailbox (?:is )?full", re.IGNORECASE)
_ON_HOLD = re.compile(r"address rejected: on hold\b", re.IGNORECASE)
_SUSPENDED = re.compile(
    r"account (?:is |has been )?(?:disabled|blocked|suspended|frozen|inactive)|"
    r"disabled recipient|mailbox is frozen|compte du destinataire est bloqu",
    re.IGNORECASE,
)
# Too many connections at once is the receiving system's limit, not a verdict on the sender.
CONNECTION_LIMIT = re.compile(
    r"too many (?:connections|concurrent)|connection (?:rate|frequency) limit|"
    r"did not accept our requests to connect",
    re.IGNORECASE,
)


# Spectrum's (Charter's) own codes, "AUP#In-1310" or "AUP#Out-1000", as its page
# "Understanding email error codes" explains them: (first, last, class).
_SPECTRUM_AUP = re.compile(r"AUP#[A-Za-z]*-?(\d{4})\b")
_SPECTRUM_CODES = (
    (1000, 1080, BLOCK),  # the sending IP or account blocked for suspicious activity
    (1090, 1090, SOFT),  # the message could not be processed: try later
    (1100, 1250, BLOCK),  # no reverse DNS, the domain's policy, Cloudmark, Spamhaus
    (1260, 1260, SOFT),  # no IPv6: connect over IPv4
    (1300, 1340, SOFT),  # too many connections: fewer, later
    (1350, 1490, BLOCK),  # too many messages or recipients, spam potential
    (1500, 1520, BLOCK),  # sending as another address
    (1530, 1530, SOFT),  # larger than 20 MB
    (1540, 1580, BLOCK),  # too many per session, recipients, invalid recipients
)


def _spectrum_class(code: int) -> str | None:
    return next((klass for first, last, klass in _SPECTRUM_CODES if first <= code <= last), None)


def _telling_code(text: str) -> re.Match[str] | None:
    """The first enhanced status code that says more than the generic X.0.0 a report's Status
    often carries, else the first one."""
    codes = list(_ENHANCED.finditer(text))
    specific = [m for m in codes if (m.group(2), m.group(3)) != ("0", "0")]
    return (specific or codes or [None])[0]


# The recipient address itself refused by the receiving side's list of addresses: Exchange
# Online's directory-based edge blocking (5.4.1, not in the directory) and Postfix's
# check_recipient_access REJECT (554 5.7.1), both said to RCPT TO.
_DIRECTORY_REJECTION = re.compile(r"Recipient address rejected: Access denied", re.I)
# Gmail's permanent "ReceivingRatePerm" refusal (5.2.1 "receiving mail at a rate that prevents
# additional messages from being delivered"): the sender is to stop, not to come back; its
# temporary "receiving mail too quickly" (4.2.1) only asks to come back later.
_RECEIVING_RATE = re.compile(
    # a multiline reply repeats its codes on each line ("at a rate that 550-5.2.1 prevents")
    r"receiving mail at a rate that\s+(?:[45]\d\d[ -][245]\.\d\.\d+\s+)?prevents additional",
    re.IGNORECASE,
)


def _from_text(code: int, text: str) -> str | None:
    if _SUSPENDED.search(text) or CONNECTION_LIMIT.search(text):
        return SOFT
    if _BLOCK_TEXTS.search(text):
        return BLOCK
    if _SOFT_TEXTS.search(text):
        return SOFT
    if 400 <= code < 500:
        return SOFT
    if HARD_TEXTS.search(text):
        return HARD
    return None
