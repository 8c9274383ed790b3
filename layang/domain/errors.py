"""What the domain refuses, in its own terms.

Each error has a stable snake_case ``code`` and a one-sentence ``message``. How it is shown is
for the way in: the API maps each class to an HTTP status and the fields it names to the
request's field paths (``layang.api.errors``); the console and the CLI show the message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


class LayangError(Exception):
    code = "internal_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInput(LayangError):
    """A value breaks a rule. ``field`` names it as the domain does (``subject``,
    ``template_id``, ``name``); ``problem`` is a sentence about the value."""

    code = "validation_failed"

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class NotFound(LayangError):
    code = "not_found"


class TemplateNotFound(NotFound):
    code = "template_not_found"

    def __init__(self, template_id: str) -> None:
        super().__init__(f"No template {template_id!r}.")
        self.template_id = template_id


class MessageUnavailable(NotFound):
    """The activity record exists but its message cannot be shown: not stored, or not
    buildable again (the worker bounced it for that reason)."""

    code = "message_unavailable"


class ContentExpired(MessageUnavailable):
    """The record's message content was removed by retention (the record itself stays)."""

    code = "content_expired"


class Conflict(LayangError):
    code = "conflict"


class MessageTooLarge(LayangError):
    code = "payload_too_large"

    def __init__(self, limit: int) -> None:
        super().__init__(f"The message is larger than the {limit} bytes accepted.")
        self.limit = limit


class RecipientNotAuthorized(LayangError):
    """A sandbox account addressed recipients that have not given consent. ``offending`` maps a
    recipient kind (to, cc, bcc) to the (position, address) pairs refused."""

    code = "recipient_not_authorized"

    def __init__(self, offending: Mapping[str, Sequence[tuple[int, str]]]) -> None:
        addresses = dict.fromkeys(a for pairs in offending.values() for _, a in pairs)
        super().__init__(
            "Not verified authorized recipients of this sandbox account: "
            + ", ".join(addresses)
            + "."
        )
        self.offending = offending


class SenderNotAllowed(LayangError):
    """A sandbox account tried to send from an address other than ``allowed``."""

    code = "sender_not_allowed"

    def __init__(self, sender: str, allowed: str) -> None:
        super().__init__(f"Sandbox accounts send from {allowed} only.")
        self.sender = sender
        self.allowed = allowed


class AmbiguousAuthor(LayangError):
    """A submitted message does not name one author: more than one From header, more than
    one address in From, or a group. ``message`` says which."""

    code = "ambiguous_author"


class SenderDomainNotVerified(LayangError):
    """A live account sent from a domain it has not verified, while
    ``LAYANG_REQUIRE_VERIFIED_DOMAIN`` is on."""

    code = "sender_domain_not_verified"

    def __init__(self, sender: str) -> None:
        domain = sender.rpartition("@")[2]
        super().__init__(
            f"{domain} is not a verified sending domain of this account; add and verify it "
            "under /v1/layang/domains."
        )
        self.sender = sender
        self.domain = domain


class Forbidden(LayangError):
    """The API key's scope does not allow this; ``needed`` is the scope that would."""

    code = "forbidden"

    def __init__(self, scope: str, needed: str) -> None:
        allowed = repr(needed) if needed == "full" else f"{needed!r} or 'full'"
        super().__init__(f"This API key has scope {scope!r}; this needs scope {allowed}.")
        self.scope = scope
        self.needed = needed


class RoleNeeded(Forbidden):
    """The signed-in person's role does not allow this; ``needed`` is the least role that
    would (CONTRACT section 21)."""

    def __init__(self, needed: str, role: str | None = None) -> None:
        LayangError.__init__(
            self,
            f"This needs the {needed} role"
            + (f"; you are {role} in this account." if role else "."),
        )
        self.scope = role or ""
        self.needed = needed


class IdempotencyInFlight(Conflict):
    code = "idempotency_in_flight"

    def __init__(self) -> None:
        super().__init__(
            "A request with this Idempotency-Key is still being processed; try again shortly."
        )


class IdempotencyKeyReused(LayangError):
    code = "idempotency_key_reused"

    def __init__(self) -> None:
        super().__init__(
            "This Idempotency-Key was used with a different request; use a new key for it."
        )


class RateLimited(LayangError):
    """The account submitted its ``limit`` messages of the current window; the next window
    opens in ``retry_after`` seconds."""

    code = "rate_limited"

    def __init__(self, limit: str, retry_after: int) -> None:
        super().__init__(f"Rate limit of {limit} messages reached; try again in {retry_after} s.")
        self.limit = limit
        self.retry_after = retry_after


class SendingPaused(LayangError):
    """The circuit breaker paused sending for the account or its From domain (docs/api.md, "Streams
    and the circuit breaker"): ``reason`` names the rate that tripped it."""

    code = "sending_paused"

    def __init__(self, scope: str, reason: str) -> None:
        super().__init__(
            f"Sending is paused for {scope}: {reason}. "
            "An operator lifts it with `layang accounts resume`."
        )
        self.scope = scope
        self.reason = reason
