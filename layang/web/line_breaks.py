"""Long words the console shows (addresses, domain names, host names, server replies) made to
fit narrow columns without breaking mid-word: a line may break before a dot or an at sign, and
a reply loses the echo of the address its row already shows."""

from __future__ import annotations

import re

from markupsafe import Markup, escape

_BREAK_BEFORE = re.compile(r"(?<=.)(?=[.@])")
_ECHOED_ADDRESS = re.compile(r"\s*<[^<>\s]*@[^<>\s]*>:?")


def with_breaks(value: object) -> Markup:
    """``value`` as HTML in which a line may break before each ``.`` and ``@`` (``<wbr>``), so
    that ``ana.lopez@mail.example.org`` wraps as ``ana.lopez`` / ``@mail.example.org`` rather
    than mid-word. Everything else is escaped."""
    parts = _BREAK_BEFORE.split(str(value))
    return Markup("<wbr>").join(escape(part) for part in parts)


def reply_gist(reply: str) -> str:
    """A server's reply without the ``<address>:`` it echoes, which its row already shows, so
    that the reason (``User unknown``) comes first after the codes: ``550 5.1.1 <a@b.test>:
    Recipient address rejected: User unknown`` reads ``550 5.1.1 Recipient address rejected:
    User unknown``."""
    return " ".join(_ECHOED_ADDRESS.sub(" ", reply).split())
