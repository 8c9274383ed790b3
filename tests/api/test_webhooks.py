"""``/v1/layang/webhooks``: endpoints per account, the secret shown once, validation, SSRF rules."""

from __future__ import annotations

import pytest

from layang.domain import accounts

URL = "https://hooks.example.com/layang"


def create(client, auth, **body):
    return client.post(
        "/v1/layang/webhooks", headers=auth, json={"url": URL, "events": ["*"], **body}
    )


def test_create_shows_the_secret_once_and_never_again(client, auth):
    response = create(client, auth, events=["Delivery", "Bounce"], description="shop")
    assert response.status_code == 201
    made = response.json
    assert made["secret"].startswith("whsec_")
    assert made["url"] == URL and made["events"] == ["Delivery", "Bounce"]
    assert made["enabled"] is True and made["disabledAt"] is None
    assert made["description"] == "shop"

    shown = client.get(f"/v1/layang/webhooks/{made['id']}", headers=auth).json
    assert "secret" not in shown
    assert shown == {k: v for k, v in made.items() if k != "secret"}
    listing = client.get("/v1/layang/webhooks", headers=auth).json
    assert listing == {"items": [shown], "nextCursor": None}


def test_every_event_type_is_accepted(client, auth):
    kinds = [
        "Injection",
        "Delivery",
        "Delay",
        "Bounce",
        "Suppressed",
        "Open",
        "Click",
        "Complaint",
        "Unsubscribe",
    ]
    assert create(client, auth, events=kinds).json["events"] == kinds


def test_listing_pages_with_a_cursor(client, auth):
    made = [create(client, auth).json["id"] for _ in range(3)]
    first = client.get("/v1/layang/webhooks?limit=2", headers=auth).json
    assert [e["id"] for e in first["items"]] == made[:0:-1]
    second = client.get(
        f"/v1/layang/webhooks?limit=2&cursor={first['nextCursor']}", headers=auth
    ).json
    assert [e["id"] for e in second["items"]] == made[:1] and second["nextCursor"] is None


def test_patch_changes_url_events_and_enabled(client, auth):
    made = create(client, auth).json
    path = f"/v1/layang/webhooks/{made['id']}"
    changed = client.patch(
        path,
        headers=auth,
        json={"url": "https://other.example.com/h", "events": ["Open"], "enabled": False},
    )
    assert changed.status_code == 200
    assert changed.json["url"] == "https://other.example.com/h"
    assert changed.json["events"] == ["Open"]
    assert changed.json["enabled"] is False and changed.json["disabledAt"]
    assert "secret" not in changed.json
    enabled = client.patch(path, headers=auth, json={"enabled": True}).json
    assert enabled["enabled"] is True and enabled["disabledAt"] is None


def test_delete(client, auth):
    made = create(client, auth).json
    assert client.delete(f"/v1/layang/webhooks/{made['id']}", headers=auth).status_code == 204
    gone = client.get(f"/v1/layang/webhooks/{made['id']}", headers=auth)
    assert gone.status_code == 404 and gone.json["error"] == "not_found"


def test_rotate_gives_a_new_secret(client, auth):
    made = create(client, auth).json
    rotated = client.post(f"/v1/layang/webhooks/{made['id']}/rotate-secret", headers=auth)
    assert rotated.status_code == 200
    assert rotated.json["secret"].startswith("whsec_") and rotated.json["secret"] != made["secret"]


def test_test_event_is_queued_and_deliveries_list_is_empty_until_sent(client, auth):
    made = create(client, auth).json
    queued = client.post(f"/v1/layang/webhooks/{made['id']}/test", headers=auth)
    assert queued.status_code == 202 and queued.json["eventId"]
    listing = client.get(f"/v1/layang/webhooks/{made['id']}/deliveries", headers=auth)
    assert listing.status_code == 200 and listing.json == {"items": [], "nextCursor": None}


def test_another_accounts_endpoint_is_404(client, auth, app):
    made = create(client, auth).json
    other = accounts.create_account("other", live=True)
    other_auth = {"Authorization": f"Bearer {accounts.create_api_key(other, 'k')[1]}"}
    path = f"/v1/layang/webhooks/{made['id']}"
    assert client.get(path, headers=other_auth).status_code == 404
    assert client.patch(path, headers=other_auth, json={"enabled": False}).status_code == 404
    assert client.delete(path, headers=other_auth).status_code == 404
    for action in ("rotate-secret", "test"):
        assert client.post(f"{path}/{action}", headers=other_auth).status_code == 404
    assert client.get(f"{path}/deliveries", headers=other_auth).status_code == 404
    assert client.get("/v1/layang/webhooks", headers=other_auth).json["items"] == []
    assert client.get(path, headers=auth).json["enabled"] is True


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://hooks.example.com/", "https://"),
        ("ftp://hooks.example.com/", "https://"),
        ("https://127.0.0.1/h", "loopback"),
        ("https://localhost:8443/h", "loopback"),
        ("https://10.1.2.3/h", "private"),
        ("https://192.168.0.10/h", "private"),
        ("https://172.16.5.5/h", "private"),
        ("https://169.254.169.254/latest/meta-data", "metadata"),
        ("https://[fd00:ec2::254]/", "metadata"),
        ("https://169.254.10.10/", "link-local"),
        ("https://100.64.0.1/", "CGNAT"),
        ("https://[::1]/", "loopback"),
        ("https://0.0.0.0/", "unspecified"),
        ("https://224.0.0.1/", "multicast"),
        ("https://240.0.0.1/", "reserved"),
        ("https://[::ffff:127.0.0.1]/", "loopback"),
        ("https:///nohost", "no host"),
        ("https://2130706433/h", "numeric form of an IPv4 address"),
        ("https://0x7f.1/h", "numeric form of an IPv4 address"),
        ("https://0x7f000001/h", "numeric form of an IPv4 address"),
        ("https://127.1/h", "numeric form of an IPv4 address"),
        ("https://0177.0.0.1/h", "numeric form of an IPv4 address"),
        ("https://017700000001:8443/h", "numeric form of an IPv4 address"),
        ("https://[64:ff9b::a9fe:a9fe]/", "metadata"),
        ("https://[64:ff9b::7f00:1]/", "loopback"),
    ],
)
def test_urls_that_are_not_https_or_name_a_refused_address_are_400(client, auth, url, says):
    response = create(client, auth, url=url)
    assert response.status_code == 400
    body = response.json
    assert body["error"] == "validation_failed"
    assert body["message"].startswith("url: ") and says in body["message"]
    assert list(body["errors"]) == ["url"]
    made = create(client, auth).json
    patched = client.patch(f"/v1/layang/webhooks/{made['id']}", headers=auth, json={"url": url})
    assert patched.status_code == 400 and list(patched.json["errors"]) == ["url"]


@pytest.mark.parametrize(
    ("url", "hinted"),
    [
        ("http://hooks.example.com/", True),
        ("https://127.0.0.1/h", True),
        ("https://localhost:8443/h", True),
        ("https://192.168.0.10/h", True),
        ("https://169.254.169.254/latest/meta-data", False),  # refused whatever the setting
        ("ftp://hooks.example.com/", False),
    ],
)
def test_a_refusal_the_setting_lifts_names_the_setting(client, auth, url, hinted):
    message = create(client, auth, url=url).json["message"]
    assert ("LAYANG_WEBHOOK_ALLOW_PRIVATE=true" in message) is hinted, message


def test_validation_names_the_field(client, auth):
    unknown = create(client, auth, events=["Delivery", "Teleport"])
    assert unknown.status_code == 400
    (problem,) = unknown.json["errors"]["events"]["1"]
    assert problem.startswith("Must be one of: *, Injection, Delivery")
    assert unknown.json["message"].startswith("events.1: ")
    empty = client.post("/v1/layang/webhooks", headers=auth, json={"url": URL})
    assert empty.status_code == 400 and "events" in empty.json["errors"]
    extra = create(client, auth, colour="blue")
    assert extra.status_code == 400 and "colour" in extra.json["errors"]
    made = create(client, auth).json
    wrong = client.patch(f"/v1/layang/webhooks/{made['id']}", headers=auth, json={"enabled": "no"})
    assert wrong.status_code == 400 and "enabled" in wrong.json["errors"]


def test_scopes_apply(client, account):
    read = {"Authorization": f"Bearer {accounts.create_api_key(account, 'r', scope='read')[1]}"}
    send = {"Authorization": f"Bearer {accounts.create_api_key(account, 's', scope='send')[1]}"}
    assert create(client, read).status_code == 403
    assert create(client, send).status_code == 403
    assert client.get("/v1/layang/webhooks", headers=read).status_code == 200
    assert client.get("/v1/layang/webhooks", headers=send).status_code == 403


def test_private_addresses_and_http_are_allowed_when_configured(app, client, auth):
    app.config["LAYANG"] = type(app.config["LAYANG"])(
        **{**vars(app.config["LAYANG"]), "webhook_allow_private": True}
    )
    made = create(client, auth, url="http://127.0.0.1:9/h")
    assert made.status_code == 201
    metadata = create(client, auth, url="http://169.254.169.254/")
    assert metadata.status_code == 400


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/",
        "http://169.254.170.2/v2/credentials",
        "http://100.100.100.200/latest/meta-data",
        "http://[64:ff9b::a9fe:a9fe]/",
        "http://[::ffff:169.254.169.254]/",
        "http://[2002:a9fe:a9fe::1]/",
        "http://2852039166/",
        "http://169.254.1.1/",
    ],
)
def test_metadata_addresses_are_refused_even_when_private_ones_are_allowed(app, client, auth, url):
    app.config["LAYANG"] = type(app.config["LAYANG"])(
        **{**vars(app.config["LAYANG"]), "webhook_allow_private": True}
    )
    refused = create(client, auth, url=url)
    assert refused.status_code == 400, refused.json
    assert list(refused.json["errors"]) == ["url"]
