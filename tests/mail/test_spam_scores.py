"""Every shape of message Layang composes, as relayed, scored by SpamAssassin (Debian's package,
local tests only): none may trip a rule about how the message is built.

Rules about the message's making fail the test: MIME structure (MIME_*), HTML (HTML_*, but
HTML_MESSAGE, which only says there is HTML), missing or malformed headers (MISSING_*,
INVALID_*, and the header-format rules listed below). Rules about this test's setting are not
Layang's doing and are ignored: NO_RECEIVED and NO_RELAYS (the message is scored before any
server received it), and everything that needs the network (URIBL, DNSBL, SPF, DKIM and DMARC
look-ups are off with ``-L``). The table of what each shape scored is printed (``-s``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import b64, drain

COMPOSITION_RULES = re.compile(
    r"MIME_|HTML_(?!MESSAGE$)|MISSING_|INVALID_|MPART_|CTYPE_|BAD_ENC|FROM_EXCESS|"
    r"DATE_IN_|MSGID_|TO_NO_BRKTS|SUBJ_ILLEGAL|EMPTY_MESSAGE|MIXED_ES|PLING_QUERY|"
    r"TVD_|TRACKER_ID|T_REMOTE_IMAGE|HEADER_FROM_DIFFERENT|T_KAM_HTML|KAM_|FREEMAIL_|LIST_"
)
# The test's own setting: scored before any server received the mail; tracking URLs on the
# test server's port 8000.
ENVIRONMENT_RULES = frozenset({"NO_RECEIVED", "NO_RELAYS", "WEIRD_PORT"})
SHORT_HTML = (
    "<!DOCTYPE html><html><body><h1>Your order has shipped</h1>"
    "<p>Hello Ana, your order 42 left our warehouse today and will arrive on Tuesday. "
    'You can follow it on <a href="https://shop.test/orders/42">your order page</a>.</p>'
    "<p>Thank you for shopping with us.</p></body></html>"
)
TEXT = (
    "Hello Ana,\n\nyour order 42 left our warehouse today and will arrive on Tuesday.\n"
    "Follow it at https://shop.test/orders/42\n\nThank you for shopping with us.\n"
)
PDF = b"%PDF-1.4\n1 0 obj<</Type/Catalog>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n"


def spamassassin() -> str:
    path = shutil.which("spamassassin")
    if path is None:
        if os.environ.get("LAYANG_REQUIRE_TOOLS"):
            pytest.fail("SpamAssassin is required here (apt-get install spamassassin)")
        pytest.skip("SpamAssassin is not installed (apt-get install spamassassin)")
    return path


def score(data: bytes, home: Path) -> tuple[float, dict[str, float]]:
    """SpamAssassin's score of ``data`` and the rules it tripped, with their points."""
    done = subprocess.run(
        [spamassassin(), "-t", "-L", "-p", str(home / "user_prefs")],
        input=data,
        capture_output=True,
        timeout=120,
        env={**os.environ, "HOME": str(home)},
        check=True,
    )
    report = done.stdout.decode("utf-8", "replace")
    total = re.search(r"Content analysis details:\s+\((-?[\d.]+) points", report)
    assert total is not None, report
    table = report[total.end() :]
    rules = {
        name: float(points)
        for points, name in re.findall(r"^\s*(-?\d+\.\d+)\s+([A-Z0-9_]+)\s", table, re.M)
    }
    return float(total.group(1)), rules


def send(client, auth, **body) -> None:
    request = {
        "from": {"email": "shop@sender.test", "name": "Shop"},
        "to": [{"email": "ana@rcpt.test", "name": "Ana"}],
        "subject": "Your order has shipped",
        **body,
    }
    response = client.post("/v1/layang/transmissions", json=request, headers=auth)
    assert response.status_code == 200, response.get_json()


SHAPES = {
    "text": {"bodyText": TEXT},
    "html": {"bodyHtml": SHORT_HTML},
    "text and html": {"bodyText": TEXT, "bodyHtml": SHORT_HTML},
    "attachments": {
        "bodyText": TEXT,
        "bodyHtml": SHORT_HTML,
        "attachments": [
            {"filename": "invoice-42.pdf", "mimeType": "application/pdf", "value": b64(PDF)}
        ],
    },
    "template": {"templateId": "shipped", "substitutionData": {"name": "Ana", "order": 42}},
    "tracking": {
        "bodyHtml": SHORT_HTML,
        "optionsAttributes": {"openTracking": True, "clickTracking": True},
    },
    "broadcast": {
        "bodyText": TEXT,
        "bodyHtml": SHORT_HTML,
        "optionsAttributes": {"transactional": False, "openTracking": True},
    },
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_no_shape_trips_a_composition_rule(client, auth, upstream, relay_to, tmp_path, shape):
    spamassassin()
    if shape == "template":
        created = client.post(
            "/v1/layang/templates",
            json={
                "id": "shipped",
                "name": "Shipped",
                "subject": "Your order {{ order }} has shipped",
                "bodyHtml": "<style>p { color: #333333 }</style>"
                + SHORT_HTML.replace("Hello Ana", "Hello {{ name }}"),
            },
            headers=auth,
        )
        assert created.status_code == 201, created.get_json()
    send(client, auth, **SHAPES[shape])
    drain(relay_to(upstream))
    (received,) = upstream.received
    total, rules = score(received.data, tmp_path)
    print(f"\n{shape}: {total} {sorted(rules)}")
    if shape == "broadcast":
        assert received.message["List-Unsubscribe"]
    tripped = {
        name: points
        for name, points in rules.items()
        if COMPOSITION_RULES.match(name) and name not in ENVIRONMENT_RULES
    }
    assert not tripped, (shape, tripped, received.data[:3000])


WITH_AN_IMAGE = SHORT_HTML.replace(
    "<p>Thank", '<p><img src="https://shop.test/logo.png" alt="Shop" width="120"></p><p>Thank'
)


@pytest.mark.parametrize("html", [SHORT_HTML, WITH_AN_IMAGE], ids=["no image", "an image"])
def test_the_pixel_adds_no_image_rule(client, auth, upstream, relay_to, tmp_path, html):
    spamassassin()
    send(client, auth, bodyHtml=html)
    send(client, auth, bodyHtml=html, optionsAttributes={"openTracking": True})
    drain(relay_to(upstream))
    plain, tracked = upstream.received
    assert b"/t/o/" in tracked.data and b"/t/o/" not in plain.data
    _, untracked_rules = score(plain.data, tmp_path)
    _, tracked_rules = score(tracked.data, tmp_path)

    def image_only(rules):
        return {r for r in rules if r.startswith("HTML_IMAGE_ONLY_")}

    if html == SHORT_HTML:
        # No image of the sender's, and the pixel is none either: nothing changes.
        assert set(tracked_rules) - {"WEIRD_PORT"} == set(untracked_rules)
    else:
        # The sender's own image trips one HTML_IMAGE_ONLY_* rule, chosen by the HTML's length
        # in bytes, which the pixel's URL adds to: it may be the next one, never one more.
        assert len(image_only(untracked_rules)) == 1
        assert len(image_only(tracked_rules)) == 1
