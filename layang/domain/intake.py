"""Accepting a message, whichever way it came in: the rules that apply once a request is well
formed, in one order, then ``enqueue``.

The HTTP API hands in a ``TransmissionRequest`` (a typed message, perhaps a template to fill
in); SMTP submission a ``SubmittedMessage`` (finished MIME bytes and their envelope). Both go
through ``accept_transmission``: content, size, sender, recipients, rate limit, suppression list,
then one durable transaction with the idempotency key's answer. Each way in maps the domain
errors it raises to its own replies in one place (``layang.api.errors``,
``layang.submission.server``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import peewee

import templates_store
from layang.clock import now_ms
from layang.config import Config
from layang.db import Batch
from layang.domain.breaker import check_sending
from layang.domain.errors import (
    AmbiguousAuthor,
    IdempotencyInFlight,
    InvalidInput,
    LayangError,
    MessageTooLarge,
    TemplateNotFound,
)
from layang.domain.idempotency import Claim
from layang.domain.rate_limits import take
from layang.domain.sandbox import check_recipients, check_sender
from layang.domain.sending_domains import check_sender_domain
from layang.ids import new_id
from layang.mail.message import (
    MAX_TAGS,
    RECIPIENT_KINDS,
    Mailbox,
    OutgoingMessage,
    distinct_tags,
    domain_of,
    tag_problem,
    tls_requirement,
)
from layang.mail.outbox import (
    PersonalContent,
    PersonalCopy,
    Submission,
    enqueue,
    enqueue_many,
    message_submission,
)
from layang.mail.submitted import PreparedMessage
from layang.mail.suppression import applies, listed_reasons, suppressed_addresses
from layang.models import STREAMS, TRANSACTIONAL, Account

log = logging.getLogger("layang.outbox")

MAX_METADATA_BYTES = 10 * 1024
"""Metadata is kept with every activity record and webhook event: at most this much, as
compact UTF-8 JSON."""
MAX_SCHEDULE_DAYS = 30
"""How far ahead a send may be scheduled (CONTRACT section 23)."""
MAX_METADATA_DEPTH = 32
"""Levels of nesting metadata may have, the object itself being the first."""


def metadata_object(value: Any) -> dict[str, Any]:
    """The metadata a client sent, as the one object kept with the message.

    ``value`` is decoded JSON: an object, or a list of objects merged in order into one (the
    shape Mailtarget's Node SDK documents), a later object's key replacing an earlier one's, as
    ``Object.assign`` does. Values are any JSON and are kept verbatim. Raises ``ValueError``,
    its text one sentence, for anything else, for more than :data:`MAX_METADATA_DEPTH` levels
    and for more than :data:`MAX_METADATA_BYTES`.
    """
    if isinstance(value, list):
        if not all(isinstance(item, dict) for item in value):
            raise ValueError("Not a valid mapping type: give an object or a list of objects.")
        merged: dict[str, Any] = {}
        for item in value:
            merged.update(item)
        value = merged
    elif not isinstance(value, dict):
        raise ValueError("Not a valid mapping type.")
    # Measured without recursion, so nesting deep enough to exhaust the stack is a clean
    # refusal too.
    level = [value]
    for depth in range(1, MAX_METADATA_DEPTH + 2):
        if depth > MAX_METADATA_DEPTH:
            raise ValueError(f"Nested more than {MAX_METADATA_DEPTH} levels deep.")
        level = [
            child
            for node in level
            for child in (node.values() if isinstance(node, dict) else node)
            if isinstance(child, dict | list)
        ]
        if not level:
            break
    size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())
    if size > MAX_METADATA_BYTES:
        raise ValueError(f"Larger than {MAX_METADATA_BYTES} bytes as JSON ({size}).")
    return value


@dataclass(frozen=True, slots=True)
class RecipientData:
    """A ``to`` recipient's own data: ``substitution_data`` merged over the request's for its
    copy, ``metadata`` (None: none given) merged over the request's on its record."""

    mailbox: Mailbox
    substitution_data: Mapping[str, Any] = field(default_factory=dict)
    metadata: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class TransmissionRequest:
    """A send as a client asked for it: the message (a draft, when a template fills in its
    subject and bodies), the template and its data, metadata kept with every record, and the
    ``to`` recipients' own data (``recipient_data``, in the order given)."""

    message: OutgoingMessage
    template_id: str | None = None
    substitution_data: Mapping[str, Any] = field(default_factory=dict)
    metadata: Mapping[str, Any] = field(default_factory=dict)
    recipient_data: tuple[RecipientData, ...] = ()
    tags: tuple[str, ...] = ()
    scheduled_at: int | None = None
    """When to send, epoch ms (None: now)."""


def _render_template(
    account: Account,
    request: TransmissionRequest,
    data: Mapping[str, Any] | None = None,
    field_path: str = "",
) -> OutgoingMessage:
    """The message with subject and bodies from the template's current version, rendered now:
    the message is fixed at acceptance, whatever happens to the template before it is relayed.

    A body the request carries is used only for a part the template lacks (published client
    libraries always send one, as a fallback). A request subject replaces the template's and
    is rendered with the same data, raw, as a template subject is.
    """
    template_id = request.template_id
    try:
        _, compiled = templates_store.compiled_version(account.id, template_id)
    except templates_store.TemplateNotFound:
        raise TemplateNotFound(template_id) from None
    data = dict(request.substitution_data if data is None else data)
    rendered = compiled.render(data)
    text = rendered.body_text or request.message.text
    html = rendered.body_html or request.message.html
    if text is None and html is None:
        raise InvalidInput("template_id", f"Template {template_id!r} renders no body.")
    subject_field = f"{field_path}substitutionData" if field_path else "subject"
    if request.message.subject:
        try:
            subject = templates_store.render_subject(request.message.subject, data).strip()
        except templates_store.TemplateSyntaxError as error:
            raise InvalidInput("subject", f"Not a valid template: {error.detail}.") from None
        except templates_store.RenderError as error:
            raise InvalidInput(subject_field, f"Could not render: {error.detail}.") from None
        if not subject:
            raise InvalidInput(subject_field, "Renders as nothing with this substitutionData.")
    else:
        if not rendered.subject or not rendered.subject.strip():
            raise InvalidInput(subject_field, "Missing, and the template has no subject.")
        subject = rendered.subject.strip()
    return replace(request.message, subject=subject, text=text, html=html)


def _personal_copies(
    account: Account, request: TransmissionRequest, config: Config
) -> dict[str, PersonalCopy]:
    """What differs for each ``to`` recipient who brought data of its own, by lower-cased
    address (the first entry of an address listed twice): its copy's subject and bodies
    rendered with the merged substitution data, its merged metadata. Raises ``InvalidInput``
    naming ``to.<index>.substitutionData`` or ``to.<index>.metadata``, and
    ``MessageTooLarge`` for a copy over ``LAYANG_MAX_MESSAGE_BYTES``."""
    copies: dict[str, PersonalCopy] = {}
    for index, entry in enumerate(request.recipient_data):
        key = entry.mailbox.email.lower()
        if key in copies:
            continue
        content = None
        if entry.substitution_data and request.template_id is not None:
            data = {**request.substitution_data, **entry.substitution_data}
            rendered = _render_template(account, request, data, f"to.{index}.")
            if rendered.content_size() > config.max_message_bytes:
                raise MessageTooLarge(config.max_message_bytes)
            content = PersonalContent(rendered.subject, rendered.text, rendered.html)
        metadata = None
        if entry.metadata is not None:
            try:
                metadata = metadata_object({**request.metadata, **entry.metadata})
            except ValueError as error:
                raise InvalidInput(f"to.{index}.metadata", str(error)) from None
        copies[key] = PersonalCopy(content, metadata)
    return copies


def schedule_time(scheduled_at: int | None, now: int | None = None) -> int | None:
    """The time a send is held until (epoch ms), or None to send now: a time not in the future
    means now. Raises ``InvalidInput`` naming ``scheduledAt`` beyond
    :data:`MAX_SCHEDULE_DAYS` days ahead."""
    if scheduled_at is None:
        return None
    now = now_ms() if now is None else now
    if scheduled_at <= now:
        return None
    if scheduled_at > now + MAX_SCHEDULE_DAYS * 86_400_000:
        raise InvalidInput("scheduledAt", f"At most {MAX_SCHEDULE_DAYS} days ahead.")
    return scheduled_at


@dataclass(frozen=True, slots=True)
class Accepted:
    """A queued message: its id, and the recipients on the suppression list (each has a
    ``Suppressed`` record and is never sent to), in the order given."""

    transmission_id: str
    suppressed: tuple[str, ...] = ()

    def answer(self) -> str:
        """The API's 200 body, as an idempotency key records it. ``suppressed`` appears only
        when some recipient is: clients that check the answer's keys keep working."""
        body: dict[str, Any] = {"transmissionId": self.transmission_id}
        if self.suppressed:
            body["suppressed"] = list(self.suppressed)
        return json.dumps(body, separators=(",", ":"))


def send_answer(transmission_id: str) -> str:
    """A send's answer with no suppressed recipient (the SMTP submission's, for a replay)."""
    return Accepted(transmission_id).answer()


@dataclass(frozen=True, slots=True)
class SubmittedMessage:
    """A message submitted finished (SMTP): its envelope, and its bytes as they will be relayed
    (``layang.mail.submitted.prepare_submission``, under ``transmission_id``, dated
    ``accepted_at``)."""

    transmission_id: str
    accepted_at: int
    mail_from: str
    recipients: tuple[str, ...]
    prepared: PreparedMessage
    require_tls: bool = False  # the REQUIRETLS MAIL parameter

    @property
    def tags(self) -> tuple[str, ...]:
        """The ``X-Layang-Tag`` headers' values, each once. Raises ``InvalidInput`` for a value
        that is no tag and for more than ``MAX_TAGS``."""
        tags = distinct_tags(self.prepared.tags)
        for tag in tags:
            problem = tag_problem(tag)
            if problem:
                raise InvalidInput("X-Layang-Tag", f"{tag[:40]!r}: {problem}")
        if len(tags) > MAX_TAGS:
            raise InvalidInput("X-Layang-Tag", f"At most {MAX_TAGS} tags ({len(tags)} given).")
        return tags

    @property
    def stream(self) -> str:
        """The ``X-Layang-Stream`` header's stream, transactional without one. Raises
        ``InvalidInput`` for any other value."""
        given = self.prepared.stream
        if given is None:
            return TRANSACTIONAL
        if given.strip().lower() not in STREAMS:
            raise InvalidInput(
                "X-Layang-Stream",
                f"{given[:40]!r} is not a stream: use transactional or broadcast.",
            )
        return given.strip().lower()

    def kind_of(self, address: str) -> str:
        """``to``, ``cc`` or ``bcc``: where the headers name ``address`` (nowhere: a bcc)."""
        key = address.lower()
        if key in self.prepared.header_to:
            return "to"
        return "cc" if key in self.prepared.header_cc else "bcc"


def accept_transmission(
    account: Account,
    request: TransmissionRequest | SubmittedMessage,
    config: Config,
    claim: Claim | None = None,
) -> Accepted:
    """Queue the requested message; returns its transmission id and its suppressed recipients
    once it is durably stored, with the answer to ``claim``'s idempotency key when one is given.

    In this order, raises ``AmbiguousAuthor`` for a submitted message whose From names other
    than one address; ``TemplateNotFound`` for an unknown template and ``InvalidInput``
    when the template leaves the message without a body or subject; ``MessageTooLarge`` over
    ``LAYANG_MAX_MESSAGE_BYTES``; ``SenderNotAllowed`` / ``SenderDomainNotVerified`` for a From
    the account may not use (a sandbox account: only the sandbox sender; with
    ``LAYANG_REQUIRE_VERIFIED_DOMAIN``, only its verified domains); ``RecipientNotAuthorized``
    when a sandbox account names a recipient who has not consented; ``SendingPaused`` when the
    circuit breaker paused the message's stream for the account or its From domain;
    ``RateLimited`` over
    ``LAYANG_RATE_LIMIT`` (only messages passing every other rule count);
    ``IdempotencyInFlight`` when another request with the key committed first. Nothing is
    queued when it raises.
    """
    if isinstance(request, SubmittedMessage):
        if request.prepared.authorship_problem:
            raise AmbiguousAuthor(request.prepared.authorship_problem)
        sender = request.prepared.from_address["email"]
        size = len(request.prepared.raw)
        stream = request.stream
        request.tags  # noqa: B018 - refused here, before any other rule, like the stream
        _check(account, sender, size, {"to": list(request.recipients)}, stream, config)
        return _enqueue_submitted(account, request, claim)
    accepted, submission = prepare_transmission(account, request, config)
    answer = claim.answer_rows(200, accepted.answer()) if claim else ()
    try:
        enqueue(account, submission, answer)
    except peewee.IntegrityError:
        if claim is None:
            raise
        # Only the answer's unique key can clash: a holder of the same key got there first.
        raise IdempotencyInFlight() from None
    _log_accepted(account, submission)
    return accepted


def _log_accepted(account: Account, submission: Submission) -> None:
    log.info(
        "accepted tid=%s account=%s recipients=%d source=%s",
        submission.transmission_id,
        account.name,
        len(submission.recipients),
        submission.source,
    )


def _check(
    account: Account,
    sender: str,
    size: int,
    recipients: dict[str, list[str]],
    stream: str,
    config: Config,
) -> None:
    if size > config.max_message_bytes:
        raise MessageTooLarge(config.max_message_bytes)
    # The header From is what recipients see and what DKIM and DMARC align with.
    check_sender(account, sender, config)
    check_sender_domain(account, sender, config)
    check_recipients(account, recipients)
    check_sending(account, domain_of(sender).rstrip(".").lower(), stream, config)
    take(account, config.rate_limit)


def prepare_transmission(
    account: Account,
    request: TransmissionRequest,
    config: Config,
    listed: Mapping[str, str] | None = None,
) -> tuple[Accepted, Submission]:
    """Apply every rule of ``accept_transmission`` to ``request`` (counting it against the
    rate limit) and return its answer and what to store, stored by nobody yet. Raises what
    ``accept_transmission`` raises, and ``InvalidInput`` naming ``scheduledAt`` beyond
    ``MAX_SCHEDULE_DAYS``. ``listed`` is what ``listed_reasons`` found for (at least) its
    recipients, looked up here when None."""
    scheduled_at = schedule_time(request.scheduled_at)
    message = request.message
    if request.template_id is not None:
        message = _render_template(account, request)
    personal = _personal_copies(account, request, config) if request.recipient_data else {}
    recipients = {
        kind: [mailbox.email for mailbox in getattr(message, kind)]
        for kind in RECIPIENT_KINDS
        if getattr(message, kind)
    }
    _check(account, message.sender.email, message.content_size(), recipients, message.stream,
           config)  # fmt: skip
    addresses = [address for address, _ in message.envelope_recipients()]
    transactional = message.is_transactional
    if listed is None:
        suppressed = suppressed_addresses(account.id, addresses, transactional=transactional)
    else:
        keys = (address.lower() for address in addresses)
        suppressed = {
            k: listed[k] for k in keys if k in listed and applies(listed[k], transactional)
        }
    accepted = Accepted(new_id(), tuple(a for a in addresses if a.lower() in suppressed))
    submission = message_submission(
        account,
        message,
        request.metadata,
        transmission_id=accepted.transmission_id,
        suppressed=suppressed,
        personal=personal,
        tags=request.tags,
        scheduled_at=scheduled_at,
    )
    return accepted, submission


MAX_BATCH = 500
"""Messages one batch request may carry (CONTRACT section 23)."""


def prepare_batch(
    account: Account,
    requests: Sequence[TransmissionRequest | Exception],
    config: Config,
) -> list[tuple[Accepted, Submission] | Exception]:
    """Each of ``requests`` prepared alone, in order (see ``prepare_transmission``): its answer
    and submission, or the domain or template error that refused it. An item that is an
    exception already (refused by the way in) stays as it is."""
    # One look-up of the suppression list for every recipient of the batch.
    listed = listed_reasons(
        account.id,
        (
            mailbox.email
            for request in requests
            if isinstance(request, TransmissionRequest)
            for kind in RECIPIENT_KINDS
            for mailbox in getattr(request.message, kind)
        ),
    )
    prepared: list[tuple[Accepted, Submission] | Exception] = []
    for request in requests:
        if isinstance(request, Exception):
            prepared.append(request)
            continue
        try:
            prepared.append(prepare_transmission(account, request, config, listed))
        except (LayangError, templates_store.TemplateStoreError) as error:
            prepared.append(error)
    return prepared


def store_batch(
    account: Account, submissions: Sequence[Submission], also: Sequence[Batch] = ()
) -> None:
    """Store every one of ``submissions`` with the rows of ``also`` (the batch's idempotency
    answer) in one durable transaction. Raises ``IdempotencyInFlight`` when ``also`` is given
    and another request with the key committed first."""
    try:
        enqueue_many(account, submissions, also)
    except peewee.IntegrityError:
        if not also:
            raise
        raise IdempotencyInFlight() from None
    for submission in submissions:
        _log_accepted(account, submission)


def _enqueue_submitted(
    account: Account, submitted: SubmittedMessage, claim: Claim | None
) -> Accepted:
    prepared = submitted.prepared
    suppressed = suppressed_addresses(
        account.id, submitted.recipients, transactional=submitted.stream == TRANSACTIONAL
    )
    accepted = Accepted(
        submitted.transmission_id,
        tuple(a for a in submitted.recipients if a.lower() in suppressed),
    )
    # The SMTP reply names only the id, and a replay answers like the first message.
    answer = claim.answer_rows(200, send_answer(accepted.transmission_id)) if claim else ()
    submission = Submission(
        transmission_id=submitted.transmission_id,
        created_at=submitted.accepted_at,
        source="smtp",
        mail_from=submitted.mail_from,
        from_header=json.dumps(prepared.from_address),
        subject=prepared.subject,
        message_id=prepared.message_id,
        metadata={},
        recipients=[(address, submitted.kind_of(address)) for address in submitted.recipients],
        raw=prepared.raw,
        suppressed=suppressed,
        tls_requirement=tls_requirement(submitted.require_tls, prepared.tls_required),
        stream=submitted.stream,
        tags=submitted.tags,
    )
    try:
        enqueue(account, submission, answer)
    except peewee.IntegrityError:
        if claim is None:
            raise
        raise IdempotencyInFlight() from None
    log.info(
        "accepted tid=%s account=%s recipients=%d source=smtp",
        submitted.transmission_id,
        account.name,
        len(submitted.recipients),
    )
    return accepted
