"""PowerMTA's own verdict in its delivery reports: the ``X-PowerMTA-BounceCategory`` extension
field (RFC 3464 §3 allows ``X-`` fields) of each recipient's block, the category PowerMTA's
bounce classification gave the remote reply.

Only the categories that say what Layang's classes say are taken; ``other``, and any
category not listed, leave the decision to the reply itself.
"""

from __future__ import annotations

import email.message

from layang.inbound import report_parts as mime
from layang.mail.bounce_class import BLOCK, HARD, SOFT

FIELD = "X-PowerMTA-BounceCategory"
CATEGORY_CLASSES = {
    "bad-mailbox": HARD,
    "bad-domain": HARD,
    "inactive-mailbox": SOFT,
    "quota-issues": SOFT,
    "message-expired": SOFT,
    "no-answer-from-host": SOFT,
    "routing-errors": SOFT,
    "policy-related": BLOCK,
    "spam-related": BLOCK,
    "virus-related": BLOCK,
    "content-related": BLOCK,
    "relaying-issues": BLOCK,
}


def stated_class(block: email.message.Message) -> str:
    """The class PowerMTA states for one recipient's block of a report, ``""`` if none."""
    return CATEGORY_CLASSES.get(mime.value(block, FIELD).lower(), "")
