"""Asking SpamAssassin's ``spamd`` for a message's score, as ``spamc`` does (the SPAMC/1.5
protocol: a ``CHECK`` request, the ``Spam: True ; 7.1 / 5.0`` answer header).

A score is advice: when ``spamd`` cannot be reached or answers oddly, the message gets no score
(and is delivered as if none were configured), and the reason is logged.
"""

from __future__ import annotations

import logging
import re
import socket

from layang.config import parse_bind

log = logging.getLogger("layang.inbound")

TIMEOUT_SECONDS = 30.0
MAX_ANSWER_BYTES = 64 * 1024
_SCORE = re.compile(rb"^Spam:\s*(?:True|False|Yes|No)\s*;\s*(-?[0-9.]+)\s*/", re.I | re.M)


def spam_score(address: str, data: bytes, timeout: float = TIMEOUT_SECONDS) -> float | None:
    """The score ``spamd`` at ``address`` (``host:port``) gives ``data``, or None when it
    could not say."""
    host, port = parse_bind(address, "LAYANG_SPAMD")
    request = (
        b"CHECK SPAMC/1.5\r\nUser: layang\r\n"
        + f"Content-length: {len(data)}\r\n\r\n".encode()
        + data
    )
    try:
        with socket.create_connection((host, port), timeout=timeout) as connection:
            connection.sendall(request)
            connection.shutdown(socket.SHUT_WR)
            answer = b""
            while len(answer) < MAX_ANSWER_BYTES:
                chunk = connection.recv(4096)
                if not chunk:
                    break
                answer += chunk
    except OSError as error:
        log.warning("spamd at %s could not score a message: %s", address, error)
        return None
    found = _SCORE.search(answer)
    if not answer.startswith(b"SPAMD/") or found is None:
        log.warning("spamd at %s answered oddly: %r", address, answer[:200])
        return None
    return float(found.group(1))
