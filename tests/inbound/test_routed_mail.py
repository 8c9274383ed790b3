"""Mail to a route's address, end to end: sent with smtplib (and swaks) to a real inbound server,
checked against a real DNS server (SPF, DKIM, DMARC), stored before 250, posted by the webhook
dispatcher to a real HTTP receiver, verified with the standardwebhooks reference library."""

from __future__ import annotations

import base64
import json
import os
import shutil
import smtplib
import socket
import ssl
import subprocess
import threading
import time
from dataclasses import replace
from email.message import EmailMessage

import dkim
import pytest
from standardwebhooks import Webhook

from layang.clock import now_ms
from layang.domain.inbound_mail import delete_old
from layang.inbound.server import inbound_server
from layang.mail.dkim import generate_key
from layang.webhooks.dispatcher import Dispatcher
from tests.conftest import BACKENDS
from tests.delivery.test_crash import free_port
from tests.inbound.test_routing import DOMAIN, add_route, add_verified_domain, other_auth
from tests.support.webhook_receiver import Receiver

pytestmark = pytest.mark.parametrize("backend", BACKENDS)
SENDER_DOMAIN = "sender.example"


@pytest.fixture
def config(config, dns_zone):
    return replace(
        config,
        inbound_bind=f"127.0.0.1:{free_port()}",
        inbound_hostname="mx.layang.example",
        dns_resolver=dns_zone.address,
        webhook_allow_private=True,
        webhook_retry_schedule=(0.3, 0.3, 0.6),
        inbound_inline_mb=1,
    )


@pytest.fixture
def server(app, config):
    controller = inbound_server(config)
    controller.start()
    yield controller
    controller.stop()


@pytest.fixture
def dispatcher(config):
    made = Dispatcher(config, name="inbound-test")
    stop = threading.Event()
    thread = threading.Thread(target=made.run, args=(stop,), daemon=True)
    thread.start()
    yield made
    stop.set()
    thread.join(30)


@pytest.fixture
def route(client, auth, dns_zone, receiver: Receiver, server):
    add_verified_domain(client, auth, dns_zone)
    return add_route(client, auth, f"support@{DOMAIN}", url=receiver.url)


def send(server, data: bytes, to: str = f"support+t-42@{DOMAIN}", sender=f"ann@{SENDER_DOMAIN}"):
    with smtplib.SMTP(server.hostname, server.port, local_hostname="mx.test", timeout=60) as smtp:
        return smtp.sendmail(sender, [to], data)


def reply_mail(**headers: str) -> EmailMessage:
    message = EmailMessage()
    message["From"] = f"Ann Müller <ann@{SENDER_DOMAIN}>"
    message["To"] = f"Support <support+t-42@{DOMAIN}>"
    message["Cc"] = "bob@example.net"
    message["Subject"] = "Re: Ticket #42 — déjà vu"
    message["Message-ID"] = "<reply-1@sender.example>"
    message["In-Reply-To"] = "<ticket-42@shop.example>"
    message["References"] = "<ticket-41@shop.example> <ticket-42@shop.example>"
    message["Date"] = "Sun, 29 Nov 2026 10:00:00 +0000"
    for name, value in headers.items():
        message[name] = value
    message.set_content(
        "Yes, the parcel arrived.\n\n"
        "On Sat, Nov 28, 2026 at 9:00 AM Shop <support@in.shop.example> wrote:\n"
        "> Did your parcel arrive?\n> Shop\n",
        charset="iso-8859-1",
    )
    message.add_alternative(
        "<p>Yes, the parcel arrived.</p><blockquote>Did it?</blockquote>", subtype="html"
    )
    message.add_attachment(
        "Übersicht;ä".encode(),
        maintype="text",
        subtype="plain",
        filename="Rechnung für März.txt",  # the stdlib writes it as RFC 2231
    )
    return message


def verified(request, secret: str) -> dict:
    return Webhook(secret).verify(request.body, request.headers)


def wait_for(condition, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError("not in time")


def test_a_reply_arrives_as_signed_json_with_everything_decoded(
    client, auth, route, server, receiver, dispatcher
):
    data = reply_mail().as_bytes(policy=reply_mail().policy.clone(linesep="\r\n"))
    send(server, data)
    [request] = receiver.wait_for_requests(1)
    payload = verified(request, route["secret"])
    assert payload["type"] == "layang.inbound"
    message = payload["message"]
    assert message["from"] == {"email": f"ann@{SENDER_DOMAIN}", "name": "Ann Müller"}
    assert message["to"] == [{"email": f"support+t-42@{DOMAIN}", "name": "Support"}]
    assert message["cc"] == [{"email": "bob@example.net", "name": ""}]
    assert message["subject"] == "Re: Ticket #42 — déjà vu"
    assert message["messageId"] == "<reply-1@sender.example>"
    assert message["inReplyTo"] == "<ticket-42@shop.example>"
    assert message["references"] == ["<ticket-41@shop.example>", "<ticket-42@shop.example>"]
    assert message["mailboxHash"] == "t-42"
    assert message["text"].startswith("Yes, the parcel arrived.\n\nOn Sat")
    assert message["strippedTextReply"] == "Yes, the parcel arrived."
    assert "<blockquote>" in message["html"]
    [attached] = message["attachments"]
    assert attached["filename"] == "Rechnung für März.txt"
    assert base64.b64decode(attached["content"]) == "Übersicht;ä".encode()
    assert attached["size"] == len("Übersicht;ä".encode())
    assert {"name": "Subject", "value": "Re: Ticket #42 — déjà vu"} in message["headers"]
    assert message["spamScore"] is None
    assert set(message["authentication"]) == {"spf", "dkim", "dmarc", "arc"}
    assert request.headers["webhook-id"] == f"msg_{json.loads(request.body)['message']['id']}" or (
        request.headers["webhook-id"].startswith("msg_")
    )

    def listed_now() -> list[dict]:
        return client.get("/v1/layang/inbound/messages", headers=auth).json["items"]

    wait_for(lambda: listed_now()[0]["status"] == "delivered")
    listed = listed_now()
    assert [m["id"] for m in listed] == [message["id"]]
    assert listed[0]["routeId"] == route["id"] and listed[0]["status"] == "delivered"
    shown = client.get(f"/v1/layang/inbound/messages/{message['id']}", headers=auth).json
    assert [a["status"] for a in shown["attempts"]] == ["delivered"]
    assert shown["attempts"][0]["webhookId"] == request.headers["webhook-id"]
    raw = client.get(f"/v1/layang/inbound/messages/{message['id']}/raw", headers=auth)
    assert raw.status_code == 200 and raw.data == data
    assert (
        client.get(f"/v1/layang/inbound/messages/{message['id']}", headers=other_auth()).status_code
        == 404
    )


def test_after_rotating_a_routes_secret_both_secrets_sign_its_posts(
    client, auth, route, server, receiver, dispatcher
):
    rotated = client.post(f"/v1/layang/inbound/routes/{route['id']}/rotate-secret", headers=auth)
    assert rotated.status_code == 200
    assert rotated.json["secret"] != route["secret"]
    send(server, reply_mail().as_bytes(policy=reply_mail().policy.clone(linesep="\r\n")))
    [request] = receiver.wait_for_requests(1)
    assert len(request.headers["webhook-signature"].split(" ")) == 2
    assert verified(request, route["secret"])["type"] == "layang.inbound"
    assert verified(request, rotated.json["secret"])["type"] == "layang.inbound"


def test_starttls_is_offered_and_mail_over_it_arrives(
    client, auth, route, server, receiver, dispatcher
):
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # self-signed here
    with smtplib.SMTP(server.hostname, server.port, local_hostname="mx.test", timeout=60) as smtp:
        smtp.ehlo()
        assert smtp.has_extn("starttls")
        smtp.starttls(context=context)
        smtp.sendmail(
            "ann@sender.example", [f"support@{DOMAIN}"], b"Subject: over TLS\r\n\r\nhi\r\n"
        )
    [request] = receiver.wait_for_requests(1)
    assert request.payload["message"]["subject"] == "over TLS"


def test_spf_dkim_and_dmarc_are_checked_against_dns(
    client, auth, route, server, receiver, dispatcher, dns_zone
):
    private_pem, public_key = generate_key()
    dns_zone.add_txt(f"sel._domainkey.{SENDER_DOMAIN}", f"v=DKIM1; k=rsa; p={public_key}")
    dns_zone.add_txt(SENDER_DOMAIN, "v=spf1 ip4:127.0.0.1 -all")
    dns_zone.add_txt(f"_dmarc.{SENDER_DOMAIN}", "v=DMARC1; p=reject")
    data = reply_mail().as_bytes(policy=reply_mail().policy.clone(linesep="\r\n"))
    signed = (
        dkim.sign(
            data,
            b"sel",
            SENDER_DOMAIN.encode(),
            private_pem,
            include_headers=[b"from", b"to", b"subject"],
        )
        + data
    )
    send(server, signed)
    # Forged: another domain's From, its DMARC record asking for alignment.
    dns_zone.add_txt("_dmarc.bank.example", "v=DMARC1; p=reject")
    forged = data.replace(f"ann@{SENDER_DOMAIN}".encode(), b"ceo@bank.example", 1)
    send(server, forged, sender="x@elsewhere.example")
    first, second = receiver.wait_for_requests(2)
    assert first.payload["message"]["authentication"] == {
        "spf": "pass",
        "dkim": "pass",
        "dmarc": "pass",
        "arc": "none",
    }
    assert second.payload["message"]["authentication"] == {
        "spf": "none",
        "dkim": "none",
        "dmarc": "fail",
        "arc": "none",
    }


def test_a_large_attachment_comes_as_an_authenticated_url(
    client, auth, route, server, receiver, dispatcher
):
    message = reply_mail()
    big = bytes(range(256)) * (6 * 1024)  # 1.5 MiB, over the 1 MiB inline limit
    message.add_attachment(big, maintype="application", subtype="pdf", filename="scan.pdf")
    send(server, message.as_bytes(policy=message.policy.clone(linesep="\r\n")))
    [request] = receiver.wait_for_requests(1)
    small, large = request.payload["message"]["attachments"]
    assert "content" in small and "content" not in large
    assert large["size"] == len(big) and large["filename"] == "scan.pdf"
    path = large["url"].removeprefix("http://127.0.0.1:8000")
    assert client.get(path).status_code == 401
    assert client.get(path, headers=other_auth()).status_code == 404
    downloaded = client.get(path, headers=auth)
    assert downloaded.status_code == 200 and downloaded.data == big
    assert downloaded.headers["content-type"] == "application/pdf"


def test_a_route_posts_in_order_and_a_retry_keeps_its_webhook_id(
    client, auth, route, server, receiver, dispatcher
):
    receiver.script(500)
    for n in range(3):
        message = reply_mail()
        message.replace_header("Subject", f"number {n}")
        send(server, message.as_bytes(policy=message.policy.clone(linesep="\r\n")))
    requests = receiver.wait_for_requests(4)
    subjects = [r.payload["message"]["subject"] for r in requests]
    assert subjects == ["number 0", "number 0", "number 1", "number 2"]
    assert requests[0].headers["webhook-id"] == requests[1].headers["webhook-id"]
    assert requests[0].answered == 500 and requests[1].answered == 204
    first = requests[0].payload["message"]["id"]
    wait_for(
        lambda: (
            client.get("/v1/layang/inbound/messages?status=pending", headers=auth).json["items"]
            == []
        )
    )
    shown = client.get(f"/v1/layang/inbound/messages/{first}", headers=auth).json
    assert [a["status"] for a in shown["attempts"]] == ["delivered", "pending"]
    # A retry from the API posts the same JSON again, under a new webhook-id.
    again = client.post(f"/v1/layang/inbound/messages/{first}/retry", headers=auth)
    assert again.status_code == 202
    retried = receiver.wait_for_requests(5)[-1]
    assert retried.body == requests[0].body
    assert retried.headers["webhook-id"] != requests[0].headers["webhook-id"]


def test_hold_keeps_the_message_and_filters_find_it(
    client, auth, config, dns_zone, server, receiver, dispatcher
):
    add_verified_domain(client, auth, dns_zone)
    hold = add_route(client, auth, f"*@{DOMAIN}", "hold")
    data = reply_mail().as_bytes(policy=reply_mail().policy.clone(linesep="\r\n"))
    send(server, data, to=f"docs@{DOMAIN}")
    listed = client.get("/v1/layang/inbound/messages?status=held", headers=auth).json["items"]
    assert len(listed) == 1 and listed[0]["routeMatch"] == f"*@{DOMAIN}"
    assert listed[0]["rcptTo"] == [f"docs@{DOMAIN}"] and listed[0]["routeId"] == hold["id"]
    assert (
        client.get("/v1/layang/inbound/messages?status=delivered", headers=auth).json["items"] == []
    )
    assert client.get(f"/v1/layang/inbound/messages?recipient=docs@{DOMAIN}", headers=auth).json[
        "items"
    ]
    assert (
        client.get("/v1/layang/inbound/messages?sender=no@x.example", headers=auth).json["items"]
        == []
    )
    retry = client.post(f"/v1/layang/inbound/messages/{listed[0]['id']}/retry", headers=auth)
    assert retry.status_code == 400 and list(retry.json["errors"]) == ["route"]
    bad = client.get("/v1/layang/inbound/messages?status=lost", headers=auth)
    assert bad.status_code == 400 and list(bad.json["errors"]) == ["status"]
    time.sleep(0.5)
    assert receiver.requests == []
    # Kept LAYANG_INBOUND_RETENTION_DAYS (30), then gone.
    assert delete_old(config, now_ms() + 29 * 86_400_000) == 0
    assert delete_old(config, now_ms() + 31 * 86_400_000) == 1
    assert client.get("/v1/layang/inbound/messages", headers=auth).json["items"] == []


BROKEN = [
    # An unterminated multipart, bad Base64, an unknown charset, a header with raw 8-bit bytes.
    b"From: a@sender.example\r\nSubject: =?x-unknown?B?////?=\r\nX-Raw: caf\xe9\r\n"
    b'MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary="b"\r\n\r\n'
    b"--b\r\nContent-Type: text/plain; charset=x-klingon\r\n\r\nqapla\xff\r\n"
    b"--b\r\nContent-Type: application/pdf\r\nContent-Transfer-Encoding: base64\r\n\r\n@@@!\r\n",
    b"no headers at all, only text\r\n",
    b"From: a@sender.example\r\nMIME-Version: 1.0\r\n"
    b'Content-Type: multipart/mixed; boundary="x"\r\n\r\n'
    + b"".join(b"--x\r\nContent-Type: text/plain\r\n\r\nhi\r\n" for _ in range(150))
    + b"--x--\r\n",
]


def test_broken_mime_is_accepted_and_posted_without_a_crash(
    client, auth, route, server, receiver, dispatcher
):
    for data in BROKEN:
        assert send(server, data) == {}
    requests = receiver.wait_for_requests(len(BROKEN))
    first, second, third = (r.payload["message"] for r in requests)
    assert (
        first["text"].startswith("qapla")
        and first["attachments"][0]["contentType"] == "application/pdf"
    )
    assert second["text"] == "" or "no headers" in second["text"]
    assert "more than 100 MIME parts" in third["parseProblem"]
    assert third["from"] == {"email": "a@sender.example", "name": ""}


@pytest.mark.skipif(shutil.which("swaks") is None, reason="swaks is not installed")
def test_swaks_mail_arrives(client, auth, route, server, receiver, dispatcher):
    done = subprocess.run(
        [
            "swaks",
            "--server",
            f"{server.hostname}:{server.port}",
            "--helo",
            "mx.test",
            "--from",
            f"ann@{SENDER_DOMAIN}",
            "--to",
            f"support@{DOMAIN}",
            "--header",
            "Subject: from swaks",
            "--body",
            "Sent with swaks.",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    [request] = receiver.wait_for_requests(1)
    assert request.payload["message"]["subject"] == "from swaks"
    assert request.payload["message"]["text"].strip() == "Sent with swaks."
    assert request.payload["message"]["mailboxHash"] == ""


@pytest.fixture
def spamd(tmp_path):
    """SpamAssassin's spamd on a free port, its own throwaway config, never the network."""
    path = shutil.which("spamd") or (
        "/usr/sbin/spamd" if os.path.exists("/usr/sbin/spamd") else None
    )
    if path is None:
        if os.environ.get("LAYANG_REQUIRE_TOOLS"):
            pytest.fail("spamd is required here (apt-get install spamd)")
        pytest.skip("spamd is not installed (apt-get install spamd)")
    home = tmp_path / "spamd"
    home.mkdir()
    home.chmod(0o777)  # spamd started as root runs its children as nobody
    port = free_port()
    process = subprocess.Popen(
        [
            path,
            f"--listen=127.0.0.1:{port}",
            "--allowed-ips=127.0.0.1",
            "-L",
            "-x",
            "-u",
            "nobody",
            f"--virtual-config-dir={home}",
            "--max-children=1",
            f"--pidfile={home / 'pid'}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: _listening(port), timeout=60)
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(30)


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


GTUBE = "XJS*C4JDBQADN1.NSBN3*2IDNEN*GTUBE-STANDARD-ANTI-UBE-TEST-EMAIL*C.34X"


def test_spamd_scores_and_the_threshold_holds(
    client, auth, dns_zone, config, app, receiver, dispatcher, spamd
):
    add_verified_domain(client, auth, dns_zone)
    add_route(client, auth, f"support@{DOMAIN}", url=receiver.url, spamThreshold=5)
    scored = inbound_server(replace(config, spamd=spamd, inbound_bind=f"127.0.0.1:{free_port()}"))
    scored.start()
    try:
        send(scored, reply_mail().as_bytes(policy=reply_mail().policy.clone(linesep="\r\n")))
        spam = reply_mail()
        spam.replace_header("Subject", "You won")
        spam.get_body(("plain",)).set_content(GTUBE)
        send(scored, spam.as_bytes(policy=spam.policy.clone(linesep="\r\n")))
    finally:
        scored.stop()
    [request] = receiver.wait_for_requests(1)
    assert request.payload["message"]["spamScore"] < 5
    held = client.get("/v1/layang/inbound/messages?status=held", headers=auth).json["items"]
    assert [m["message"]["subject"] for m in held] == ["You won"]
    assert held[0]["spamScore"] >= 1000 and "reached the route's 5" in held[0]["note"]
    time.sleep(0.5)
    assert len(receiver.requests) == 1


def test_a_25_mb_attachment_heavy_message_arrives_whole(
    client, auth, route, config, app, receiver, dispatcher
):
    import hashlib

    message = reply_mail()
    blobs = [os.urandom(8 * 1024 * 1024 + n) for n in range(3)]  # 24 MiB + in three
    for n, blob in enumerate(blobs):
        message.add_attachment(
            blob, maintype="application", subtype="octet-stream", filename=f"part{n}.bin"
        )
    data = message.as_bytes(policy=message.policy.clone(linesep="\r\n"))
    assert len(data) > 25 * 1000 * 1000
    roomy = inbound_server(
        replace(config, inbound_inline_mb=10, inbound_bind=f"127.0.0.1:{free_port()}")
    )
    roomy.start()
    try:
        started = time.monotonic()
        send(roomy, data)
        accepted = time.monotonic() - started
    finally:
        roomy.stop()
    [request] = receiver.wait_for_requests(1, timeout=120)
    attachments = request.payload["message"]["attachments"][1:]
    assert [hashlib.sha256(base64.b64decode(a["content"])).hexdigest() for a in attachments] == [
        hashlib.sha256(blob).hexdigest() for blob in blobs
    ]
    assert accepted < 60
    raw = client.get(
        f"/v1/layang/inbound/messages/{request.payload['message']['id']}/raw", headers=auth
    )
    assert raw.data == data
