"""The console's Activity pages show each record as the Activity API does: same times (to the
second in the list, to the millisecond in the timeline), sender, ids and metadata."""

from __future__ import annotations

import html

from layang.models import Recipient
from layang.web.line_breaks import with_breaks
from tests.conftest import drain
from tests.web.test_console import _login


def test_activity_pages_show_what_the_api_shows(client, auth, api_key, upstream, relay_to):
    upstream.script_rcpt("later@rcpt.test", "450 4.2.0 try later")
    for sender, to in [
        ({"email": "shop@sender.test", "name": "Shop"}, "ana@rcpt.test"),
        ({"email": "plain@sender.test"}, "later@rcpt.test"),
    ]:
        response = client.post(
            "/v1/layang/transmissions",
            headers=auth,
            json={
                "from": sender,
                "subject": "Hello",
                "to": [{"email": to}],
                "bodyText": "hi",
                "metadata": {"order": "42", "vip": True, "items": [{"sku": "<b>"}]},
            },
        )
        assert response.status_code == 200
    # Once each recipient has had its first attempt: the delayed one's retry is due within
    # milliseconds (retry_base_seconds), and on a loaded machine a further cycle would send it.
    drain(
        relay_to(upstream),
        until=lambda: not Recipient.select().where(Recipient.status == "Injection").exists(),
    )
    records = client.get("/v1/layang/activity", headers=auth).get_json()["items"]
    _login(client, api_key)

    listing = client.get("/console/activity").get_data(as_text=True)
    for record in records:
        created = record["createdAt"]
        shown = f'<time datetime="{created}">{created[:19].replace("T", " ")} UTC</time>'
        assert shown in listing
        recipient = with_breaks(record["recipient"])
        assert f'{recipient}</a>\n          <span class="muted">to</span>' in listing

    for record in records:
        page = client.get(f"/console/activity/{record['id']}").get_data(as_text=True)
        sender = record["from"]
        name = f"{sender['name']} " if "name" in sender else ""
        email = f'<span class="address">{with_breaks(sender["email"])}</span>'
        assert f"<dt>From</dt><dd>{name}&lt;{email}&gt;</dd>" in page
        assert f"({record['recipientType']})" in page
        assert f"<code>{record['transmissionId']}</code>" in page
        assert f"<code>{html.escape(record['messageId'])}</code>" in page
        assert "<dt>order</dt><dd>42</dd>" in page
        # Values that are not strings show as JSON, not as Python's repr.
        assert "<dt>vip</dt><dd>true</dd>" in page
        assert '<dt>items</dt><dd>[{"sku": "\\u003cb\\u003e"}]</dd>' in page
        for event in record["events"]:
            at = event["timestamp"]
            text = at[:23].replace("T", " ")
            shown = f'<time datetime="{at}" data-precision="ms">{text} UTC</time>'
            assert shown in page
    delayed = next(r for r in records if r["recipient"] == "later@rcpt.test")
    assert delayed["status"] == "Delay"
    page = client.get(f"/console/activity/{delayed['id']}").get_data(as_text=True)
    assert "<code>450 4.2.0 try later</code>" in page
    assert "Next try" in page
