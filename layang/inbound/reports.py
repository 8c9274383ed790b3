"""Reading inbound mail into the reports of :mod:`layang.domain.feedback`, by the first
reader that knows the message, in this order:

- :mod:`~layang.inbound.dsn`: delivery status notifications, RFC 3464 and RFC 6533;
- :mod:`~layang.inbound.arf`: complaints, RFC 5965 feedback reports;
- :mod:`~layang.inbound.mta_bounces`: the non-standard notices of MTAs and providers;
- :mod:`~layang.inbound.auto_reply`: RFC 3834 automatic replies (after the bounces, which are
  automatic replies too).

Anything else, and anything that cannot be parsed at all, is ``Unrecognised`` with the reason.
Before anything is parsed, the message's MIME structure is measured by a scan of its bytes: one
with more than ``MAX_PARTS`` parts or ``MAX_DEPTH`` levels of nesting is not parsed (a report
has three parts, two levels deep; the parser's cost grows with the parts). Nothing here raises
on any input: mail comes from anyone.
"""

from __future__ import annotations

import email
import email.message
import email.policy

from layang.domain.feedback import Report, Unrecognised
from layang.inbound.arf import read_arf
from layang.inbound.auto_reply import read_auto_reply
from layang.inbound.boundaries import mended
from layang.inbound.dsn import read_dsn
from layang.inbound.mta_bounces import read_mta_bounce
from layang.inbound.report_parts import MAX_PARTS
from layang.inbound.ses_notifications import read_ses_notification
from layang.mail.mime_shape import MAX_DEPTH, mime_shape_problem

__all__ = ["MAX_DEPTH", "MAX_PARTS", "mime_shape_problem", "read_report"]


def read_report(data: bytes) -> Report:
    """What ``data`` (a whole message as received) reports. Never raises."""
    problem = mime_shape_problem(data)
    if problem is not None:
        return Unrecognised(problem)
    try:
        message = mended(data, email.message_from_bytes(data, policy=email.policy.compat32))
        for reader in (read_dsn, read_arf, read_ses_notification, read_mta_bounce, read_auto_reply):
            report = reader(message)
            if report is not None:
                return report
    except Exception as error:  # malformed mail of any kind is only unrecognised
        return Unrecognised(f"could not be parsed: {type(error).__name__}")
    return Unrecognised("not a delivery status or feedback report")
