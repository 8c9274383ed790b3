"""Bounces that an Amazon SES receipt rule sent (SES receiving: the rule's "Bounce" action).

The domain's owner picks the reply from a fixed set of templates ("Mailbox does not exist",
"Mailbox full", "Message too large", "Message content rejected", "Unknown failure", "Temporary
failure"); SES sends it as a report beginning "This message could not be delivered.", from a
host that marks its mail ``X-SES-Outgoing``. The template says what the owner chose to answer
for the mail the rule caught, not that the receiving side looked the address up: "Mailbox does
not exist" is the rule's refusal (``block``), and the two failures name no cause at all.
"""

from __future__ import annotations

import email.message
import re

from layang.mail.bounce_class import BLOCK, UNDETERMINED

_NOTICE = "This message could not be delivered."
_TEMPLATE_CLASSES = (
    (re.compile(r"^\d{3} [245]\.\d\.\d+ Mailbox does not exist$", re.IGNORECASE), BLOCK),
    (
        re.compile(r"^\d{3} [245]\.\d\.\d+ (?:Unknown|Temporary) failure$", re.IGNORECASE),
        UNDETERMINED,
    ),
)


def stated_class(message: email.message.Message, told: str, diagnostic: str) -> str:
    """The class a receipt rule's bounce template stands for, ``""`` when ``message`` (with
    its notice text ``told``) is no such bounce or its ``diagnostic`` no such template."""
    if message.get("X-SES-Outgoing") is None or not told.startswith(_NOTICE):
        return ""
    for template, klass in _TEMPLATE_CLASSES:
        if template.match(diagnostic.strip()):
            return klass
    return ""
