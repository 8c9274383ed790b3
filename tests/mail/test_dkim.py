"""DKIM signing in the worker: every message from a verified domain reaches the upstream server
signed once, over exactly the bytes relayed, and dkimpy's verifier accepts the signature with
the key it looks up in a real DNS server."""

from __future__ import annotations

import base64
import re
import smtplib
from dataclasses import replace

import dkim as dkimpy
import dns.nameserver
import dns.resolver
import pytest
from cryptography.hazmat.primitives import serialization

from layang.domain import accounts
from layang.mail import dkim
from layang.serving.app import create_app
from layang.submission.server import submission_server
from tests.conftest import BACKENDS, b64, drain
from tests.delivery.test_crash import free_port
from tests.submission.test_submission import client_context

BOTH = pytest.mark.parametrize("backend", BACKENDS)

DOMAINS = "/v1/layang/domains"
SEND = "/v1/layang/transmissions"
REQUIRED = {
    "from",
    "to",
    "cc",
    "subject",
    "date",
    "message-id",
    "reply-to",
    "mime-version",
    "content-type",
    "list-unsubscribe",
    "list-unsubscribe-post",
}
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


@pytest.fixture
def config(config, dns_zone):
    return replace(config, dns_resolver=dns_zone.address)


@pytest.fixture
def smtp_config(config):
    return replace(config, smtp_bind=f"127.0.0.1:{free_port()}")


def submission(config):
    controller = submission_server(config)
    controller.start()
    return controller


@pytest.fixture
def verifier(dns_zone):
    """dkimpy's verifier, looking keys up in the test's DNS server (with dnspython)."""
    resolver = dns.resolver.Resolver(configure=False)
    host, port = dns_zone.address.split(":")
    resolver.nameservers = [dns.nameserver.Do53Nameserver(host, int(port))]

    def get_txt(name: bytes, timeout: float = 5) -> bytes | None:
        answer = resolver.resolve(name.decode().rstrip("."), "TXT", raise_on_no_answer=False)
        if answer.rrset is None:
            return None
        return b"".join(next(iter(answer.rrset)).strings)

    def verify(data: bytes, index: int = 0) -> bool:
        """The message's ``index``-th signature (from the top) verifies."""
        try:
            return dkimpy.DKIM(data).verify(idx=index, dnsfunc=get_txt)
        except dkimpy.DKIMException:  # what dkimpy.verify turns into False
            return False

    return verify


def verified_domain(client, auth, zone, domain="example.com"):
    body = client.post(DOMAINS, json={"domain": domain}, headers=auth).get_json()
    zone.publish(body["records"])
    body = client.post(f"{DOMAINS}/{domain}/verify", headers=auth).get_json()
    assert body["status"] == "verified"
    return body


def signatures(data: bytes) -> list[dict[bytes, bytes]]:
    head = re.split(rb"\r?\n\r?\n", data, maxsplit=1)[0]
    fields = re.findall(rb"^DKIM-Signature:(.*(?:\r?\n[ \t].*)*)", head, re.M | re.I)
    return [dkimpy.util.parse_tag_value(value) for value in fields]


def signed_headers(signature: dict[bytes, bytes]) -> set[str]:
    return {h.strip().decode() for h in signature[b"h"].split(b":")}


def send(client, auth, **fields):
    body = {
        "from": {"email": "shop@example.com", "name": "Shop"},
        "to": [{"email": "ana@rcpt.test"}],
        "subject": "Your order",
    }
    body.update(fields)
    if "bodyText" not in body and "bodyHtml" not in body:
        body["bodyText"] = "Thanks."
    response = client.post(SEND, json=body, headers=auth)
    assert response.status_code == 200, response.get_json()
    return response.get_json()["transmissionId"]


SHAPES = {
    "text": {"bodyText": "Thanks for your order.\n"},
    "html": {"bodyHtml": "<p>Thanks for <b>your</b> order.</p>"},
    "both": {"bodyText": "Thanks.", "bodyHtml": "<p>Thanks.</p>", "cc": [{"email": "c@r.test"}]},
    "attachments": {
        "bodyText": "See attached.",
        "bodyHtml": "<p>Attached.</p>",
        "attachments": [
            {"filename": "a.csv", "mimeType": "text/csv", "value": b64(b"a,b\n1,2\n")},
            {"filename": "logo.png", "mimeType": "image/png", "value": b64(PNG)},
        ],
    },
    "non-ascii": {
        "from": {"email": "shop@example.com", "name": "Bücher & Co — 书店"},
        "to": [{"email": "ana@rcpt.test", "name": "Ána Ñúñez"}],
        "subject": "Grüße aus Köln — 你好 " + "ü" * 80,
        "replyTo": [{"email": "help@example.com", "name": "Hilfe"}],
        "headers": [{"name": "X-Order", "value": "Nº 42"}],
        "bodyText": "Schöne Grüße, 你好\n",
    },
    "long lines": {
        "bodyText": "word " * 2000,
        "bodyHtml": "<p>" + "x" * 5000 + "</p>",
    },
    "tracked": {
        "bodyHtml": '<p><a href="https://example.com/a">link</a></p>',
        "optionsAttributes": {"openTracking": True, "clickTracking": True},
    },
    "one-click unsubscribe": {
        "bodyText": "This week's news.",
        "cc": [{"email": "cy@r.test"}],
        "optionsAttributes": {"transactional": False},
    },
}


@BOTH
@pytest.mark.parametrize("shape", SHAPES)
def test_every_message_shape_is_signed_and_verifies(
    client, auth, dns_zone, upstream, relay_to, verifier, shape
):
    domain = verified_domain(client, auth, dns_zone)
    send(client, auth, **SHAPES[shape])
    drain(relay_to(upstream))
    assert upstream.received
    for received in upstream.received:
        (signature,) = signatures(received.data)
        assert signature[b"d"] == b"example.com"
        assert signature[b"s"] == domain["dkim"][0]["selector"].encode()
        assert signature[b"a"] == b"rsa-sha256"
        assert signature[b"c"] == b"relaxed/relaxed"
        assert signed_headers(signature) >= REQUIRED
        assert verifier(received.data), shape
        if shape == "one-click unsubscribe":
            headers = received.message
            assert headers["List-Unsubscribe"] and headers["List-Unsubscribe-Post"]
            # Both are signed, and a second one added on the way would break the signature.
            names = [name.strip().lower() for name in signature[b"h"].split(b":")]
            assert names.count(b"list-unsubscribe") == names.count(b"list-unsubscribe-post") == 2
            added = received.data.replace(
                b"\r\n\r\n", b"\r\nList-Unsubscribe: <https://evil.example/u>\r\n\r\n", 1
            )
            assert not verifier(added)
        # Exactly the bytes relayed: one changed byte in the body breaks it.
        tampered = received.data.replace(b"\r\n\r\n", b"\r\n\r\nX", 1)
        assert not verifier(tampered)


@BOTH
def test_a_parent_domains_key_signs_for_its_subdomains(
    client, auth, dns_zone, upstream, relay_to, verifier
):
    verified_domain(client, auth, dns_zone)
    send(client, auth, **{"from": {"email": "news@mail.example.com"}})
    drain(relay_to(upstream))
    (received,) = upstream.received
    (signature,) = signatures(received.data)
    assert signature[b"d"] == b"example.com"
    assert verifier(received.data)


@BOTH
def test_unverified_and_foreign_domains_are_not_signed(client, auth, dns_zone, upstream, relay_to):
    client.post(DOMAINS, json={"domain": "pending.test"}, headers=auth)  # never published
    verified_domain(client, auth, dns_zone)
    other = accounts.create_account("other", live=True)
    other_auth = {"Authorization": f"Bearer {accounts.create_api_key(other)[1]}"}
    send(client, auth, **{"from": {"email": "a@pending.test"}})
    send(client, auth, **{"from": {"email": "a@notexample.com"}})
    send(client, other_auth, **{"from": {"email": "a@example.com"}})  # another account's
    drain(relay_to(upstream))
    assert len(upstream.received) == 3
    assert all(signatures(r.data) == [] for r in upstream.received)


@BOTH
def test_a_retry_is_signed_once_over_the_same_message(
    client, auth, dns_zone, upstream, relay_to, verifier
):
    verified_domain(client, auth, dns_zone)
    upstream.script_data("451 4.3.0 try again later")
    send(client, auth, bodyText="retry me")
    worker = relay_to(upstream)
    drain(worker, until=lambda: len(upstream.received) == 1)
    (received,) = upstream.received
    assert len(signatures(received.data)) == 1
    assert verifier(received.data)


@BOTH
def test_rotation_moves_signing_without_a_gap(client, auth, dns_zone, upstream, relay_to, verifier):
    first = verified_domain(client, auth, dns_zone)["dkim"][0]["selector"]
    worker = relay_to(upstream)
    send(client, auth, subject="before")
    rotated = client.post(f"{DOMAINS}/example.com/dkim/rotate", headers=auth).get_json()
    second = rotated["dkim"][1]["selector"]
    send(client, auth, subject="pending")  # the new record is not published yet
    drain(worker)
    dns_zone.publish([r for r in rotated["records"] if r["name"].startswith(second)])
    client.post(f"{DOMAINS}/example.com/verify", headers=auth)
    send(client, auth, subject="after")
    drain(worker)
    by_subject = {r.message["Subject"]: r.data for r in upstream.received}
    assert [
        signatures(by_subject[s])[0][b"s"].decode() for s in ("before", "pending", "after")
    ] == [
        first,
        first,
        second,
    ]
    assert all(verifier(data) for data in by_subject.values())
    # The retired key still verifies mail sent before the switch, until it is deleted.
    assert client.delete(f"{DOMAINS}/example.com/dkim/{first}", headers=auth).status_code == 204
    send(client, auth, subject="later")
    drain(worker)
    later = next(r.data for r in upstream.received if r.message["Subject"] == "later")
    assert signatures(later)[0][b"s"].decode() == second and verifier(later)


RAW = (
    b"From: =?utf-8?q?B=C3=BCcher?= <shop@example.com>\n"
    b"To: ana@rcpt.test\n"
    b"Subject: submitted\n over two lines\n"
    b"MIME-Version: 1.0\n"
    b"Content-Type: text/plain; charset=utf-8\n"
    b"Content-Transfer-Encoding: 8bit\n"
    b"\n"
    b"Sch\xc3\xb6ne Gr\xc3\xbc\xc3\x9fe\n" + b"y" * 900 + b"\n.leading dot\n"
).replace(b"\n", b"\r\n")


@BOTH
def test_smtp_submitted_messages_are_signed_as_relayed(
    app, client, auth, dns_zone, api_key, smtp_config, upstream, relay_to, verifier
):
    verified_domain(client, auth, dns_zone)
    host, port = smtp_config.smtp_host_port
    server = submission(smtp_config)
    try:
        with smtplib.SMTP(host, port, local_hostname="client.test", timeout=10) as smtp:
            smtp.starttls(context=client_context())
            smtp.login("acme", api_key)
            smtp.sendmail("shop@example.com", ["ana@rcpt.test"], RAW)
    finally:
        server.stop()
    drain(relay_to(upstream))
    (received,) = upstream.received
    (signature,) = signatures(received.data)
    assert signature[b"d"] == b"example.com"
    assert verifier(received.data)
    assert b"Sch\xc3\xb6ne" in received.data


@BOTH
def test_the_smtp_server_refuses_unverified_domains_when_required(
    app, client, auth, dns_zone, api_key, config, smtp_config, upstream
):
    required = replace(smtp_config, require_verified_domain=True)
    controller = submission(required)
    try:
        verified_domain(client, auth, dns_zone)
        host, port = required.smtp_host_port
        with smtplib.SMTP(host, port, local_hostname="client.test", timeout=10) as smtp:
            smtp.starttls(context=client_context())
            smtp.login("acme", api_key)
            code, reply = smtp.mail("shop@unverified.test")
            assert code == 553 and reply.startswith(b"5.7.1 ")
            assert b"unverified.test is not a verified sending domain" in reply
            smtp.rset()
            assert smtp.mail("shop@mail.example.com")[0] == 250
            assert smtp.rcpt("ana@rcpt.test")[0] == 250
            # The header From is what DKIM aligns with: held to the same rule.
            code, reply = smtp.data(b"From: shop@unverified.test\r\nSubject: x\r\n\r\nhi\r\n")
            assert code == 554 and reply.startswith(b"5.7.1 ")
    finally:
        controller.stop()


def signed_as_dkimpy_does(message: bytes, key: dkim.SigningKey, private: bytes, **options):
    """``message`` signed by ``key``, which must be byte for byte what dkimpy signs with the
    same ``private`` key and ``options``."""
    for _ in range(3):  # t= is in seconds: retry should a second tick in between
        ours = dkim.sign_message(message, key)
        theirs = dkimpy.sign(
            message,
            key.selector.encode(),
            key.domain.encode(),
            private,
            canonicalize=(b"relaxed", b"relaxed"),
            include_headers=dkim.header_list(message),
            **options,
        )
        if ours == theirs + message:
            return ours
    raise AssertionError("the signatures differ")


def test_our_signature_is_byte_for_byte_dkimpys_own():
    pem, _ = dkim.generate_key()
    key = dkim.SigningKey.from_pem("example.com", "s1", pem)
    message = (
        b"From: a@example.com\r\nTo: b@example.org\r\nSubject: hi\r\n"
        b"Date: Mon, 1 Jan 2024 00:00:00 +0000\r\nMessage-ID: <x@example.com>\r\n"
        b"MIME-Version: 1.0\r\nContent-Type: text/plain\r\n\r\n" + b"hello\r\n" * 50
    )
    signed_as_dkimpy_does(message, key, pem)


def test_headers_are_oversigned():
    names = dkim.header_list(b"From: a@x.test\r\nTo: b@y.test\r\nTo: c@y.test\r\n\r\nTo: body\r\n")
    assert names.count(b"from") == 2 and names.count(b"to") == 3 and names.count(b"cc") == 1


@BOTH
def test_a_second_from_header_is_refused_not_signed(
    app, client, auth, dns_zone, api_key, smtp_config, upstream, relay_to
):
    required = replace(smtp_config, require_verified_domain=True)
    verified_domain(client, auth, dns_zone)
    controller = submission(required)
    try:
        host, port = required.smtp_host_port
        with smtplib.SMTP(host, port, local_hostname="client.test", timeout=10) as smtp:
            smtp.starttls(context=client_context())
            smtp.login("acme", api_key)
            assert smtp.mail("shop@example.com")[0] == 250
            assert smtp.rcpt("ana@rcpt.test")[0] == 250
            code, reply = smtp.data(
                b"From: news@example.com\r\nFrom: ceo@bank.example\r\nSubject: x\r\n\r\nhi\r\n"
            )
            assert code == 550 and reply.startswith(b"5.6.0 "), reply
    finally:
        controller.stop()
    drain(relay_to(upstream))
    assert upstream.received == []


def offline_verifier(public_key: str):
    record = dkim.record_value(public_key).encode()
    return lambda data: dkimpy.verify(data, dnsfunc=lambda name, timeout=5: record)


def test_copies_of_one_body_each_verify_with_the_body_hash_kept():
    pem, public = dkim.generate_key()
    verify = offline_verifier(public)
    signer = dkim.DkimSigner("secret")
    key = dkim.SigningKey.from_pem("example.com", "s1", pem)
    signer.keys_for = lambda account_id, from_domain: [key]
    body = b"From: a@example.com\r\nSubject: hi\r\n\r\n" + b"same body  \r\n" * 20
    other = b"From: a@example.com\r\nSubject: hi\r\n\r\n" + b"other body\r\n"
    copies = [
        signer.sign(body, 1, "example.com", prefix=b"X-Layang-Id: one\r\n"),
        signer.sign(body, 1, "example.com", prefix=b"X-Layang-Id: two\r\n"),
        signer.sign(other, 1, "example.com", prefix=b"X-Layang-Id: three\r\n"),
    ]
    assert all(verify(copy) for copy in copies)
    assert signatures(copies[0])[0][b"bh"] == signatures(copies[1])[0][b"bh"]
    assert signatures(copies[0])[0][b"bh"] != signatures(copies[2])[0][b"bh"]


def test_bare_line_ends_are_signed_as_the_transport_sends_them():
    pem, public = dkim.generate_key()
    key = dkim.SigningKey.from_pem("example.com", "s1", pem)
    raw = b"From: a@example.com\nSubject: hi\n\nline one\nline two  \n\n"
    signed = dkim.sign_message(raw, key)
    relayed = re.sub(rb"\r(?!\n)|(?<!\r)\n", b"\r\n", signed)
    assert offline_verifier(public)(relayed)


def test_a_header_section_that_is_not_rfc5322_is_refused():
    pem, _ = dkim.generate_key()
    key = dkim.SigningKey.from_pem("example.com", "s1", pem)
    with pytest.raises(dkim.DkimError):
        dkim.sign_message(b"From: a@example.com\r\nnot a header\r\n\r\nbody\r\n", key)


def test_our_ed25519_signature_is_byte_for_byte_dkimpys_own():
    pem, public = dkim.generate_ed25519_key()
    key = dkim.SigningKey.from_pem("example.com", "s2", pem)
    seed = key.key.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    message = (
        b"From: a@example.com\r\nTo: b@example.org\r\nSubject: hi\r\n"
        b"Date: Mon, 1 Jan 2024 00:00:00 +0000\r\nMessage-ID: <x@example.com>\r\n\r\n"
        + b"hello  \r\n"
        * 50
    )
    ours = signed_as_dkimpy_does(
        message, key, base64.b64encode(seed), signature_algorithm=b"ed25519-sha256"
    )
    record = dkim.record_value(public, dkim.ED25519).encode()
    assert record.startswith(b"v=DKIM1; k=ed25519; p=")
    assert dkimpy.verify(ours, dnsfunc=lambda name, timeout=5: record)


@BOTH
def test_ed25519_adds_a_second_signature_once_its_record_verifies(
    client, auth, config, dns_zone, upstream, relay_to, verifier
):
    # A domain verified before the setting was turned on signs with RSA alone.
    before = verified_domain(client, auth, dns_zone)
    assert [(k["algorithm"], k["bits"]) for k in before["dkim"]] == [("rsa-sha256", 2048)]
    rsa_selector = before["dkim"][0]["selector"]
    on = create_app(replace(config, dkim_ed25519=True)).test_client()

    # Turned on, the next check gives the domain an Ed25519 key and a record to publish; the
    # domain stays verified meanwhile.
    body = on.post(f"{DOMAINS}/example.com/verify", headers=auth).get_json()
    assert body["status"] == "verified"
    (ed,) = [k for k in body["dkim"] if k["algorithm"] == "ed25519-sha256"]
    assert (ed["bits"], ed["status"]) == (256, "pending")
    (record,) = [r for r in body["records"] if r["name"].startswith(ed["selector"] + ".")]
    assert record["status"] == "missing" and "k=ed25519;" in record["value"]
    worker = relay_to(upstream)
    send(client, auth, subject="unpublished")
    drain(worker)

    dns_zone.publish([record])
    body = on.post(f"{DOMAINS}/example.com/verify", headers=auth).get_json()
    assert {k["algorithm"]: k["status"] for k in body["dkim"]} == {
        "rsa-sha256": "active",
        "ed25519-sha256": "active",
    }
    send(client, auth, subject="both")
    drain(worker)
    by_subject = {r.message["Subject"]: r.data for r in upstream.received}
    assert [s[b"a"] for s in signatures(by_subject["unpublished"])] == [b"rsa-sha256"]
    both = by_subject["both"]
    rsa_signature, ed_signature = signatures(both)
    assert rsa_signature[b"a"] == b"rsa-sha256" and rsa_signature[b"s"] == rsa_selector.encode()
    assert ed_signature[b"a"] == b"ed25519-sha256" and ed_signature[b"s"] == ed["selector"].encode()
    assert signed_headers(ed_signature) >= REQUIRED
    # Each verifies on its own, and each breaks when one byte of the body changes.
    assert verifier(both, 0) and verifier(both, 1)
    tampered = both.replace(b"\r\n\r\n", b"\r\n\r\nX", 1)
    assert not verifier(tampered, 0) and not verifier(tampered, 1)

    # Rotation renews both; the Ed25519 key, only ever a second signature, may go at any time,
    # the only active RSA key may not.
    rotated = on.post(f"{DOMAINS}/example.com/dkim/rotate", headers=auth).get_json()
    pending = sorted(k["algorithm"] for k in rotated["dkim"] if k["status"] == "pending")
    assert pending == ["ed25519-sha256", "rsa-sha256"]
    deleted = client.delete(f"{DOMAINS}/example.com/dkim/{ed['selector']}", headers=auth)
    assert deleted.status_code == 204
    refused = client.delete(f"{DOMAINS}/example.com/dkim/{rsa_selector}", headers=auth)
    assert refused.status_code == 409


@BOTH
def test_a_domain_made_with_ed25519_on_has_both_keys_to_publish(client, auth, config, dns_zone):
    on = create_app(replace(config, dkim_ed25519=True)).test_client()
    body = on.post(DOMAINS, json={"domain": "example.com"}, headers=auth).get_json()
    assert sorted(k["algorithm"] for k in body["dkim"]) == ["ed25519-sha256", "rsa-sha256"]
    dkim_records = [r for r in body["records"] if r["purpose"] == "dkim"]
    assert sorted(r["value"].split(";")[1].strip() for r in dkim_records) == ["k=ed25519", "k=rsa"]
    # Only the Ed25519 record published: not verified, the RSA signature is what counts.
    ed_record = next(r for r in dkim_records if "k=ed25519" in r["value"])
    dns_zone.publish([ed_record])
    body = on.post(f"{DOMAINS}/example.com/verify", headers=auth).get_json()
    assert body["status"] == "pending"
