"""Bounces that follow no standard: the human-readable notices of qmail, Exim, old Sendmail and
Postfix, Exchange, Notes, webmail providers… and the human-readable part of a standard report
whose fields say too little.

Such a notice is known by who sends it (``MAILER-DAEMON``, ``postmaster``…), its subject
("Undelivered Mail Returned to Sender", "Mail delivery failed"…), Exim's
``X-Failed-Recipients``, or GNU Mailman's detectors (flufl.bounce). What it says is in its text
before the copy of the original: the remote server's reply when it quotes one, else the
sentence the MTA wrote ("Unrouteable address", "mailbox is full"), which
:func:`layang.mail.bounce_class.classify` reads.
"""

from __future__ import annotations

import email.message
import logging
import re

from flufl.bounce import all_failures

from layang.domain.feedback import DELAYED, FAILED, DeliveryReport, RecipientStatus
from layang.inbound import report_parts as mime

EXPLANATION_CHARS = 4000
"""How much of a notice's own words are kept to tell why: its first paragraphs."""
_SENDERS = re.compile(
    r"mailer-daemon|postmaster|mail ?delivery|mailadmin|mmdf|\bsmtp\b|"
    r"^(?:root|daemon|nobody|mail|bounces?|notify|no-?reply)@|post_master",
    re.IGNORECASE,
)
_BOUNCE_SUBJECT = re.compile(
    r"undeliver|undelivered|returned mail|delivery (?:status notification|failure|failed|"
    r"problem|report)|mail delivery|failure notice|failed mail|could not (?:be )?deliver|"
    r"non[- ]?remis|unzustellbar|nicht zustellbar|message not delivered|returned to sender|"
    r"warning: could not send|delayed mail|delivery delayed|mail system error|"
    r"\bnondeliverable\b|permanent (?:error|failure)|rejected|bounce|has failed|"
    r"mail failure|メールエラー|配信エラー|エラー通知",
    re.IGNORECASE,
)
_DELAYED = re.compile(
    r"delivery (?:has been )?delayed|\(delay\)|warning: could not send|has not yet been "
    r"delivered|not (?:yet )?been delivered .{0,40}(?:will|still) (?:be )?(?:retr|tr)|"
    r"will (?:continue to )?(?:be )?retr(?:y|ied)|delayed mail",
    re.IGNORECASE,
)
# Where a notice stops speaking and the copy of the original begins.
_ORIGINAL_FOLLOWS = re.compile(
    r"^[ \t>-]*(?:-{2,}|={2,}|\*{2,})?[ \t]*(?:"
    r"this is a copy of the message|the header of the original message|"
    r"original message (?:follows|header)|below this line is a copy|"
    r"unsent message below|returned message|message headers follow|"
    r"original message headers"
    r")",
    re.IGNORECASE | re.MULTILINE,
)
_SMTP_REPLY = re.compile(r"(?<![\d.])[45]\d\d[ -](?:[245]\.\d{1,3}\.\d{1,3}\b)?[^\r\n]*")
_QMAIL_STATUS = re.compile(r"[^\r\n]*\(#[45]\.\d{1,3}\.\d{1,3}\)[^\r\n]*")
_ENHANCED = re.compile(r"(?<![\d.])([245]\.\d{1,3}\.\d{1,3})(?![\d.])")
_ADDRESS = re.compile(r"<?([\w.+=!%/-]+@[\w-]+(?:\.[\w-]+)+)>?")

# flufl.bounce logs every detector it runs at INFO, and a traceback for each one that trips on
# odd mail (which only means "not this format"): a log line per detector per message.
logging.getLogger("flufl.bounce").setLevel(logging.CRITICAL)


def explanation(message: email.message.Message) -> str:
    """What the notice itself says, in its text parts before the original: at most
    ``EXPLANATION_CHARS``, blank runs collapsed."""
    said = []
    for part in mime.own_parts(message):
        if part.is_multipart():
            continue
        # A multipart the parser could not split (its boundary lost to a broken header fold)
        # is read as the text it holds.
        if part.get_content_maintype() not in ("text", "multipart"):
            continue
        if part.get_content_type() in mime.ORIGINAL_HEADERS:
            continue
        words = mime.text(part)
        cut = _ORIGINAL_FOLLOWS.search(words)
        said.append(words[: cut.start()] if cut else words)
        if sum(len(s) for s in said) >= EXPLANATION_CHARS:
            break
        if part.get_content_subtype() == "plain" and said[-1].strip():
            break  # an HTML alternative would only say it again
    joined = re.sub(r"\n\s*\n+", "\n\n", "\n".join(said)).strip()
    return joined[:EXPLANATION_CHARS]


def looks_like_a_bounce(message: email.message.Message) -> bool:
    """Whether the message is a delivery failure notice by its envelope of fields, or, from a
    system sender, by the sentence its notice template opens with."""
    if message.get("X-Failed-Recipients") is not None:
        return True
    subject = mime.decoded(message, "Subject")
    sender = mime.value(message, "From")
    if not _SENDERS.search(sender):
        return bool(_BOUNCE_SUBJECT.search(subject)) and (
            not mime.value(message, "Return-Path").strip("<> ")
        )
    return bool(_BOUNCE_SUBJECT.search(subject) or _NOTICE_SENTENCE.search(explanation(message)))


# The sentences of notices whose subject says nothing ("Mail", "Re: <the subject>"): au one
# net's "Could not be delivered to: <address>", Apache James's bounce template ("Error message
# below:" above the remote server's reply).
_NOTICE_SENTENCE = re.compile(
    r"^\s*could not be delivered to:|^Error message below:\s*$", re.IGNORECASE | re.MULTILINE
)


def read_mta_bounce(message: email.message.Message) -> DeliveryReport | None:
    """The failure (or delay) a non-standard notice reports, or ``None`` if it is not one."""
    try:
        temporary, permanent = all_failures(message)
    except Exception:  # a detector tripping on odd mail means "not this format"
        temporary, permanent = frozenset(), frozenset()
    if not (temporary or permanent) and not looks_like_a_bounce(message):
        return None
    told = explanation(message)
    subject = mime.decoded(message, "Subject")
    delayed = (temporary and not permanent) or (
        not permanent and bool(_DELAYED.search(f"{subject}\n{told}"))
    )
    action = DELAYED if delayed else FAILED
    from_filter = mime.from_content_filter(message)

    def status_of(recipient: str, words: str) -> RecipientStatus:
        diagnostic = _diagnostic(words)
        match = _ENHANCED.search(diagnostic) or _ENHANCED.search(words)
        status = match.group(1) if match else ("4.0.0" if delayed else "5.0.0")
        return RecipientStatus(action, status, diagnostic, recipient, words, from_filter)

    each = _per_recipient(told)
    if len(each) > 1:
        statuses = tuple(status_of(recipient, words) for recipient, words in each)
    else:
        recipient = _failed_recipient(message, permanent or temporary, told)
        statuses = (status_of(recipient, told),)
    return DeliveryReport(
        reported_by=mime.sender_host(message),
        statuses=statuses,
        original_tokens=mime.original_tokens(mime.own_parts(message)),
    )


# A failed address at the start of a line, as Exim, qmail and webmail notices list them, each
# followed by what its server said (not the sender's, that a sentence goes on from).
_LISTED = re.compile(
    r"""^[ \t]*["<]?([\w.+=!%/-]+@[\w-]+(?:\.[\w-]+)+)[">]?:?(?=[ \t\r]|$)"""
    r"""(?![ \t]+(?:could|was|has|is|wrote|sent)\b)""",
    re.MULTILINE,
)
# Where a notice begins its list ("The following address(es) failed:"): an address before it
# is the sender's.
_LIST_BEGINS = re.compile(r"address(?:es|\(es\))?\s+failed\s*:", re.IGNORECASE)


# Sendmail's closing line for each failed address, after its transcript: "550 <a@b>... User
# unknown".
_SENDMAIL_VERDICT = re.compile(
    r"^[45]\d\d <([\w.+=!%/-]+@[\w-]+(?:\.[\w-]+)+)>\.\.\. [^\r\n]*", re.MULTILINE
)


def _per_recipient(told: str) -> list[tuple[str, str]]:
    """(address, what is said of it) for each address a notice lists, first mention only."""
    verdicts: dict[str, str] = {}
    for match in _SENDMAIL_VERDICT.finditer(told):
        verdicts.setdefault(match.group(1).lower(), match.group(0))
    if len(verdicts) > 1:
        return list(verdicts.items())
    begins = _LIST_BEGINS.search(told)
    found = list(_LISTED.finditer(told, begins.end() if begins else 0))
    each: dict[str, str] = {}
    for match, after in zip(found, [*found[1:], None], strict=False):
        address = match.group(1).lower()
        if address not in each:
            each[address] = told[match.start() : after.start() if after else len(told)]
    return list(each.items())


def _failed_recipient(message: email.message.Message, found: frozenset, told: str) -> str:
    if found:
        return next(iter(found)).decode("utf-8", "replace")
    failed = mime.value(message, "X-Failed-Recipients")
    match = _ADDRESS.search(failed) or _ADDRESS.search(told)
    return match.group(1) if match else ""


def _diagnostic(told: str) -> str:
    """The remote server's words in a notice: its SMTP reply, or qmail's ``(#5.x.x)`` line,
    else the notice's first line that says something."""
    for pattern in (_SMTP_REPLY, _QMAIL_STATUS):
        match = pattern.search(told)
        if match:
            # Exim and Postfix wrap a long reply onto indented lines below it.
            wrapped = _WRAPPED.match(told, match.end())
            said = match.group(0) + (wrapped.group(0) if wrapped else "")
            return " ".join(said.split())
    return ""


_WRAPPED = re.compile(r"(?:\r?\n[ \t]+(?![<\"]?[\w.+=!%/-]+@)\S[^\r\n]*){1,4}")
