"""The consent page as a person sees it, in headless Chromium."""

from __future__ import annotations

from layang.domain import accounts
from layang.models import AuthorizedRecipient
from tests.api.test_sandbox import RECIPIENTS, consent_link
from tests.conftest import drain
from tests.support.browser import screenshot


def test_consent_in_a_browser(client, app, upstream, relay_to, browser, live_server):
    account = accounts.create_account("trial-shop")
    auth = {"Authorization": f"Bearer {accounts.create_api_key(account)[1]}"}
    client.post(RECIPIENTS, json={"email": "ana@rcpt.test"}, headers=auth)
    drain(relay_to(upstream))
    path = consent_link(upstream, "ana@rcpt.test")

    page = browser.new_page()
    page.goto(live_server + path)
    assert page.locator("h1").inner_text() == "trial-shop would like to send you test email"
    assert "ana@rcpt.test" in page.locator("main").inner_text()
    button = page.get_by_role("button", name="Give Consent")
    assert button.is_visible()
    # Our stylesheet is served and applied: the button is the accent-coloured primary one.
    color = button.evaluate("b => getComputedStyle(b).backgroundColor")
    assert color == "rgb(35, 87, 217)", color
    assert AuthorizedRecipient.get().status == "unverified"  # opening the page changed nothing
    shot = screenshot(page, "consent-page")
    assert shot.stat().st_size > 5000

    button.click()
    page.wait_for_load_state()
    assert page.locator("h1").inner_text() == "Thank you"
    assert "You have given consent" in page.locator("main").inner_text()
    screenshot(page, "consent-given")
    assert AuthorizedRecipient.get().status == "verified"

    page.goto(live_server + path)
    assert page.locator("h1").inner_text() == "This link is not valid any more"
    screenshot(page, "consent-link-spent")
    page.close()
