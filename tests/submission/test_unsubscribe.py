"""One-click unsubscribe (RFC 8058) in broadcast mail submitted over SMTP: each recipient's copy,
as the upstream server receives it from a worker, carries its own List-Unsubscribe and
List-Unsubscribe-Post headers in place of the sender's, once each and signed with DKIM; POSTing
its link unsubscribes, and transactional mail is relayed as it was submitted and still reaches
an unsubscribed address."""

from __future__ import annotations

import re
import smtplib
from dataclasses import replace

import pytest

from layang.models import Recipient, Suppression, Transmission
from layang.submission.server import submission_server
from tests.conftest import BACKENDS, drain
from tests.delivery.test_crash import free_port
from tests.mail import test_dkim
from tests.mail.test_dkim import signatures, verified_domain
from tests.submission.test_submission import client_context

verifier = test_dkim.verifier  # the fixture: dkimpy verifying against the test's DNS server

PUBLIC = "https://layang.example.net"
LINKS = re.compile(
    r"<https://layang\.example\.net(/u/([0-9a-z]+-[a-z2-7]+))>, "
    r"<mailto:u\+([0-9a-z]+-[a-z2-7]+)@bounces\.layang\.example\.net>"
)
HEAD = (
    "From: Shop <shop@example.com>\r\n"
    "To: ana@rcpt.test, bo@rcpt.test\r\n"
    "Subject: {subject}\r\n"
    "{stream}"
    # The sender's own, folded over two lines, and in another case.
    "List-Unsubscribe: <https://shop.example/leave?u=42>,\r\n <mailto:leave@shop.example>\r\n"
    "list-unsubscribe-post: List-Unsubscribe=One-Click\r\n"
    "MIME-Version: 1.0\r\n"
    "Content-Type: text/plain; charset=utf-8\r\n"
)
BODY = b"\r\nThis week's news.\r\n.A line with a leading dot.\r\n"


@pytest.fixture
def config(config, dns_zone):
    return replace(
        config,
        dns_resolver=dns_zone.address,
        public_url=PUBLIC,
        bounce_domain="bounces.layang.example.net",
    )


@pytest.fixture
def smtp_config(config):
    return replace(config, smtp_bind=f"127.0.0.1:{free_port()}")


@pytest.fixture
def server(app, smtp_config):
    controller = submission_server(smtp_config)
    controller.start()
    yield controller
    controller.stop()


def submit(smtp_config, api_key, subject, to, broadcast):
    stream = "X-Layang-Stream: broadcast\r\n" if broadcast else ""
    raw = HEAD.format(subject=subject, stream=stream).encode() + BODY
    host, port = smtp_config.smtp_host_port
    with smtplib.SMTP(host, port, local_hostname="client.test", timeout=10) as smtp:
        smtp.starttls(context=client_context())
        smtp.login("acme", api_key)
        smtp.sendmail("shop@example.com", to, raw)


def header_fields(data: bytes) -> list[tuple[str, str]]:
    """(name, unfolded value) of each header field, in order, as received."""
    head = re.split(rb"\r\n\r\n", data, maxsplit=1)[0].decode()
    fields = re.findall(r"^([^\s:]+):[ \t]*([^\r\n]*(?:\r\n[ \t][^\r\n]*)*)", head, re.M)
    return [(name.lower(), re.sub(r"\r\n[ \t]+", " ", value)) for name, value in fields]


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_copy_of_smtp_broadcast_mail_gets_its_own_signed_one_click_headers(
    client, auth, api_key, dns_zone, smtp_config, server, upstream, relay_to, verifier
):
    verified_domain(client, auth, dns_zone)
    submit(smtp_config, api_key, "News", ["ana@rcpt.test", "bo@rcpt.test"], broadcast=True)
    submit(smtp_config, api_key, "Receipt", ["ana@rcpt.test"], broadcast=False)
    drain(relay_to(upstream))

    copies = {(r.message["Subject"], r.rcpt_tos[0]): r.data for r in upstream.received}
    assert sorted(copies) == [
        ("News", "ana@rcpt.test"),
        ("News", "bo@rcpt.test"),
        ("Receipt", "ana@rcpt.test"),
    ]
    news = Transmission.get(Transmission.subject == "News")
    record_of = {r.address: r.id for r in news.recipients}
    paths = {}
    for address in ("ana@rcpt.test", "bo@rcpt.test"):
        data = copies["News", address]
        fields = header_fields(data)
        ours = [value for name, value in fields if name == "list-unsubscribe"]
        assert len(ours) == 1, fields
        assert [v for n, v in fields if n == "list-unsubscribe-post"] == [
            "List-Unsubscribe=One-Click"
        ]
        link = LINKS.fullmatch(ours[0])
        assert link, ours[0]
        path, token, mailto_token = link.groups()
        assert token == mailto_token and token.startswith(record_of[address] + "-")
        paths[address] = path
        assert b"shop.example" not in data and b"x-layang-stream" not in data.lower()
        assert data.endswith(BODY)
        (signature,) = signatures(data)
        assert signature[b"d"] == b"example.com"
        names = [name.strip().lower() for name in signature[b"h"].split(b":")]
        assert names.count(b"list-unsubscribe") == names.count(b"list-unsubscribe-post") == 2
        assert verifier(data)
    assert paths["ana@rcpt.test"] != paths["bo@rcpt.test"]

    # Transactional mail goes as submitted: the sender's own headers, nothing added.
    receipt = copies["Receipt", "ana@rcpt.test"]
    assert [(n, v) for n, v in header_fields(receipt) if n.startswith("list-unsubscribe")] == [
        ("list-unsubscribe", "<https://shop.example/leave?u=42>, <mailto:leave@shop.example>"),
        ("list-unsubscribe-post", "List-Unsubscribe=One-Click"),
    ]
    assert verifier(receipt)

    # As a mailbox provider unsubscribes (RFC 8058): a POST to the link, no cookie, no token.
    done = client.post(
        paths["ana@rcpt.test"],
        data="List-Unsubscribe=One-Click",
        content_type="application/x-www-form-urlencoded",
    )
    assert done.status_code == 200
    (entry,) = Suppression.select()
    assert (entry.email, entry.reason, entry.transmission_id) == (
        "ana@rcpt.test",
        "unsubscribe",
        news.id,
    )
    statuses = [e.status for e in Recipient.get_by_id(record_of["ana@rcpt.test"]).events]
    assert statuses[-1] == "Unsubscribe"

    # The next broadcast is not sent to her; a receipt still is.
    upstream.received.clear()
    submit(smtp_config, api_key, "More news", ["ana@rcpt.test", "bo@rcpt.test"], broadcast=True)
    submit(smtp_config, api_key, "Another receipt", ["ana@rcpt.test"], broadcast=False)
    drain(relay_to(upstream))
    assert sorted((r.message["Subject"], r.rcpt_tos[0]) for r in upstream.received) == [
        ("Another receipt", "ana@rcpt.test"),
        ("More news", "bo@rcpt.test"),
    ]
    more = Transmission.get(Transmission.subject == "More news")
    assert {r.address: r.status for r in more.recipients}["ana@rcpt.test"] == "Suppressed"
