"""Scheduled mail in the console, in headless Chromium: listed soonest first, cancelled with
its button, never sent afterwards."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from layang.clock import now_ms
from layang.domain import accounts
from layang.mail.schedule import release_due
from tests.conftest import drain
from tests.support.browser import overflow
from tests.web.test_console import sign_in


def schedule(client, auth, hours: float, subject: str, to: list[str]) -> str:
    when = (datetime.now(UTC) + timedelta(hours=hours)).isoformat()
    body = {"from": "shop@sender.test", "subject": subject, "bodyText": "Hi", "to": to,
            "scheduledAt": when}  # fmt: skip
    response = client.post("/v1/layang/transmissions", headers=auth, json=body)
    assert response.status_code == 200, response.get_json()
    return response.json["transmissionId"]


def test_scheduled_mail_is_listed_and_cancelled(client, upstream, relay_to, browser, live_server):
    acme = accounts.create_account("acme", live=True)
    key = accounts.create_api_key(acme)[1]
    auth = {"Authorization": f"Bearer {key}"}
    later = schedule(client, auth, 5, "Weekly digest", ["ana@rcpt.test", "budi@rcpt.test"])
    sooner = schedule(client, auth, 1, "Reminder", ["citra@rcpt.test"])
    other = accounts.create_account("other", live=True)
    other_auth = {"Authorization": f"Bearer {accounts.create_api_key(other)[1]}"}
    schedule(client, other_auth, 2, "Not yours", ["eko@rcpt.test"])

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    sign_in(page, live_server, key)
    page.get_by_role("link", name="Scheduled").click()
    page.wait_for_load_state()
    rows = page.locator("table.scheduled tbody tr")
    assert [r.get_attribute("data-transmission") for r in rows.all()] == [sooner, later]
    cells = [c.inner_text() for c in rows.nth(1).locator("td").all()]
    assert "Weekly digest" in cells[1] and cells[2] == "2"
    assert "Not yours" not in page.content()
    assert overflow(page) == []

    rows.nth(1).get_by_role("button", name="Cancel").click()
    page.wait_for_load_state()
    assert "is cancelled" in page.locator(".flash, [role=status], .notice").first.inner_text()
    rows = page.locator("table.scheduled tbody tr")
    assert [r.get_attribute("data-transmission") for r in rows.all()] == [sooner]

    view = client.get(f"/v1/layang/transmissions/{later}", headers=auth).json
    assert [r["status"] for r in view["recipients"]] == ["Cancelled", "Cancelled"]
    # Past both times: only the one not cancelled is sent.
    assert release_due(now_ms() + 6 * 3_600_000) == 2  # the reminder's one and the other's one
    drain(relay_to(upstream))
    assert sorted(r.rcpt_tos[0] for r in upstream.received) == ["citra@rcpt.test", "eko@rcpt.test"]
