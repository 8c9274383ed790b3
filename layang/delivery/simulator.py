"""The mailbox simulator: recipients at ``simulator.layang.test`` never leave Layang.

They take the simulator route whatever ``LAYANG_RELAY_URL`` says: its transport records the
outcome below as if a mail server had replied, so that integrators see every outcome (and what
follows from it: Activity, suppression, webhooks) without a real mail server:

==================  ============================================================
``success@``        Delivery
``bounce@``         Bounce, ``550 5.1.1`` (hard)
``softbounce@``     Delay (``451 4.2.1``, soft) on the first attempt, Delivery on the retry
``block@``          Bounce, ``554 5.7.1`` (block)
``complaint@``      Delivery, then a Complaint
anything else       Bounce, ``550 5.1.1`` no such simulator mailbox (hard)
==================  ============================================================

A ``+label`` after the mailbox (``bounce+7@``) keeps its outcome, as Amazon SES's simulator
does: many distinct addresses with one outcome, which the suppression list does not fold into
one (the circuit breaker's tests send to hundreds).
"""

from __future__ import annotations

from layang.delivery.envelope import Envelope
from layang.delivery.outcomes import BOUNCED, DEFERRED, DELIVERED, RecipientResult
from layang.mail.message import SIMULATOR_DOMAIN as DOMAIN
from layang.mail.message import is_simulated

__all__ = ["DOMAIN", "MailboxSimulator", "complains", "is_simulated", "simulate"]


def simulate(address: str, attempt: int) -> RecipientResult:
    """The outcome of delivery attempt number ``attempt`` (1 for the first) to the simulator
    mailbox ``address``, with the reply a server would have given."""
    mailbox = _mailbox(address)
    if mailbox in ("success", "complaint"):
        return RecipientResult(address, 250, "250 2.0.0 simulated delivery", DELIVERED)
    if mailbox == "softbounce" and attempt <= 1:
        reply = f"451 4.2.1 <{address}>: simulated temporary failure, mailbox busy; try again"
        return RecipientResult(address, 451, reply, DEFERRED)
    if mailbox == "softbounce":
        return RecipientResult(address, 250, "250 2.0.0 simulated delivery on retry", DELIVERED)
    if mailbox == "bounce":
        reply = f"550 5.1.1 <{address}>: simulated bounce, no such user"
        return RecipientResult(address, 550, reply, BOUNCED)
    if mailbox == "block":
        reply = f"554 5.7.1 <{address}>: simulated block, message refused by policy"
        return RecipientResult(address, 554, reply, BOUNCED)
    reply = f"550 5.1.1 <{address}>: no such simulator mailbox (use success, bounce, "
    reply += "softbounce, block or complaint)"
    return RecipientResult(address, 550, reply, BOUNCED)


def complains(address: str) -> bool:
    """Whether a delivery to ``address`` is followed by a complaint (``complaint@``)."""
    return is_simulated(address) and _mailbox(address) == "complaint"


def _mailbox(address: str) -> str:
    return address.rpartition("@")[0].lower().partition("+")[0]


COMPLAINT_DETAIL = {"feedbackType": "abuse", "source": "mailbox simulator"}
"""The detail of a simulated complaint, as a feedback report would give it."""


class MailboxSimulator:
    """The simulator's transport: every recipient gets its mailbox's outcome, nothing leaves."""

    def __repr__(self) -> str:
        return "<MailboxSimulator>"

    def deliver(self, envelope: Envelope) -> list[RecipientResult]:
        """The outcome of attempt number ``envelope.attempt`` for each of its recipients."""
        return [simulate(address, envelope.attempt) for address in envelope.recipients]
