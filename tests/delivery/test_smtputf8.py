"""Non-ASCII local parts (RFC 6531, 6532): the address goes out over SMTPUTF8 when the server
offers it, as it was given; a server that does not offer it gets no such address, and that
recipient bounces ``553 5.6.7`` (``hard``), the others unharmed."""

from __future__ import annotations

import json

from layang.models import Event, Recipient
from tests.conftest import drain
from tests.support.upstream import Upstream

URL = "/v1/layang/transmissions"


def send(client, auth, *addresses):
    response = client.post(
        URL,
        headers=auth,
        json={
            "from": {"email": "shop@sender.test"},
            "subject": "Grüße",
            "to": [{"email": a} for a in addresses],
            "bodyText": "hallo",
        },
    )
    assert response.status_code == 200, response.get_json()
    return response.get_json()["transmissionId"]


def last(address):
    recipient = Recipient.get(Recipient.address == address)
    event = Event.select().where(Event.recipient == recipient).order_by(Event.id.desc()).first()
    return event.status, json.loads(event.detail or "{}")


def test_a_non_ascii_local_part_goes_out_over_smtputf8(client, auth, relay_to):
    server = Upstream(smtputf8=True)
    server.start()
    try:
        send(client, auth, "jörg@faß.de", "用户@例子.广告")
        drain(relay_to(server))
        assert sorted(r for m in server.received for r in m.rcpt_tos) == sorted(
            ["jörg@xn--fa-hia.de", "用户@xn--fsqu00a.xn--4rr70v"]
        )
        verbs = [verb for verb, _ in server.attempts]
        assert verbs.count("SMTPUTF8") == verbs.count("MAIL") == len(server.received)
        # The header names the address as given (RFC 6532), not mangled or encoded away.
        received = server.received[0]
        assert "jörg@xn--fa-hia.de".encode() in received.data.split(b"\r\n\r\n")[0]
        assert last("jörg@xn--fa-hia.de")[0] == "Delivery"
    finally:
        server.stop()


def test_a_server_without_smtputf8_never_sees_the_address_and_it_bounces_hard(
    client, auth, relay_to
):
    server = Upstream(smtputf8=False)
    server.start()
    try:
        send(client, auth, "jörg@faß.de", "ana@rcpt.test")
        drain(relay_to(server))
        assert [r.rcpt_tos for r in server.received] == [["ana@rcpt.test"]]
        assert not any("jörg" in arg for verb, arg in server.attempts if verb != "DATA")
        status, detail = last("jörg@xn--fa-hia.de")
        assert (status, detail["code"], detail["bounceClass"]) == ("Bounce", 553, "hard")
        assert detail["reply"].startswith("553 5.6.7 SMTPUTF8 is required")
        assert last("ana@rcpt.test")[0] == "Delivery"
    finally:
        server.stop()
