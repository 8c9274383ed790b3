"""``/v1/layang/audit`` and ``/v1/layang/team/invitations``, and the console's sign-in rules
over HTTP, on SQLite and PostgreSQL: what a key changes is recorded, no answer tells whether an
address is a user, guessing is throttled, sessions are new at each sign-in, roles refuse with
403 naming the role."""

from __future__ import annotations

import re
import time

import pyotp
import pytest

from layang.clock import now_ms
from layang.domain import accounts
from layang.lifecycle import housekeeping
from layang.models import ConsoleUser
from layang.team import audit, invitations, links, passwords, people, sessions, two_factor
from tests.conftest import BACKENDS

pytestmark = pytest.mark.parametrize("backend", BACKENDS)

PASSWORD = "a long enough passphrase"


def _token(client, path="/console/login"):
    page = client.get(path).get_data(as_text=True)
    return re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)


def _person(account, email, role, password=PASSWORD):
    _, token = invitations.create_user(email, account, role)
    return passwords.set_password_by_link(token, links.SETUP, password, "127.0.0.1")


def _sign_in(client, email, password=PASSWORD):
    return client.post(
        "/console/login",
        data={"csrf_token": _token(client), "email": email, "password": password},
    )


def test_changes_by_a_key_are_in_the_audit_log(client, account, auth):
    template = {"id": "hello", "name": "Hello", "subject": "Hi", "bodyText": "Hi"}
    assert client.post("/v1/layang/templates", json=template, headers=auth).status_code == 201
    assert (
        client.put("/v1/layang/suppressions/ana@rcpt.test", json={}, headers=auth).status_code
        == 200
    )
    assert client.delete("/v1/layang/templates/hello", headers=auth).status_code == 204
    body = client.get("/v1/layang/audit", headers=auth).get_json()
    actions = [(e["action"], e["target"]) for e in body["items"]]
    assert actions[:3] == [
        ("template.deleted", "hello"),
        ("suppression.updated", people_hash("ana@rcpt.test")),
        ("template.created", "hello"),
    ]
    key_id = accounts.list_api_keys(account)[0].id
    assert body["items"][0]["actor"] == f"key:{key_id}"
    assert body["items"][0]["source"] == "127.0.0.1"
    assert "ana@rcpt.test" not in str(body)  # a person's address never stands in the log

    only = client.get("/v1/layang/audit?action=template.", headers=auth).get_json()
    assert [e["action"] for e in only["items"]] == ["template.deleted", "template.created"]
    first = client.get("/v1/layang/audit?limit=1", headers=auth).get_json()
    second = client.get(
        f"/v1/layang/audit?limit=1&cursor={first['nextCursor']}", headers=auth
    ).get_json()
    assert second["items"][0]["action"] == "suppression.updated"
    later = client.get("/v1/layang/audit?since=2999-01-01T00:00:00Z", headers=auth).get_json()
    assert later["items"] == []
    bad = client.get("/v1/layang/audit?cursor=abc", headers=auth)
    assert bad.status_code == 400 and "cursor" in bad.get_data(as_text=True)

    # Another account sees none of it.
    other = accounts.create_api_key(accounts.create_account("other"))[1]
    theirs = client.get("/v1/layang/audit", headers={"Authorization": f"Bearer {other}"})
    assert theirs.get_json()["items"] == []


def people_hash(address):
    from layang.team.audit import address_hash

    return address_hash(address)


def test_invitations_by_api(client, account, auth):
    sent = client.post(
        "/v1/layang/team/invitations",
        json={"email": "new@acme.test", "role": "developer"},
        headers=auth,
    )
    assert sent.status_code == 202
    assert sent.get_json()["role"] == "developer"
    invitation = invitations.pending_invitations(account)[0]
    assert (invitation.email, invitation.role) == ("new@acme.test", "developer")
    bad = client.post(
        "/v1/layang/team/invitations", json={"email": "nope", "role": "viewer"}, headers=auth
    )
    assert bad.status_code == 400 and "email" in bad.get_data(as_text=True)
    owner = client.post(
        "/v1/layang/team/invitations", json={"email": "o@acme.test", "role": "owner"}, headers=auth
    )
    assert owner.status_code == 403 and "owner role" in owner.get_data(as_text=True)
    read = accounts.create_api_key(account, scope="read")[1]
    refused = client.post(
        "/v1/layang/team/invitations",
        json={"email": "x@acme.test", "role": "viewer"},
        headers={"Authorization": f"Bearer {read}"},
    )
    assert refused.status_code == 403
    # Inviting someone already a member answers the same, and mails nothing.
    _person(account, "member@acme.test", "viewer")
    again = client.post(
        "/v1/layang/team/invitations",
        json={"email": "member@acme.test", "role": "viewer"},
        headers=auth,
    )
    assert again.status_code == 202
    assert [i.email for i in invitations.pending_invitations(account)] == ["new@acme.test"]
    log = client.get("/v1/layang/audit?action=invitation.created", headers=auth).get_json()
    assert len(log["items"]) == 2


def test_no_enumeration_and_a_new_session_id(app, client, account):
    _person(account, "ana@acme.test", "owner")
    unknown = _sign_in(client, "nobody@acme.test")
    wrong = _sign_in(client, "ana@acme.test", "wrong password here")
    assert unknown.status_code == wrong.status_code == 401
    assert "Wrong email or password." in unknown.get_data(as_text=True)
    assert "Wrong email or password." in wrong.get_data(as_text=True)

    # A cookie planted before signing in does not become a session.
    planted = client.get_cookie("layang_session").value
    assert _sign_in(client, "ana@acme.test").status_code == 302
    after = client.get_cookie("layang_session").value
    assert after != planted
    assert client.get("/console/activity").status_code == 200
    stranger = app.test_client()
    stranger.set_cookie("layang_session", planted)
    assert stranger.get("/console/activity").status_code == 302


def test_key_sign_in_ends_with_the_first_person(client, account, api_key):
    page = client.get("/console/login").get_data(as_text=True)
    assert 'name="api_key"' in page
    _person(account, "ana@acme.test", "owner")
    refused = client.post(
        "/console/login",
        data={"csrf_token": _token(client), "api_key": api_key},
        query_string={"with": "key"},
    )
    assert refused.status_code == 401
    assert "sign in with their email and password" in refused.get_data(as_text=True)


def test_sign_in_is_throttled_per_address(client, account):
    _person(account, "ana@acme.test", "owner")
    for _ in range(passwords.PER_ADDRESS):
        assert _sign_in(client, "nobody@acme.test", "x" * 12).status_code == 401
    assert _sign_in(client, "nobody@acme.test", "x" * 12).status_code == 429
    assert _sign_in(client, "ana@acme.test").status_code == 302  # another address still may


def test_roles_and_sessions(app, client, account):
    _person(account, "dev@acme.test", "developer")
    _person(account, "admin@acme.test", "admin")
    owner = _person(account, "own@acme.test", "owner")

    assert _sign_in(client, "dev@acme.test").status_code == 302
    token = _token(client, "/console/keys")
    full = client.post("/console/keys", data={"csrf_token": token, "scope": "full"})
    assert full.status_code == 403 and "needs the admin role" in full.get_data(as_text=True)
    made = client.post("/console/keys", data={"csrf_token": token, "scope": "read", "label": "r"})
    assert made.status_code == 200 and "lyg_" in made.get_data(as_text=True)
    team = client.post("/console/team", data={"csrf_token": token, "email": "z@acme.test"})
    assert team.status_code == 403 and "needs the admin role" in team.get_data(as_text=True)
    assert client.get("/console/audit").status_code == 403

    admin = app.test_client()
    assert _sign_in(admin, "admin@acme.test").status_code == 302
    token = _token(admin, "/console/team")
    demote = admin.post(
        f"/console/team/{owner.id}/role", data={"csrf_token": token, "role": "viewer"}
    )
    assert demote.status_code == 403 and "needs the owner role" in demote.get_data(as_text=True)
    assert admin.get("/console/audit").status_code == 200
    settings = admin.post("/console/settings", data={"csrf_token": token})
    assert settings.status_code == 403

    # A password change ends the other sessions, not this one.
    other = app.test_client()
    assert _sign_in(other, "admin@acme.test").status_code == 302
    changed = admin.post(
        "/console/me",
        data={
            "csrf_token": token,
            "current_password": PASSWORD,
            "password": "another long passphrase",
            "confirm": "another long passphrase",
        },
    )
    assert changed.status_code == 302
    assert admin.get("/console/overview").status_code == 200
    assert other.get("/console/overview").status_code == 302


def test_owners_may_require_two_factors(app, client, account):
    _person(account, "own@acme.test", "owner")
    assert _sign_in(client, "own@acme.test").status_code == 302
    token = _token(client, "/console/team")
    assert (
        client.post(
            "/console/settings", data={"csrf_token": token, "two_factor": "required"}
        ).status_code
        == 302
    )
    _person(account, "dev@acme.test", "developer")
    second = app.test_client()
    answer = _sign_in(second, "dev@acme.test")
    assert answer.headers["Location"] == "/console/two-factor"
    page = second.get("/console/two-factor").get_data(as_text=True)
    seed = re.search(r'class="totp-seed">([A-Z2-7]+)<', page).group(1)
    token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    enrolled = second.post(
        "/console/two-factor", data={"csrf_token": token, "code": pyotp.TOTP(seed).now()}
    )
    assert enrolled.status_code == 302
    assert second.get("/console/overview").status_code == 302  # signs in afresh, with a code
    stored = ConsoleUser.get(ConsoleUser.email_key == "dev@acme.test").totp_seed
    assert seed.encode() not in bytes(stored)  # sealed at rest


def test_a_code_works_once(app, client, account):
    user = _person(account, "ana@acme.test", "owner")
    config = app.config["LAYANG"]
    seed = two_factor.new_totp_seed()
    totp = pyotp.TOTP(seed)
    step = totp.timecode(time.time())
    two_factor.enrol_totp(user, seed, totp.generate_otp(step - 1), config, "127.0.0.1")
    assert not two_factor.check_totp(ConsoleUser.get_by_id(user.id), "12345x", config)
    code = totp.generate_otp(step)
    assert two_factor.check_totp(ConsoleUser.get_by_id(user.id), code, config)
    assert not two_factor.check_totp(ConsoleUser.get_by_id(user.id), code, config)  # replayed
    assert not two_factor.check_totp(
        ConsoleUser.get_by_id(user.id), totp.generate_otp(step - 1), config
    )  # older


def test_audit_entries_are_kept_400_days(account):
    now = now_ms()
    day = 86_400_000
    audit.record(account, "cli", "old.thing", at=now - 401 * day)
    audit.record(account, "cli", "recent.thing", at=now - 399 * day)
    housekeeping.delete_expired(now)
    assert [e.action for e in audit.browse(account).items] == ["recent.thing"]


def test_one_person_in_two_accounts_switches(app, client, account):
    _person(account, "ana@acme.test", "owner")
    beta = accounts.create_account("beta", live=True)
    invitations.create_user("ana@acme.test", beta, "viewer")  # a second membership, same person
    assert _sign_in(client, "ana@acme.test").status_code == 302
    me = client.get("/console/me").get_data(as_text=True)
    assert "Switch to beta" in me
    token = re.search(r'name="csrf_token" value="([^"]+)"', me).group(1)
    switched = client.post("/console/switch", data={"csrf_token": token, "account": beta.id})
    assert switched.status_code == 302
    page = client.get("/console/overview").get_data(as_text=True)
    assert 'title="beta"' in page
    refused = client.post("/console/keys", data={"csrf_token": token, "scope": "read"})
    assert refused.status_code == 403  # a viewer in beta
    other = accounts.create_account("other")
    stranger = client.post("/console/switch", data={"csrf_token": token, "account": other.id})
    assert stranger.status_code == 404


def test_sessions_are_listed_and_revocable_and_members_removable(app, client, account):
    owner = _person(account, "own@acme.test", "owner")
    dev = _person(account, "dev@acme.test", "developer")
    phone = app.test_client()
    assert _sign_in(phone, "own@acme.test").status_code == 302
    assert _sign_in(client, "own@acme.test").status_code == 302
    listed = sessions.list_sessions(owner)
    assert len(listed) == 2
    me = client.get("/console/me").get_data(as_text=True)
    token = re.search(r'name="csrf_token" value="([^"]+)"', me).group(1)
    other_id = next(
        s.id for s in listed if s.id != sessions.session_id(client_session_token(client))
    )
    assert (
        client.post(
            f"/console/me/sessions/{other_id}/revoke", data={"csrf_token": token}
        ).status_code
        == 302
    )
    assert phone.get("/console/overview").status_code == 302
    assert client.get("/console/overview").status_code == 200

    devs = app.test_client()
    assert _sign_in(devs, "dev@acme.test").status_code == 302
    assert (
        client.post(f"/console/team/{dev.id}/remove", data={"csrf_token": token}).status_code == 302
    )
    assert devs.get("/console/overview").status_code in (302, 403)
    assert [m.user.email for m in people.team(account)] == ["own@acme.test"]
    last = client.post(
        f"/console/team/{owner.id}/role", data={"csrf_token": token, "role": "viewer"}
    )
    assert last.status_code == 302  # refused with a message: the account keeps an owner
    assert people.team(account)[0].role == "owner"


def client_session_token(client):
    from itsdangerous import URLSafeTimedSerializer

    cookie = client.get_cookie("layang_session").value
    serializer = URLSafeTimedSerializer(
        client.application.secret_key,
        salt="cookie-session",
        signer_kwargs={"key_derivation": "hmac", "digest_method": __import__("hashlib").sha1},
    )
    return serializer.loads(cookie)["user_sid"]


def test_an_invited_user_with_a_password_just_joins(app, client, account):
    beta = accounts.create_account("beta", live=True)
    _person(beta, "ana@acme.test", "owner")
    # The invitation's token travels only in its mail; make one as ``invite`` does.
    with_link = links.issue_link(
        links.INVITE, "ana@acme.test", "cli", account=account, role="developer"
    )
    page = client.get(f"/console/invitation/{with_link}").get_data(as_text=True)
    assert "You have a password already" in page and 'name="password"' not in page
    token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    joined = client.post(f"/console/invitation/{with_link}", data={"csrf_token": token})
    assert joined.status_code == 302
    assert _sign_in(app.test_client(), "ana@acme.test").status_code == 302  # same password
    roles = {
        m.account.name: m.role for m in people.memberships(people.user_by_email("ana@acme.test"))
    }
    assert roles == {"acme": "developer", "beta": "owner"}
    again = client.get(f"/console/invitation/{with_link}")
    assert again.status_code == 404


def test_sign_in_is_throttled_per_client_address(client, account, monkeypatch):
    monkeypatch.setattr(passwords, "PER_SOURCE", 3)
    for n in range(3):
        assert _sign_in(client, f"n{n}@acme.test", "x" * 12).status_code == 401
    assert _sign_in(client, "n9@acme.test", "x" * 12).status_code == 429


def test_a_lockout_ends_after_15_minutes(app, account, monkeypatch):
    _person(account, "ana@acme.test", "owner")
    config = app.config["LAYANG"]
    for _ in range(passwords.LOCK_AFTER - 1):
        assert passwords.sign_in_password("ana@acme.test", "wrong one!", "h", config).user is None
    tenth = passwords.sign_in_password("ana@acme.test", "wrong one!", "h", config)
    assert tenth.locked_now
    assert passwords.sign_in_password("ana@acme.test", PASSWORD, "h", config).user is None
    later = now_ms() + passwords.LOCK_MS + 1000
    monkeypatch.setattr(passwords, "now_ms", lambda: later)
    assert passwords.sign_in_password("ana@acme.test", PASSWORD, "h", config).user is not None
