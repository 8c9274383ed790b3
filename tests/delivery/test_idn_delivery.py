"""International domain names end to end (IDNA 2008 + UTS #46): what the API takes, where the
mail goes on a simulated internet, what suppressions and the sandbox match, what the console
shows. ``faß.de`` and ``fass.de`` are two owners' domains; IDNA 2003 made them one."""

from __future__ import annotations

from dataclasses import replace

import pytest

from layang.config import Config, ConfigError
from layang.domain import accounts
from layang.models import AuthorizedRecipient, Recipient
from tests.delivery.test_direct import Running, last_event, send_to, settled, wait_until
from tests.support.browser import screenshot
from tests.web.test_console_suppressions import sign_in

URL = "/v1/layang/transmissions"


def test_mail_for_fass_with_eszett_reaches_its_own_domain_not_fass(client, auth, config, internet):
    eszett = internet.server("mx.xn--fa-hia.de")
    internet.domain("xn--fa-hia.de", (10, "mx.xn--fa-hia.de"))
    other = internet.server("mx.fass.de")
    internet.domain("fass.de", (10, "mx.fass.de"))
    send_to(client, auth, ["kunde@faß.de", "zwei@FAẞ.de", "drei@xn--fa-hia.de"])
    addresses = ["kunde@xn--fa-hia.de", "zwei@xn--fa-hia.de", "drei@xn--fa-hia.de"]
    running = Running(internet.configure(replace(config, retry_base_seconds=30)))
    try:
        wait_until(lambda: settled(addresses), 30, "not every recipient settled")
    finally:
        running.stop()
    assert sorted(eszett.delivered_to()) == sorted(addresses)
    assert other.delivered_to() == []
    assert all(last_event(a)[0] == "Delivery" for a in addresses)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"to": [{"email": "kunde@☃.com"}]}, "to.0.email"),
        ({"cc": [{"email": "kunde@xn--zz.de"}]}, "cc.0.email"),
        ({"from": {"email": "shop@bad-ü-.de"}}, "from.email"),
    ],
)
def test_an_address_idna_2008_refuses_is_a_400_naming_the_field(client, auth, body, field):
    message = {
        "from": {"email": "shop@sender.test"},
        "subject": "hi",
        "to": [{"email": "ana@rcpt.test"}],
        "bodyText": "hello",
        **body,
    }
    response = client.post(URL, headers=auth, json=message)
    assert response.status_code == 400
    error = response.get_json()
    assert field in str(error) and "IDNA 2008" in str(error)
    assert Recipient.select().count() == 0


def test_a_sending_domain_idna_2008_refuses_is_a_400_naming_the_field(client, auth):
    response = client.post("/v1/layang/domains", headers=auth, json={"domain": "☃.com"})
    assert response.status_code == 400
    assert "domain" in str(response.get_json()) and "IDNA 2008" in str(response.get_json())
    response = client.post("/v1/layang/domains", headers=auth, json={"domain": "faß.de"})
    assert response.status_code == 201 and response.get_json()["domain"] == "xn--fa-hia.de"


def test_suppressions_match_an_address_in_either_form(client, auth):
    put = client.put("/v1/layang/suppressions/kunde@faß.de", headers=auth, json={})
    assert put.status_code in (200, 201), put.get_json()
    assert put.get_json()["email"] == "kunde@xn--fa-hia.de"
    for text in ("faß", "kunde@faß.de", "xn--fa-hia"):
        found = client.get(f"/v1/layang/suppressions?email={text}", headers=auth).get_json()
        assert [s["email"] for s in found["items"]] == ["kunde@xn--fa-hia.de"], text
    sent = client.post(
        URL,
        headers=auth,
        json={
            "from": {"email": "shop@sender.test"},
            "subject": "hi",
            "to": [{"email": "KUNDE@XN--FA-HIA.DE"}, {"email": "kunde@fass.de"}],
            "bodyText": "hello",
        },
    ).get_json()
    assert sent["suppressed"] == ["KUNDE@xn--fa-hia.de"], sent


def test_the_sandbox_matches_an_authorized_recipient_by_its_idna_2008_form(client, app):
    account = accounts.create_account("trial-shop")
    auth = {"Authorization": f"Bearer {accounts.create_api_key(account)[1]}"}
    added = client.post(
        "/v1/layang/sandbox/authorized-recipients", json={"email": "kunde@faß.de"}, headers=auth
    )
    assert added.status_code == 201 and added.get_json()["email"] == "kunde@xn--fa-hia.de"
    AuthorizedRecipient.update(status="verified").execute()

    def send(address):
        body = {
            "from": {"email": "sandbox@sandbox.layang.test"},
            "subject": "hi",
            "to": [{"email": address}],
            "bodyText": "hello",
        }
        return client.post(URL, headers=auth, json=body)

    assert send("kunde@xn--fa-hia.de").status_code == 200
    assert send("kunde@FAß.de").status_code == 200
    assert send("kunde@fass.de").status_code != 200


def test_the_ehlo_name_is_sent_as_a_labels(tmp_path):
    environ = {"LAYANG_SECRET_KEY": "k" * 8 + "x" * 24 + "2", "LAYANG_DATA_DIR": str(tmp_path)}

    def load(**settings):
        return Config.from_env(environ | settings, dotenv=False, store_secret=False)

    config = load(
        LAYANG_EHLO_NAME="mail.bücher.example", LAYANG_SOURCE_ADDRESSES="192.0.2.1=mta.faß.de"
    )
    assert config.helo_name == "mail.xn--bcher-kva.example"
    assert config.sources[0].ehlo_name == "mta.xn--fa-hia.de"
    with pytest.raises(ConfigError, match="LAYANG_EHLO_NAME"):
        load(LAYANG_EHLO_NAME="mail.☃.example")


def test_the_console_shows_u_labels(client, upstream, relay_to, browser, live_server):
    acme = accounts.create_account("acme", live=True)
    key = accounts.create_api_key(acme)[1]
    auth = {"Authorization": f"Bearer {key}"}
    send_to(client, auth, ["kunde@faß.de"])
    client.put("/v1/layang/suppressions/weg@bücher.example", headers=auth, json={})
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    sign_in(page, live_server, key)
    page.goto(f"{live_server}/console/activity")
    assert "kunde@faß.de" in page.inner_text("table")
    assert "xn--" not in page.inner_text("table")
    page.goto(f"{live_server}/console/suppressions")
    assert "weg@bücher.example" in page.inner_text("table")
    screenshot(page, "console-idn-suppressions")


def test_an_address_header_names_the_domain_by_its_a_labels(client, auth, upstream, relay_to):
    from tests.conftest import drain

    response = client.post(
        URL,
        headers=auth,
        json={
            "from": {"email": "shop@faß.de", "name": "Shop"},
            "subject": "hi",
            "to": [{"email": "ana@rcpt.test"}],
            "headers": [{"name": "Reply-To", "value": "Kunde <kunde@faß.de>"}],
            "bodyText": "hello",
        },
    )
    assert response.status_code == 200, response.get_json()
    drain(relay_to(upstream))
    head = upstream.received[0].data.split(b"\r\n\r\n")[0]
    assert b"Reply-To: Kunde <kunde@xn--fa-hia.de>" in head
    assert b"From: Shop <shop@xn--fa-hia.de>" in head
    assert b"fass.de" not in head
