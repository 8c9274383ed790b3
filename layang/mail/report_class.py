"""The bounce class of one recipient's part of a delivery report (RFC 3464, or a notice that
says the same in words): :func:`layang.mail.bounce_class.classify` on what the report says,
weighed by what the report shows of how the refusal came about.

``hard`` suppresses the address, so it needs the report to show the address itself was
refused: an RFC 3463 X.1.x status, a refusal in reply to RCPT TO (RFC 5321 §4.1.1.3), a reply
that names the address it does not know, a directory lookup of the receiving system (Exim's
routers giving their own reason), or a domain that does not exist. "User unknown" said of no
command and no address (a relay's summary, a filter's mask) is a refusal of the message:
``block``.
"""

from __future__ import annotations

import re

from layang.mail import smtp_stage
from layang.mail.bounce_class import (
    BLOCK,
    CONNECTION_LIMIT,
    HARD,
    HARD_TEXTS,
    SOFT,
    UNDETERMINED,
    classify,
)


def report_class(
    status: str,
    diagnostic: str,
    explanation: str = "",
    from_filter: bool = False,
    stated: str = "",
) -> str:
    """The bounce class of a report's ``status`` (``5.1.1``), the remote server's
    ``diagnostic`` and the notice's own words (``explanation``). ``from_filter``: the notice
    is a content-filtering gateway's; ``stated``: the class the reporting MTA states itself
    (PowerMTA's bounce category), which wins.

    The remote server's reply decides before the report's Status field (a report may say
    ``5.1.1`` of a reply that says ``5.7.1 IP address blacklisted``); when both say too little
    (a generic ``5.0.0``, words that name no cause), what the notice says decides. A refusal
    after DATA (RFC 5321 §4.1.1.4) is about the message, one to the greeting, HELO or MAIL
    FROM about the sender; so is a content-filtering gateway's: never ``hard``.
    """
    if stated:
        return stated
    said = f"{diagnostic} {status}"
    if explanation and not diagnostic:
        said = f"{said}\n{explanation}"  # a bare code: the notice says why
    found = classify(0, said)
    if found == UNDETERMINED and explanation:
        found = classify(0, f"{said}\n{explanation}")
    everything = f"{diagnostic}\n{explanation}"
    if found != HARD and _recipient_refused_by_reply(diagnostic, everything):
        found = HARD
    if found != HARD:
        if found in (SOFT, UNDETERMINED) and _carrier_filter(everything):
            return BLOCK  # the carrier's domain filter, in its usual vague words
        if found in (SOFT, UNDETERMINED) and _refused_at_greeting(everything):
            return BLOCK
        return found
    if smtp_stage.before_rcpt(everything):
        return BLOCK
    at_rcpt = smtp_stage.at_rcpt(everything)
    if _MAILBOX_DISABLED.search(said) and not at_rcpt:
        return BLOCK
    if _RECIPIENT_CODE.search(said) or _YAHOO_ACCOUNT_GONE.search(said):
        return HARD
    filtered_by_carrier = _DOMAIN_FILTER_HOSTS.search(everything) and not _NAMED.search(
        _NOTICE_LISTING.sub("", everything)
    )
    if from_filter or filtered_by_carrier or smtp_stage.after_data(everything):
        return BLOCK
    if at_rcpt or _DOMAIN_GONE.search(everything) or _DIRECTORY_LOOKUP.search(everything):
        return HARD
    if _exim_routing_verdict(diagnostic, everything):
        return HARD
    return HARD if _names_the_refused_address(everything) else BLOCK


def _recipient_refused_by_reply(diagnostic: str, everything: str) -> bool:
    """Whether a reply to RCPT TO with no enhanced code of its own ("553 Invalid recipient")
    says the recipient is unknown: the report's Status is then only the reporting MTA's
    mapping of the reply code (RFC 3464 §2.3.4), and the reply decides."""
    return bool(
        _REPLY_WITHOUT_ENHANCED_CODE.match(diagnostic)
        and classify(0, diagnostic) == HARD
        and smtp_stage.at_rcpt(everything)
    )


def _exim_routing_verdict(diagnostic: str, everything: str) -> bool:
    """Whether an Exim stock notice gives its own reason for the address, not a remote
    server's: Exim reports every remote refusal with the host and its reply ("SMTP error from
    remote mail server after RCPT TO:", "host mx.b [192.0.2.1]: 550 ..."); a reason under the
    failed address with neither is what Exim's routers decided while looking the address up
    (an alias file's ``:fail: mailbox no longer exists``, a redirect's ``fail``): the
    receiving system's own directory."""
    return bool(
        not diagnostic
        and _EXIM_PERMANENT_LIST.search(everything)
        and not _EXIM_REMOTE_REPLY.search(everything)
    )


def _refused_at_greeting(everything: str) -> bool:
    """Whether the server refused to serve the sending host at all (RFC 5321 §3.1), other than
    for having too many connections open."""
    return smtp_stage.at_greeting(everything) and not CONNECTION_LIMIT.search(everything)


def _carrier_filter(everything: str) -> bool:
    """Whether a Japanese carrier refused the mail with words that name no cause ("user
    unknown" of no named address, "rejected"): what its domain filter says."""
    return bool(
        _DOMAIN_FILTER_HOSTS.search(everything)
        and _CARRIER_WORDS.search(everything)
        and not _NAMED.search(_NOTICE_LISTING.sub("", everything))
        and not _MAILBOX_WORDS.search(everything)
    )


def _names_the_refused_address(everything: str) -> bool:
    """Whether a reply names the address it does not know: Sendmail's ``<a@b>... User
    unknown``, Postfix's ``<a@b>: Recipient address rejected``, ``Unknown user: a@b``; the
    notice's own ``<a@b>:`` line above a reply is not the reply."""
    for line in _NOTICE_LISTING.sub("", everything).splitlines():
        named = _ADDRESS_THEN.search(line)
        if named and HARD_TEXTS.search(line[named.end() :]):
            return True
        if _UNKNOWN_THEN_ADDRESS.search(line):
            return True
    return False


_REPLY_WITHOUT_ENHANCED_CODE = re.compile(r"[45]\d\d(?:[ -](?![245]\.\d{1,3}\.\d{1,3}\b)|$)")
_ADDRESS_THEN = re.compile(r"[^\s<>()\"'\[]{1,64}@[\w.-]+?>?(?:\.\.\.|:|,)")
_UNKNOWN_THEN_ADDRESS = re.compile(
    r"(?:unknown user|user unknown|no such user)[:\s]+<?[^\s<>]+@[\w-]+", re.IGNORECASE
)
# The domain itself does not exist or takes no mail: the reporting MTA's own DNS lookup, or
# the remote one's (RFC 7505 null MX), not a mailbox refusal that a filter could mask.
_DOMAIN_GONE = re.compile(
    r"host unknown|no such domain|domain (?:name )?not found|host or domain name not found|"
    r"domain does not exist|domain is not reachable|non-?existent domain|invalid domain|"
    r"host [\w.-]+ not found|couldn'?t find any host|couldn'?t find a mail exchanger|"
    r"no MX (?:record )?found|unrouteable address",
    re.IGNORECASE,
)
# The receiving system looked the address up in its own directory: Domino and Notes (in
# English and Japanese), Exchange 5.5's IMS "Unknown Recipient" (000C05A6).
_DIRECTORY_LOOKUP = re.compile(
    r"not listed in (?:the )?(?:public )?(?:name (?:&|and) address book|directory)|"
    r"見つかりません|リストにありません|\(000C05A6\)",
    re.IGNORECASE,
)
# Exim's stock notice (its bounce_message_text), above the list of failed addresses.
_EXIM_PERMANENT_LIST = re.compile(
    r"This\s+is\s+a\s+permanent\s+error\.\s+The\s+following\s+address\(es\)\s+failed:",
    re.IGNORECASE,
)
_EXIM_REMOTE_REPLY = re.compile(
    r"(?:SMTP|LMTP)\s+error\s+from\s+remote\s+mail(?:er|\s+server)|"
    r"\bhost\s+[\w.-]+\s+\[[\w.:]+\]|(?<![\d.])[45]\d\d[ -]",
    re.IGNORECASE,
)
_CARRIER_WORDS = re.compile(r"user unknown|unknown user|rejected", re.IGNORECASE)
_MAILBOX_WORDS = re.compile(r"mailbox (?:is )?full|over ?quota|quota", re.IGNORECASE)
_RECIPIENT_CODE = re.compile(r"(?<![\d.])5\.1\.\d+(?![\d.])")
# RFC 3463 X.2.1, "mailbox disabled, not accepting messages": the mailbox exists and refuses
# this mail, whatever words come with it; no reason to suppress the address.
_MAILBOX_DISABLED = re.compile(r"(?<![\d.])5\.2\.1(?![\d.])")
# Yahoo refuses unknown accounts only after DATA, in its own reply ("554 delivery error: dd
# This user doesn't have a yahoo.com account").
_YAHOO_ACCOUNT_GONE = re.compile(
    r"delivery error: dd This user doesn'?t have an? [\w.-]+ account", re.IGNORECASE
)
# Japanese mobile carriers answer "550 : User unknown" (no address named) when their domain
# filter refuses the sender; an unknown address they name ("550 <a@…>: User unknown").
_DOMAIN_FILTER_HOSTS = re.compile(
    r"@(?:[\w-]+\.)*(?:docomo\.ne\.jp|ezweb\.ne\.jp|au\.com|softbank\.ne\.jp|"
    r"i\.softbank\.jp)\b",
    re.IGNORECASE,
)
_NAMED = re.compile(r"<[^<>\s]+@[^<>\s]+>\s*:")
# A notice's own list of the failed addresses, one "<address>:" line each before the reply
# (Yahoo, qmail): the notice naming the address, not the carrier's reply.
_NOTICE_LISTING = re.compile(r"^<[^<>\s]+@[^<>\s]+>:\s*$", re.MULTILINE)
