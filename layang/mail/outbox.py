"""The outbox's way in: ``enqueue`` stores an accepted message and queues one email per
recipient, in one durable transaction. Every way in (API, SMTP, the consent email) ends here;
``layang.delivery`` takes the emails out again.

A recipient row is due while ``next_attempt_at`` is set and has passed (see
``layang.queueing.leases``).

A large message's stored form is written in chunks (``StoredPayload``): its whole JSON text,
and the database driver's copy of it, would each cost another copy of the request body.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from json.encoder import encode_basestring_ascii
from typing import Any

from layang.clock import now_ms
from layang.db import Batch, RowStream, database, insert_atomically, is_postgresql
from layang.ids import new_id
from layang.mail.events import event_batches, injection_batches
from layang.mail.message import OutgoingMessage, domain_of
from layang.mail.suppression import suppressed_addresses, suppressed_event_detail
from layang.models import (
    INJECTION,
    SCHEDULED,
    STREAM_PRIORITY,
    SUPPRESSED,
    TRANSACTIONAL,
    Account,
    PayloadChunk,
    Recipient,
    Transmission,
    TransmissionTag,
)

QUEUED_CHANNEL = "layang_mail"
"""The PostgreSQL notification channel told of every enqueue."""

log = logging.getLogger("layang.outbox")

TRANSMISSION_FIELDS = (
    "id",
    "account",
    "created_at",
    "source",
    "mail_from",
    "from_header",
    "subject",
    "message_id",
    "metadata",
    "payload",
    "raw",
    "tls_requirement",
    "stream",
    "from_domain",
)
RECIPIENT_FIELDS = (
    "id",
    "transmission",
    "account",
    "address",
    "recipient_type",
    "status",
    "created_at",
    "updated_at",
    "attempts",
    "next_attempt_at",
    "domain",
    "priority",
)
PERSONAL_FIELDS = ("content", "metadata")
TAG_FIELDS = ("transmission", "account", "tag")
"""Recipient columns written only for a send whose recipients have data of their own: the
common send's rows stay as small as before."""


PAYLOAD_CHUNK_CHARS = 256 * 1024
"""A message whose content is larger than this has its payload stored in ``PayloadChunk`` rows
of about this many characters. Small enough that the database driver's copies of one chunk (a
few times its size with psycopg2, which escapes it into the statement's text) stay far below
the body of a request that large."""

PAYLOAD_CHUNK_FIELDS = ("transmission", "seq", "text")

_JSON = json.JSONEncoder(separators=(",", ":"))


class StoredPayload:
    """The stored form of ``message`` (``OutgoingMessage.to_payload`` as compact JSON): the text
    itself (``inline``, for the ``payload`` column), or, for a large message, the rows of its
    ``PayloadChunk`` table made one at a time (``chunk_rows``), so that the text is never
    whole in memory beside the message it is made from."""

    def __init__(self, message: OutgoingMessage) -> None:
        payload = message.to_payload()
        self.inline: str | None = None
        self._chunked: dict[str, Any] | None = None
        if message.content_size() > PAYLOAD_CHUNK_CHARS:
            self._chunked = payload
        else:
            self.inline = json.dumps(payload, separators=(",", ":"))

    def chunk_rows(self, transmission_id: str) -> Iterator[tuple[str, int, str]]:
        """(transmission id, seq, text) of each chunk, in order; none for an inline payload."""
        if self._chunked is None:
            return
        pieces = json_pieces(self._chunked, PAYLOAD_CHUNK_CHARS)
        for seq, text in enumerate(_joined(pieces, PAYLOAD_CHUNK_CHARS)):
            yield transmission_id, seq, text


def json_pieces(value: Any, size: int) -> Iterator[str]:
    """``value`` (JSON data, objects' keys strings) as ``json.dumps(value, separators=(",",
    ":"))`` writes it, in pieces: a string longer than ``size`` characters comes escaped in
    slices of ``size``, so that its JSON text is never made whole. Escaping works character by
    character, so the slices' escapes joined are the whole string's."""
    if isinstance(value, str) and len(value) > size:
        yield '"'
        for start in range(0, len(value), size):
            yield encode_basestring_ascii(value[start : start + size])[1:-1]
        yield '"'
    elif isinstance(value, dict):
        separator = "{"
        for key, item in value.items():
            yield f"{separator}{_JSON.encode(key)}:"
            yield from json_pieces(item, size)
            separator = ","
        yield "}" if separator == "," else "{}"
    elif isinstance(value, list | tuple):
        separator = "["
        for item in value:
            yield separator
            yield from json_pieces(item, size)
            separator = ","
        yield "]" if separator == "," else "[]"
    else:
        yield _JSON.encode(value)


def _joined(pieces: Iterable[str], size: int) -> Iterator[str]:
    """``pieces`` joined into texts of at least ``size`` characters (the last one shorter)."""
    held: list[str] = []
    length = 0
    for piece in pieces:
        held.append(piece)
        length += len(piece)
        if length >= size:
            text = "".join(held)
            held.clear()
            length = 0
            yield text
    if held:
        yield "".join(held)


@dataclass(frozen=True, slots=True)
class PersonalContent:
    """One recipient's subject and bodies, rendered for it alone (the rest of its copy is the
    message's)."""

    subject: str
    text: str | None
    html: str | None

    def to_json(self) -> str:
        """The stored form: ``{"subject", "text"?, "html"?}``."""
        stored: dict[str, Any] = {"subject": self.subject}
        if self.text is not None:
            stored["text"] = self.text
        if self.html is not None:
            stored["html"] = self.html
        return json.dumps(stored, separators=(",", ":"))

    @staticmethod
    def apply(message: OutgoingMessage, stored: str) -> OutgoingMessage:
        """``message`` with the subject and bodies of ``stored`` (``to_json``'s text)."""
        content = json.loads(stored)
        return replace(
            message, subject=content["subject"], text=content.get("text"), html=content.get("html")
        )


@dataclass(frozen=True, slots=True)
class PersonalCopy:
    """What is one recipient's own: its content (None: the message's) and its metadata, merged
    over the message's (None: the message's)."""

    content: PersonalContent | None = None
    metadata: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Submission:
    """A message accepted by one of the ways in, ready to be stored: either ``message`` (built
    into MIME by the worker) or ``raw``, finished MIME bytes (SMTP submissions).

    ``suppressed`` maps the lower-cased recipients on the suppression list to the reason
    (see ``suppressed_addresses``): they get a ``Suppressed`` record and are never queued."""

    transmission_id: str
    created_at: int
    source: str
    mail_from: str
    from_header: str
    subject: str
    message_id: str
    metadata: Mapping[str, Any]
    recipients: Sequence[tuple[str, str]]
    message: OutgoingMessage | None = None
    raw: bytes | None = None
    suppressed: Mapping[str, str] = field(default_factory=dict)
    tls_requirement: str | None = None  # see ``layang.mail.message.tls_requirement``
    stream: str = TRANSACTIONAL
    personal: Mapping[str, PersonalCopy] = field(default_factory=dict)
    """What is some ``to`` recipients' own, by lower-cased address."""
    tags: tuple[str, ...] = ()
    """The send's tags, each once (see ``layang.mail.message.tag_problem``)."""
    scheduled_at: int | None = None
    """When the send is due (epoch ms): its recipients wait ``Scheduled`` until then, out of
    the queue (``layang.mail.schedule``). None: queued now."""

    @property
    def from_domain(self) -> str:
        """The domain of the From header, lower-cased: the sending domain the circuit breaker
        counts for."""
        try:
            address = json.loads(self.from_header)["email"]
        except (ValueError, KeyError, TypeError):
            address = self.mail_from
        return address.rpartition("@")[2].rstrip(".").lower()


def recipient_domain(address: str) -> str:
    """The domain a recipient row is grouped by: the part after the last ``@``, lower-cased
    (as migration 10 backfills it)."""
    return domain_of(address).lower()


def enqueue(account: Account, submission: Submission, also: Sequence[Batch] = ()) -> None:
    """Store ``submission`` and queue one email per recipient, in one durable transaction,
    with the rows of ``also`` (an idempotency key's answer): all or nothing. A suppressed
    recipient's record is stored ``Suppressed``, with its event, and never queued; the
    others' Injection events go to webhooks. A recipient of ``submission.personal`` keeps its
    own content and metadata on its row."""
    batches, injected = _submission_batches(account, submission)
    insert_atomically([*batches, *also])
    if injected and is_postgresql():
        # Wakes idle workers at once (they LISTEN; see layang.delivery.wakeup).
        database.execute_sql(f"NOTIFY {QUEUED_CHANNEL}")


MAX_PARAMETERS = 30_000
"""Values one merged INSERT may carry (SQLite allows 32,766 by default)."""

_RANK = {Transmission: 0, TransmissionTag: 1, PayloadChunk: 2, Recipient: 3}


def enqueue_many(
    account: Account, submissions: Sequence[Submission], also: Sequence[Batch] = ()
) -> None:
    """Store every one of ``submissions`` as ``enqueue`` does, all in one durable transaction
    with the rows of ``also``: each table's rows go in as few INSERT statements as the
    database's parameter limit allows (a batch of sends costs a few statements, not a few per
    message)."""
    ranked: list[tuple[int, int, Batch]] = []
    injected = False
    for submission in submissions:
        batches, some = _submission_batches(account, submission)
        injected = injected or bool(some)
        for batch in batches:
            model = batch[0] if isinstance(batch, tuple) else getattr(batch, "model", None)
            ranked.append((_RANK.get(model, 4), len(ranked), batch))
    ranked.sort(key=lambda item: (item[0], item[1]))
    merged: list[Batch] = []
    for _, _, batch in ranked:
        last = merged[-1] if merged else None
        if (
            isinstance(batch, tuple)
            and isinstance(last, tuple)
            and last[0] is batch[0]
            and last[1] == batch[1]
            and (len(last[2]) + len(batch[2])) * len(batch[1]) <= MAX_PARAMETERS
        ):
            merged[-1] = (last[0], last[1], [*last[2], *batch[2]])
        else:
            merged.append(batch)
    insert_atomically([*merged, *also])
    if injected and is_postgresql():
        database.execute_sql(f"NOTIFY {QUEUED_CHANNEL}")


def _submission_batches(account: Account, submission: Submission) -> tuple[list[Batch], list[str]]:
    """The inserts that store ``submission`` (see ``enqueue``), and the recipients injected."""
    created = submission.created_at
    scheduled = submission.scheduled_at
    # A scheduled recipient is not due (no next attempt) and not yet injected.
    waiting = (SCHEDULED, None) if scheduled is not None else (INJECTION, created)
    personal = submission.personal
    personalized = any(copy.content is not None for copy in personal.values())
    recipient_ids = [new_id() for _ in submission.recipients]
    stored = None if submission.message is None else StoredPayload(submission.message)
    transmission_row = (
        submission.transmission_id,
        account.id,
        created,
        submission.source,
        submission.mail_from,
        submission.from_header,
        submission.subject,
        submission.message_id,
        json.dumps(submission.metadata),
        None if stored is None else stored.inline,
        submission.raw,
        submission.tls_requirement,
        submission.stream,
        submission.from_domain,
    )
    recipient_rows = []
    injected: list[str] = []
    suppressed_events = []
    priority = STREAM_PRIORITY[submission.stream]
    for rid, (address, kind) in zip(recipient_ids, submission.recipients, strict=True):
        reason = submission.suppressed.get(address.lower())
        domain = recipient_domain(address)
        own = personal.get(address.lower()) if personal else None
        extra: tuple[str | None, ...] = (None, None) if personal else ()
        if own is not None:
            extra = (
                None if own.content is None else own.content.to_json(),
                None if own.metadata is None else json.dumps(own.metadata),
            )
        if scheduled is not None:
            extra += (scheduled if reason is None else None,)
        if reason is None:
            row = (rid, submission.transmission_id, account.id, address, kind, waiting[0])
            recipient_rows.append((*row, created, created, 0, waiting[1], domain, priority, *extra))
            injected.append(rid)
        else:
            row = (rid, submission.transmission_id, account.id, address, kind, SUPPRESSED)
            recipient_rows.append((*row, created, created, 0, None, domain, priority, *extra))
            suppressed_events.append((rid, SUPPRESSED, created, suppressed_event_detail(reason)))
    chunks = []
    if stored is not None and stored.inline is None:
        rows = functools.partial(stored.chunk_rows, submission.transmission_id)
        chunks.append(RowStream(PayloadChunk, PAYLOAD_CHUNK_FIELDS, rows))
    transmission_fields, recipient_fields = TRANSMISSION_FIELDS, RECIPIENT_FIELDS
    if personal:
        transmission_fields += ("personalized",)
        transmission_row += (int(personalized),)
        recipient_fields += PERSONAL_FIELDS
    if scheduled is not None:
        transmission_fields += ("scheduled_at",)
        transmission_row += (scheduled,)
        recipient_fields += ("scheduled_at",)
        injected = []  # injected when released (``layang.mail.schedule``)
    tags = []
    if submission.tags:
        transmission_fields += ("tags",)
        transmission_row += (json.dumps(list(submission.tags)),)
        # Before the recipients: the overview's triggers count their Injection per tag.
        rows = [(submission.transmission_id, account.id, tag) for tag in submission.tags]
        tags.append((TransmissionTag, TAG_FIELDS, rows))
    batches: list[Batch] = [
        (Transmission, transmission_fields, [transmission_row]),
        *tags,
        *chunks,
        (Recipient, recipient_fields, recipient_rows),
        *event_batches(suppressed_events),
        *injection_batches(account.id, injected, created),
    ]
    return batches, injected


def queue_message(
    account: Account,
    message: OutgoingMessage,
    metadata: Mapping[str, Any],
    source: str = "api",
    *,
    transmission_id: str | None = None,
    also: Sequence[Batch] = (),
    suppressed: Mapping[str, str] | None = None,
    personal: Mapping[str, PersonalCopy] | None = None,
    tags: tuple[str, ...] = (),
    scheduled_at: int | None = None,
) -> str:
    """Queue ``message`` (addresses normalised, rules checked) for each of its recipients,
    under ``transmission_id`` (default: a new one) and with the rows of ``also`` (see
    ``enqueue``); returns the transmission id once it is durably stored. The message is dated
    now. ``suppressed`` is what ``suppressed_addresses`` found for it, looked up here when
    None; ``personal`` what is some ``to`` recipients' own (see ``Submission.personal``);
    ``tags`` the send's tags; ``scheduled_at`` when it is due (None: now)."""
    submission = message_submission(
        account,
        message,
        metadata,
        source,
        transmission_id=transmission_id,
        suppressed=suppressed,
        personal=personal,
        tags=tags,
        scheduled_at=scheduled_at,
    )
    enqueue(account, submission, also)
    log.info(
        "accepted tid=%s account=%s recipients=%d source=%s",
        submission.transmission_id,
        account.name,
        len(submission.recipients),
        source,
    )
    return submission.transmission_id


def message_submission(
    account: Account,
    message: OutgoingMessage,
    metadata: Mapping[str, Any],
    source: str = "api",
    *,
    transmission_id: str | None = None,
    suppressed: Mapping[str, str] | None = None,
    personal: Mapping[str, PersonalCopy] | None = None,
    tags: tuple[str, ...] = (),
    scheduled_at: int | None = None,
) -> Submission:
    """``message`` as a :class:`Submission` ready to store (see ``queue_message``), dated
    now."""
    transmission_id = transmission_id or new_id()
    recipients = message.envelope_recipients()
    if suppressed is None:
        suppressed = suppressed_addresses(
            account.id, (a for a, _ in recipients), transactional=message.is_transactional
        )
    accepted_at = now_ms()
    message = replace(message, date_ms=accepted_at)
    sender = message.sender
    submission = Submission(
        transmission_id=transmission_id,
        created_at=accepted_at,
        source=source,
        mail_from=sender.email,
        from_header=json.dumps(
            {"email": sender.email, "name": sender.name} if sender.name else {"email": sender.email}
        ),
        subject=message.subject,
        message_id=f"<{transmission_id}@{domain_of(sender.email)}>",
        metadata=metadata,
        recipients=recipients,
        message=message,
        suppressed=suppressed,
        tls_requirement=message.tls_requirement,
        stream=message.stream,
        personal=personal or {},
        tags=tags,
        scheduled_at=scheduled_at,
    )
    return submission
