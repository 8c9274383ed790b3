"""Per-message cost of building the MIME bytes: the ``EmailMessage``-based composer the
service used before against ``layang.mail.compose.compose_message``.

Run with ``python bench/compose.py [messages]``. Two payloads: a realistic text+HTML order
confirmation (non-ASCII names and subject, a custom header, a few recipients), and the same
with a 100 KB attachment. Prints microseconds per message for each composer and the speedup.
"""

from __future__ import annotations

import base64
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from layang.mail.compose import compose_message as compose_typed
from layang.mail.message import OutgoingMessage
from tests.mail.test_compose import compose_message, reference_compose

MESSAGE_ID = "<01HZX3J5Q8W9V2K7M4N6P0R1ST@sender.example>"


# The composer as it was, on ``EmailMessage`` and the stdlib generator: the tests keep it as
# the reference the new one is compared with.
stdlib_compose = reference_compose


TEXT = (
    "Hallo Zoë,\n\n"
    "thanks for your order #10423 placed on 14 November. Here is what we are sending:\n\n"
    + "".join(f"  {n} x Item number {n} ............ EUR {n * 7}.90\n" for n in range(1, 9))
    + "\nShipping: DHL Express, arriving Thursday.\nQuestions? Just reply to this email.\n\n"
    "\u2014 The Shop team\n"
)
HTML = (
    '<!doctype html><html><body style="font-family:Helvetica,Arial,sans-serif">'
    "<h1>Danke, Zoë!</h1><p>Thanks for your order <b>#10423</b>.</p><table>"
    + "".join(
        f'<tr><td style="padding:8px 12px;border-bottom:1px solid #e5e7eb">Item number {n}</td>'
        f'<td style="text-align:right">EUR {n * 7}.90</td></tr>'
        for n in range(1, 9)
    )
    + '</table><p><a href="https://shop.example/orders/10423?utm_source=email">Track it</a></p>'
    "</body></html>"
) * 3

PAYLOAD: dict[str, Any] = {
    "from": {"email": "orders@shop.example", "name": "Shöp Orders"},
    "to": [{"email": "zoe@rcpt.example", "name": "Zoë Müller"}],
    "cc": [{"email": "accounts@rcpt.example", "name": "Accounts"}],
    "bcc": [{"email": "archive@shop.example"}],
    "replyTo": [{"email": "help@shop.example", "name": "Shop Help"}],
    "subject": "Your order #10423 is confirmed \u2013 Danke schön!",
    "date": 1_700_000_000_123,
    "headers": [
        {"name": "List-Unsubscribe", "value": "<https://shop.example/u/abc123>"},
        {"name": "X-Order-Id", "value": "10423"},
    ],
    "bodyText": TEXT,
    "bodyHtml": HTML,
    "options": {"openTracking": True, "clickTracking": True},
}
WITH_ATTACHMENT: dict[str, Any] = {
    **PAYLOAD,
    "attachments": [
        {
            "filename": "Rechnung-10423.pdf",
            "value": base64.b64encode(os.urandom(100 * 1024)).decode("ascii"),
        }
    ],
}


def per_message_us(compose: Callable[[Any, str], bytes], payload: Any, n: int) -> float:
    compose(payload, MESSAGE_ID)  # warm caches (mimetypes, regexes)
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(n):
            compose(payload, MESSAGE_ID)
        best = min(best, (time.perf_counter() - started) / n)
    return best * 1e6


def main() -> None:
    messages = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    for label, payload, n in (
        ("text+html", PAYLOAD, messages),
        ("text+html + 100 KB attachment", WITH_ATTACHMENT, max(messages // 5, 1)),
    ):
        stdlib = per_message_us(stdlib_compose, payload, n)
        # The worker composes the typed message it read back from the outbox.
        direct = per_message_us(compose_typed, OutgoingMessage.from_payload(payload), n)
        size = len(compose_message(payload, MESSAGE_ID))
        print(f"{label} ({size} bytes, best of 3 x {n} messages)")
        print(f"  stdlib EmailMessage : {stdlib:9.1f} us/message")
        print(f"  compose_message     : {direct:9.1f} us/message")
        print(f"  speedup             : {stdlib / direct:9.1f} x")


if __name__ == "__main__":
    main()
