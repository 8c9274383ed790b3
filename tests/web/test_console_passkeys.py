"""Passkeys in headless Chromium with its virtual authenticator (the DevTools protocol's
``WebAuthn.addVirtualAuthenticator``): a person adds one on their page, then signs in with their
password and the passkey instead of a code; a forged answer is not accepted."""

from __future__ import annotations

import dataclasses

from layang.domain import accounts
from layang.models import ConsoleUser
from layang.team import invitations, links, passkeys, passwords
from tests.support.browser import screenshot

PASSWORD = "a long enough passphrase"


def _sign_in_with_password(page, base):
    page.goto(base + "/console/login")
    page.fill("#email", "ana@acme.test")
    page.fill("#password", PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_load_state()


def test_a_passkey_instead_of_a_code(app, browser, live_server):
    # WebAuthn needs a domain as the relying party id: localhost, not an IP address.
    base = live_server.replace("127.0.0.1", "localhost")
    app.config["LAYANG"] = dataclasses.replace(app.config["LAYANG"], public_url=base)
    acme = accounts.create_account("acme", live=True)
    _, token = invitations.create_user("ana@acme.test", acme, "owner")
    passwords.set_password_by_link(token, links.SETUP, PASSWORD, "127.0.0.1")

    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    cdp = context.new_cdp_session(page)
    cdp.send("WebAuthn.enable")
    cdp.send(
        "WebAuthn.addVirtualAuthenticator",
        {
            "options": {
                "protocol": "ctap2",
                "transport": "internal",
                "hasResidentKey": True,
                "hasUserVerification": True,
                "isUserVerified": True,
            }
        },
    )
    _sign_in_with_password(page, base)
    assert page.url.endswith("/console/overview")  # no second factor yet

    page.goto(base + "/console/me")
    page.fill("form.passkey input[name=label]", "virtual key")
    page.get_by_role("button", name="Add a passkey").click()
    page.wait_for_url("**/console/me")
    page.wait_for_selector("ul.passkeys")
    assert "Passkey virtual key was added" in page.locator(".flash[role=status]").inner_text()
    assert "virtual key" in page.locator("ul.passkeys").inner_text()
    screenshot(page, "console-people-passkeys-1280")
    page.set_viewport_size({"width": 390, "height": 844})
    screenshot(page, "console-people-passkeys-390")
    page.set_viewport_size({"width": 1280, "height": 800})
    user = ConsoleUser.get(ConsoleUser.email_key == "ana@acme.test")
    assert [p.label for p in passkeys.user_passkeys(user)] == ["virtual key"]

    page.get_by_role("button", name="Sign out").click()
    page.wait_for_load_state()
    _sign_in_with_password(page, base)
    assert "/console/login/code" in page.url  # the password alone is not enough now
    assert page.locator("#code").count() == 0  # no TOTP: only the passkey is offered
    screenshot(page, "console-people-passkey-step-1280")
    page.get_by_role("button", name="Use a passkey").click()
    page.wait_for_url("**/console/overview")
    assert "ana@acme.test" in page.locator(".who").inner_text()
    assert passkeys.user_passkeys(user)[0].used_at is not None

    # An answer that is not the passkey's signature of the server's challenge is refused.
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_load_state()
    _sign_in_with_password(page, base)
    page.evaluate(
        """() => {
          const form = document.querySelector("form.passkey");
          form.querySelector("input[name=credential]").value = JSON.stringify({id: "forged"});
          form.submit();
        }"""
    )
    page.wait_for_load_state()
    assert "That passkey was not accepted." in page.locator(".flash-error").first.inner_text()
    assert "/console/login/code" in page.url
    context.close()
