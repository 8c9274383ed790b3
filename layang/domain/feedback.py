"""Feedback from the recipients' side: bounce reports and complaints that come back by mail.

The inbound server (``layang inbound``) accepts mail only for the addresses ``mailbox_for``
knows: a VERP return path this installation signed whose record exists, or ``fbl@``/``abuse@``
of a return-path domain. It reads each message into one of the reports below and hands it to
``record_inbound``, which adds the event to the email's record (through ``append_events``, so
suppression and webhooks follow) or, when the mail says nothing usable, keeps it for
inspection (``layang inbound list``): at most ``LAYANG_INBOUND_KEEP_DAYS`` and at most
``LAYANG_INBOUND_KEEP_MB`` in all, the oldest dropped first as each new one is kept.

A failed delivery report turns the record's status to ``Bounce``, even after a ``Delivery``
(the remote server accepted the mail, then gave up on it). A delayed one adds a ``Delay`` event
and leaves the status alone: ``Delivery`` is still the last thing known for certain, and the
remote server reports again if it gives up. A complaint adds a ``Complaint`` event, an
automatic reply an ``AutoReply`` event (no suppression, the record's status unchanged).
Each of these is recorded once per email: a later copy of a report (or the same news in
another form) is logged and not counted again (docs/delivery.md, "Bounces and complaints").
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import peewee

from layang.clock import now_ms
from layang.config import Config
from layang.db import database, is_postgresql, write_transaction
from layang.mail.breaker_levels import judge_recorded
from layang.mail.events import append_events
from layang.mail.report_class import report_class
from layang.mail.return_path import InvalidReturnPath, ReturnPaths
from layang.models import (
    AUTO_REPLY,
    BOUNCE,
    COMPLAINT,
    DELAY,
    VERIFIED,
    Event,
    InboundMessage,
    Recipient,
    SendingDomain,
)

log = logging.getLogger("layang.inbound")

FEEDBACK_LOCAL_PARTS = ("fbl", "abuse")
DMARC_LOCAL_PART = "dmarc"
RAW_KEPT_BYTES = 256 * 1024
"""How much of an unrecognised message is kept: enough to see what it was."""
_DIAGNOSTIC_MAX = 1000

FAILED = "failed"
DELAYED = "delayed"


@dataclass(frozen=True, slots=True)
class Mailbox:
    """An address the inbound server takes mail for: a VERP return path (``recipient_id`` is
    the email it names) or a feedback mailbox (``fbl@``/``abuse@``, ``recipient_id`` None)."""

    address: str
    recipient_id: str | None
    dmarc: bool = False
    """``dmarc@`` of a return-path domain: DMARC aggregate reports (``layang.domain.dmarc``)."""


@dataclass(frozen=True, slots=True)
class RecipientStatus:
    """One recipient's part of a delivery report: ``action`` is ``failed`` or ``delayed``
    (RFC 3464 also has ``delivered``, ``relayed``, ``expanded``), ``status`` the DSN status
    (``5.1.1``), ``diagnostic`` what the remote server said."""

    action: str
    status: str
    diagnostic: str
    final_recipient: str = ""
    explanation: str = ""
    """The notice's own words (its human-readable part), read when the status and diagnostic
    say too little; never stored."""
    from_filter: bool = False
    """The notice comes from a content-filtering gateway (its verdict on the message)."""
    stated_class: str = ""
    """The bounce class the reporting system states itself (PowerMTA's bounce category, an
    Amazon SES receipt rule's bounce), ``""`` when it states none."""


@dataclass(frozen=True, slots=True)
class DeliveryReport:
    """A bounce or delay report, standard (RFC 3464) or not. ``original_tokens`` are VERP
    addresses or tokens found in the embedded original, most telling first."""

    reported_by: str
    statuses: tuple[RecipientStatus, ...]
    original_tokens: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class FeedbackReport:
    """A complaint (RFC 5965 ARF)."""

    feedback_type: str
    reported_by: str
    user_agent: str
    original_tokens: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Unrecognised:
    """Mail that is not a report this service can read, and why."""

    reason: str


@dataclass(frozen=True, slots=True)
class AutoReply:
    """An automatic reply (RFC 3834: a vacation notice, an autoresponder): the address is
    alive, so it is neither a bounce nor a complaint."""

    reported_by: str
    subject: str
    original_tokens: tuple[str, ...] = ()


Report = DeliveryReport | FeedbackReport | AutoReply | Unrecognised


@dataclass(frozen=True, slots=True)
class InboundEntry:
    """An unrecognised message as kept."""

    id: int
    received_at: int
    mail_from: str
    rcpt_to: tuple[str, ...]
    size: int
    reason: str
    raw: bytes


# -- who may be written to -------------------------------------------------------------------


def return_path_domains(config: Config) -> set[str]:
    """``LAYANG_BOUNCE_DOMAIN`` and every sending domain's return-path domain."""
    domains = {config.bounce_domain.lower()}
    domains.update(
        d.lower() for (d,) in SendingDomain.select(SendingDomain.return_path_domain).tuples()
    )
    return domains


def mailbox_for(address: str, paths: ReturnPaths, config: Config) -> Mailbox | None:
    """The mailbox ``address`` is, or None when the inbound server must refuse it: not a VERP
    address signed here (or its record is gone), nor ``fbl@``/``abuse@``/``dmarc@`` of a
    return-path domain."""
    local, at, domain = address.strip().strip("<>").rpartition("@")
    if not at:
        return None
    try:
        recipient_id = paths.read_address(address)
    except InvalidReturnPath:
        if local.lower() == DMARC_LOCAL_PART:
            return Mailbox(address, None, dmarc=True) if _reports_here(domain) else None
        if local.lower() in FEEDBACK_LOCAL_PARTS and domain.lower() in return_path_domains(config):
            return Mailbox(address, None)
        return None
    if not Recipient.select(Recipient.id).where(Recipient.id == recipient_id).exists():
        return None
    return Mailbox(address, recipient_id)


def _reports_here(domain: str) -> bool:
    """Whether ``dmarc@<domain>`` is a verified sending domain's reporting address: only there
    are DMARC reports taken (``layang.domain.dmarc.store_reports``), so elsewhere they are
    refused at RCPT rather than read and kept."""
    return (
        SendingDomain.select(SendingDomain.id)
        .where(
            (SendingDomain.return_path_domain == domain.lower().rstrip("."))
            & (SendingDomain.status == VERIFIED)
        )
        .exists()
    )


# -- recording -------------------------------------------------------------------------------


def record_inbound(
    report: Report,
    mailboxes: Sequence[Mailbox],
    mail_from: str,
    raw: bytes,
    paths: ReturnPaths,
    config: Config,
) -> list[tuple[str, str]]:
    """Record what ``report`` (received for ``mailboxes``) says; returns the (recipient id,
    event status) pairs recorded. Anything that names no email of ours, or says nothing
    usable, is kept as an unrecognised message instead (and nothing is returned)."""
    if isinstance(report, Unrecognised):
        keep_unrecognised(mail_from, mailboxes, raw, report.reason, config)
        return []
    targets = [m.recipient_id for m in mailboxes if m.recipient_id is not None]
    if not targets:
        found = _first_valid(report.original_tokens, paths)
        if found is None:
            reason = "the report names no email sent here"
            keep_unrecognised(mail_from, mailboxes, raw, reason, config)
            return []
        targets = [found]
    if isinstance(report, FeedbackReport):
        detail: dict[str, object] = {
            "feedbackType": report.feedback_type,
            "reportedBy": report.reported_by,
            "source": "report",
        }
        if report.user_agent:
            detail["userAgent"] = report.user_agent
        events = [(rid, COMPLAINT, detail) for rid in dict.fromkeys(targets)]
    elif isinstance(report, AutoReply):
        detail = {"reportedBy": report.reported_by, "subject": report.subject, "source": "report"}
        events = [(rid, AUTO_REPLY, detail) for rid in dict.fromkeys(targets)]
    else:
        chosen = _telling_status(report.statuses)
        if chosen is None:
            reason = "delivery report with no failed or delayed recipient"
            keep_unrecognised(mail_from, mailboxes, raw, reason, config)
            return []
        status = BOUNCE if chosen.action == FAILED else DELAY
        diagnostic = chosen.diagnostic[:_DIAGNOSTIC_MAX]
        detail = {
            "diagnostic": diagnostic,
            "status": chosen.status,
            "reportedBy": report.reported_by,
            "source": "report",
            "bounceClass": bounce_class(chosen),
        }
        events = [(rid, status, detail) for rid in dict.fromkeys(targets)]
    recorded = _store(events)
    judge_recorded(recorded, config)  # a Warning goes out with the event that crossed
    return recorded


def bounce_class(status: RecipientStatus) -> str:
    """The bounce class (:mod:`layang.mail.bounce_class`) of one recipient's part of a report:
    :func:`layang.mail.report_class.report_class` of its fields."""
    return report_class(
        status.status,
        status.diagnostic,
        status.explanation,
        from_filter=status.from_filter,
        stated=status.stated_class,
    )


def _telling_status(statuses: Sequence[RecipientStatus]) -> RecipientStatus | None:
    for action in (FAILED, DELAYED):
        for status in statuses:
            if status.action == action:
                return status
    return None


def _first_valid(tokens: Sequence[str], paths: ReturnPaths) -> str | None:
    for token in tokens:
        try:
            read = paths.read_address if "@" in token else paths.read_token
            recipient_id = read(token)
        except InvalidReturnPath:
            continue
        if Recipient.select(Recipient.id).where(Recipient.id == recipient_id).exists():
            return recipient_id
    return None


def _store(events: Sequence[tuple[str, str, dict[str, object]]]) -> list[tuple[str, str]]:
    now = now_ms()
    recorded = []
    repeated = []
    with write_transaction():
        rows = []
        for recipient_id, status, detail in events:
            if not _hold(recipient_id):
                continue
            if _already_told(recipient_id, status):
                repeated.append((recipient_id, status))
                continue
            changes: dict[object, object] = {Recipient.updated_at: now}
            if status == BOUNCE:
                # Final: nothing is sent to it again, whatever its state was.
                changes.update({Recipient.status: BOUNCE, Recipient.next_attempt_at: None})
            Recipient.update(changes).where(Recipient.id == recipient_id).execute()
            rows.append((recipient_id, status, now, json.dumps(detail)))
            recorded.append((recipient_id, status))
        append_events(rows)
    for recipient_id, status in recorded:
        log.info("report recorded rid=%s status=%s", recipient_id, status)
    for recipient_id, status in repeated:
        log.info("report repeated rid=%s status=%s: not counted again", recipient_id, status)
    return recorded


def _hold(recipient_id: str) -> bool:
    """Whether the record exists, holding it until the transaction ends: on PostgreSQL by its
    row lock, so that two copies of one report stored at once are told apart (on SQLite the
    write transaction already runs alone)."""
    record = Recipient.select(Recipient.id).where(Recipient.id == recipient_id)
    if is_postgresql():
        record = record.for_update()
    return record.first() is not None


# What a record that already has one of these events is not told again: a report says the
# email was complained about or bounced once, however many copies of it (or other forms of
# it: a DSN, a provider's notice, a replay) come back. Each would otherwise count again in the
# suppression list, the circuit breaker's counters and the overview.
_TOLD_BY = {
    COMPLAINT: (COMPLAINT,),
    BOUNCE: (BOUNCE,),
    # A delay after the final bounce says nothing; delays before it may each be news.
    DELAY: (BOUNCE,),
    # A responder answers once; a second copy is a replay.
    AUTO_REPLY: (AUTO_REPLY,),
}


def _already_told(recipient_id: str, status: str) -> bool:
    """Whether the record already has the event a report of ``status`` would add, or one
    that makes it say nothing (:data:`_TOLD_BY`)."""
    told = _TOLD_BY.get(status)
    if not told:
        return False
    return (
        Event.select(Event.id)
        .where((Event.recipient == recipient_id) & (Event.status.in_(told)))
        .exists()
    )


def keep_unrecognised(
    mail_from: str, mailboxes: Sequence[Mailbox], raw: bytes, reason: str, config: Config
) -> None:
    """Keep a message nobody could read (its first ``RAW_KEPT_BYTES``), and why; first drop
    what is older than ``LAYANG_INBOUND_KEEP_DAYS``, and the oldest until the kept bytes
    with this message's fit in ``LAYANG_INBOUND_KEEP_MB``."""
    now = now_ms()
    kept = raw[:RAW_KEPT_BYTES]
    with write_transaction():
        if is_postgresql():
            # Two servers storing at once must not both fill the same room.
            database.execute_sql("SELECT pg_advisory_xact_lock(7412)")
        cutoff = now - config.inbound_keep_days * 86_400_000
        dropped = InboundMessage.delete().where(InboundMessage.received_at < cutoff).execute()
        dropped += _make_room(config.inbound_keep_mb * 1024 * 1024 - len(kept))
        InboundMessage.create(
            received_at=now,
            mail_from=mail_from,
            rcpt_to=json.dumps([m.address for m in mailboxes]),
            size=len(raw),
            raw=kept,
            reason=reason[:1000],
        )
    log.info("unrecognised inbound mail from=%r kept: %s", mail_from[:200], reason)
    if dropped:
        log.info("dropped %d older unrecognised messages (LAYANG_INBOUND_KEEP_*)", dropped)


def _make_room(room: int) -> int:
    """Delete the oldest kept messages until the rest hold at most ``room`` bytes; returns
    how many went."""
    length = peewee.fn.LENGTH(InboundMessage.raw)
    total = InboundMessage.select(peewee.fn.COALESCE(peewee.fn.SUM(length), 0)).scalar()
    excess = int(total) - room
    if excess <= 0:
        return 0
    last = None
    for row_id, size in (
        InboundMessage.select(InboundMessage.id, length).order_by(InboundMessage.id).tuples()
    ):
        last = row_id
        excess -= int(size)
        if excess <= 0:
            break
    return InboundMessage.delete().where(InboundMessage.id <= last).execute()


def list_unrecognised(limit: int = 50) -> list[InboundEntry]:
    """The newest unrecognised messages first."""
    rows = InboundMessage.select().order_by(InboundMessage.id.desc()).limit(limit)
    return [
        InboundEntry(
            id=row.id,
            received_at=row.received_at,
            mail_from=row.mail_from,
            rcpt_to=tuple(json.loads(row.rcpt_to)),
            size=row.size,
            reason=row.reason,
            raw=bytes(row.raw),
        )
        for row in rows
    ]
