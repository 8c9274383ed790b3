"""People in the console, as a person goes through it in headless Chromium: the first owner's
set-up link, a password, TOTP enrolment (codes computed here with pyotp), signing in, inviting
a viewer who accepts, what each role may and may not do, lockout and password reset. Every
mail is read as it arrives at a real SMTP server."""

from __future__ import annotations

import re
import time

import pyotp

from layang.domain import accounts
from layang.team import invitations, links
from tests.conftest import drain
from tests.support.browser import screenshot

OWNER_PASSWORD = "correct horse battery staple"
VIEWER_PASSWORD = "viewer passphrase 42"
USED: dict[str, int] = {}  # the last time step whose code was typed, by seed


def _link(received, path: str) -> str:
    text = received.message.get_body(("plain",)).get_content()
    return re.search(rf"http://\S+/console/{path}/\S+", text).group(0)


def _mail_to(upstream, relay_to, address: str, count: int):
    drain(relay_to(upstream))
    arrived = upstream.wait_for(count)
    return [r for r in arrived if address in r.rcpt_tos][-1]


def _shots(page, name: str) -> None:
    screenshot(page, f"{name}-1280")
    page.set_viewport_size({"width": 390, "height": 844})
    screenshot(page, f"{name}-390")
    page.set_viewport_size({"width": 1280, "height": 800})


def _fresh_code(seed: str, used: dict[str, int]) -> str:
    """A code the server has not seen: a code works once, so the next one may be the next
    30-second step's (accepted as drift) or, when that was used too, one to wait for."""
    totp = pyotp.TOTP(seed)
    step = max(used.get(seed, 0) + 1, totp.timecode(time.time()) - 1)
    while step > totp.timecode(time.time()) + 1:
        time.sleep(1)
    used[seed] = step
    return totp.generate_otp(step)


def _choose_password(page, url: str, password: str) -> None:
    page.goto(url)
    page.fill("#password", password)
    page.fill("#confirm", password)
    page.locator("button[type=submit]").click()
    page.wait_for_load_state()


def _enrol(page, name: str | None = None) -> str:
    assert "/console/two-factor" in page.url
    seed = page.locator("code.totp-seed").inner_text()
    assert page.locator("a.otpauth").get_attribute("href").startswith("otpauth://totp/")
    if name:
        _shots(page, name)
    page.fill("#code", _fresh_code(seed, USED))
    page.get_by_role("button", name="Turn on").click()
    page.wait_for_load_state()
    return seed


def _sign_in(page, base: str, email: str, password: str, seed: str | None) -> None:
    page.goto(base + "/console/login")
    page.fill("#email", email)
    page.fill("#password", password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_load_state()
    if seed:
        assert "/console/login/code" in page.url
        page.fill("#code", _fresh_code(seed, USED))
        page.get_by_role("button", name="Verify").click()
        page.wait_for_load_state()


def test_a_team_from_first_owner_to_reset(app, browser, live_server, upstream, relay_to):
    acme = accounts.create_account("acme", live=True)
    accounts.create_account("beta", live=True)
    _, setup = invitations.create_user("Owner@Acme.test", acme, "owner")
    setup_url = links.link_url(app.config["LAYANG"], links.SETUP, setup).replace(
        "http://127.0.0.1:8000", live_server
    )
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()

    # The set-up link: a password, then the second factor.
    page.goto(setup_url)
    _shots(page, "console-people-welcome")
    page.fill("#password", OWNER_PASSWORD)
    page.fill("#confirm", OWNER_PASSWORD + "!")
    page.locator("button[type=submit]").click()
    assert "The two passwords differ." in page.locator(".flash-error").inner_text()
    _choose_password(page, setup_url, OWNER_PASSWORD)
    owner_seed = _enrol(page, "console-people-two-factor")
    assert "/console/login" in page.url
    # The link worked once.
    assert page.goto(setup_url).status == 404

    # Signing in: the password alone is not enough.
    page.goto(live_server + "/console/login")
    _shots(page, "console-people-login")
    page.fill("#email", "owner@acme.test")
    page.fill("#password", OWNER_PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_load_state()
    assert "/console/login/code" in page.url
    _shots(page, "console-people-code")
    page.fill("#code", "000000" if pyotp.TOTP(owner_seed).now() != "000000" else "111111")
    page.get_by_role("button", name="Verify").click()
    assert "not right" in page.locator(".flash-error").inner_text()
    page.fill("#code", _fresh_code(owner_seed, USED))
    page.get_by_role("button", name="Verify").click()
    page.wait_for_load_state()
    assert page.url.endswith("/console/overview")
    assert "Owner@acme.test" in page.locator(".who").inner_text()  # as it was given

    # The owner invites a viewer; the mail goes out through Layang.
    page.get_by_role("link", name="Team").click()
    page.fill("input[name=email]", "vera@acme.test")
    page.select_option("form.invite select[name=role]", "viewer")
    page.get_by_role("button", name="Invite").click()
    page.wait_for_load_state()
    assert "invitation is on its way to vera@acme.test" in page.locator(".flash").inner_text()
    assert "vera@acme.test" in page.locator("table.invitations").inner_text()
    _shots(page, "console-people-team")
    invitation = _mail_to(upstream, relay_to, "vera@acme.test", 1)
    assert invitation.message["Subject"] == "You are invited to acme on Layang"
    invite_url = _link(invitation, "invitation").replace("http://127.0.0.1:8000", live_server)

    # The owner makes a send key: its secret once, then only its first characters.
    page.get_by_role("link", name="API keys").click()
    page.fill("input[name=label]", "web app")
    page.select_option("select[name=scope]", "send")
    page.get_by_role("button", name="Create key").click()
    page.wait_for_load_state()
    secret = page.locator("code.secret-value").inner_text()
    assert secret.startswith("lyg_") and accounts.authenticate_key(secret).scope == "send"
    _shots(page, "console-people-keys")
    page.reload()
    assert secret not in page.content()

    # The viewer accepts in another browser.
    other = browser.new_context(viewport={"width": 1280, "height": 800})
    vpage = other.new_page()
    vpage.goto(invite_url)
    assert "account acme as viewer" in vpage.locator("main").inner_text()
    _shots(vpage, "console-people-invitation")
    _choose_password(vpage, invite_url, VIEWER_PASSWORD)
    viewer_seed = _enrol(vpage)
    _sign_in(vpage, live_server, "vera@acme.test", VIEWER_PASSWORD, viewer_seed)
    assert vpage.url.endswith("/console/overview")
    assert "viewer" in vpage.locator(".who").inner_text()

    # What a viewer may read, and may not do.
    vpage.goto(live_server + "/console/keys")
    assert "web app" in vpage.locator("table.keys").inner_text()
    assert vpage.locator("form.new-key").count() == 0
    assert secret not in vpage.content()
    vpage.goto(live_server + "/console/new-template")
    vpage.fill("input[name=id]", "welcome")
    vpage.fill("input[name=name]", "Welcome")
    vpage.fill("input[name=subject]", "Hi")
    vpage.get_by_role("button", name="Create template").click()
    vpage.wait_for_load_state()
    assert (
        "This needs the developer role; you are viewer in this account."
        in vpage.locator("main").inner_text()
    )
    refused = vpage.goto(live_server + "/console/audit")
    assert refused.status == 403 and "needs the admin role" in vpage.locator("main").inner_text()

    # The owner raises her to developer: now she may make templates, not full keys.
    page.goto(live_server + "/console/team")
    row = page.locator("table.members tr").filter(has_text="vera@acme.test")
    row.locator("select[name=role]").select_option("developer")
    row.get_by_role("button", name="Change role").click()
    page.wait_for_load_state()
    assert "vera@acme.test is now developer" in page.locator(".flash").inner_text()
    vpage.goto(live_server + "/console/new-template")
    vpage.fill("input[name=id]", "welcome")
    vpage.fill("input[name=name]", "Welcome")
    vpage.fill("input[name=subject]", "Hi")
    vpage.get_by_role("button", name="Create template").click()
    vpage.wait_for_load_state()
    assert "/console/templates/welcome" in vpage.url
    vpage.goto(live_server + "/console/keys")
    assert vpage.locator("select[name=scope] option").all_inner_texts() == ["send", "read"]

    # The audit page says who did each of these, from where.
    page.goto(live_server + "/console/audit")
    log = page.locator("table.audit").inner_text()
    for action in (
        "template.created",
        "member.role_changed",
        "api_key.created",
        "invitation.created",
        "invitation.accepted",
        "sign_in",
        "sign_in.failed",
    ):
        assert action in log, action
    assert "user:vera@acme.test" in log and "127.0.0.1" in log
    _shots(page, "console-people-audit")
    page.goto(live_server + "/console/me")
    assert page.locator("table.sessions tbody tr").count() == 1
    _shots(page, "console-people-me")

    # Ten wrong passwords lock her out for 15 minutes, even with the right one; she is told.
    other.clear_cookies()
    for _ in range(10):
        vpage.goto(live_server + "/console/login")
        vpage.fill("#email", "vera@acme.test")
        vpage.fill("#password", "not her password")
        vpage.get_by_role("button", name="Sign in").click()
        assert "Wrong email or password." in vpage.locator(".flash-error").inner_text()
    vpage.goto(live_server + "/console/login")
    vpage.fill("#email", "vera@acme.test")
    vpage.fill("#password", VIEWER_PASSWORD)
    vpage.get_by_role("button", name="Sign in").click()
    assert "Wrong email or password." in vpage.locator(".flash-error").inner_text()
    lockout = _mail_to(upstream, relay_to, "vera@acme.test", 2)
    assert "locked for 15 minutes" in lockout.message["Subject"]

    # A reset by email lifts it: single use.
    vpage.goto(live_server + "/console/forgot")
    vpage.fill("#email", "vera@acme.test")
    vpage.get_by_role("button", name="Send me a link").click()
    vpage.wait_for_load_state("load")
    told = vpage.locator("main").inner_text()
    _shots(vpage, "console-people-forgot")
    reset = _mail_to(upstream, relay_to, "vera@acme.test", 3)
    reset_url = _link(reset, "reset").replace("http://127.0.0.1:8000", live_server)
    _choose_password(vpage, reset_url, "a brand new passphrase")
    assert "/console/login" in vpage.url
    _sign_in(vpage, live_server, "vera@acme.test", "a brand new passphrase", viewer_seed)
    assert vpage.url.endswith("/console/overview")
    assert vpage.goto(reset_url).status == 404

    # The reset page answered an unknown address with the same words.
    stranger = browser.new_context().new_page()
    stranger.goto(live_server + "/console/forgot")
    stranger.fill("#email", "nobody@acme.test")
    stranger.get_by_role("button", name="Send me a link").click()
    # inner_text follows the stylesheet (an uppercase heading): read once the page has loaded.
    stranger.wait_for_load_state("load")
    assert stranger.locator("main").inner_text() == told
    context.close()
    other.close()
