"""DMARC aggregate reports (contract 17): the RFC 7489 sample and reports shaped as Google,
Microsoft and Yahoo send them (zip, gzip, plain XML), sent over SMTP to a real `layang inbound`
at dmarc@<returnPathDomain>, read into GET /v1/layang/domains/{domain}/dmarc; and the hardening:
entity expansion, external entities, zip and gzip bombs, malformed reports."""

from __future__ import annotations

import email.policy
import gzip
import io
import smtplib
import socket
import zipfile
from dataclasses import replace
from email.message import EmailMessage
from pathlib import Path

import pytest

from layang.clock import now_ms
from layang.inbound.dmarc_reports import MAX_XML_BYTES, NotAReport, read_aggregate_reports
from layang.models import VERIFIED, Account, DmarcReport, InboundMessage, SendingDomain
from tests.delivery.test_crash import free_port, process_env, start, stop, wait_until

FIXTURES = Path(__file__).parent / "dmarc"
DOMAIN = "example.com"
MAILBOX = f"dmarc@bounces.{DOMAIN}"


@pytest.fixture
def config(config):
    return replace(config, source_pools=(("transactional", ("192.0.2.10",)),))


@pytest.fixture
def selector(client, auth):
    """The DKIM selector of ``DOMAIN``, added and verified by the test's account."""
    added = client.post("/v1/layang/domains", headers=auth, json={"domain": DOMAIN})
    assert added.status_code == 201
    mark_verified(DOMAIN)
    return added.get_json()["dkim"][0]["selector"]


def mark_verified(domain, account_name=None):
    """As if DNS had answered the DKIM record of ``domain`` (the account's claim, if named)."""
    query = SendingDomain.update(status=VERIFIED, verified_at=now_ms()).where(
        SendingDomain.domain == domain
    )
    if account_name is not None:
        query = query.where(SendingDomain.account == Account.get(Account.name == account_name).id)
    query.execute()


@pytest.fixture
def inbound(config, app, tmp_path):
    """A real `layang inbound` process on the test's database."""
    port = free_port()
    env = process_env(config, LAYANG_INBOUND_BIND=f"127.0.0.1:{port}")
    process = start(["inbound"], env, tmp_path / "inbound.log")
    try:
        wait_until(lambda: _listening(port), 30, "layang inbound did not come up")
        yield port
    finally:
        stop(process)


def _listening(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def xml(name, selector=""):
    return (FIXTURES / f"{name}.xml").read_text().replace("{selector}", selector).encode()


def zipped(name, data):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(name, data)
    return buffer.getvalue()


def report_mail(sender, subject, attachment, filename, mime, text=None):
    message = EmailMessage()
    message["From"] = sender
    message["To"] = MAILBOX
    message["Subject"] = subject
    maintype, subtype = mime.split("/")
    if text is None:  # the attachment is the whole message, as Google sends it
        message.set_content(attachment, maintype=maintype, subtype=subtype, filename=filename)
    else:
        message.set_content(text)
        message.add_attachment(attachment, maintype=maintype, subtype=subtype, filename=filename)
    return message.as_bytes(policy=email.policy.SMTP)


def deliver(port, data, rcpt=MAILBOX):
    with smtplib.SMTP("127.0.0.1", port, local_hostname="mx.reporter.test", timeout=30) as smtp:
        smtp.sendmail("", [rcpt], data)


def all_four(selector):
    span = "1795478400!1795564799"
    return [
        report_mail(
            "noreply-dmarc-support@acme.com",
            "Report Domain: example.com Submitter: acme.com Report-ID: 9391651994964116463",
            xml("rfc7489"),
            "acme.com!example.com!1335571200!1335657599.xml",
            "text/xml",
            text="A DMARC aggregate report.",
        ),
        report_mail(
            "noreply-dmarc-support@google.com",
            "Report domain: example.com Submitter: google.com Report-ID: 11402466150813920315",
            zipped(f"google.com!example.com!{span}.xml", xml("google", selector)),
            f"google.com!example.com!{span}.zip",
            "application/zip",
        ),
        report_mail(
            "dmarcreport@microsoft.com",
            "Report Domain: example.com Submitter: enterprise.protection.outlook.com "
            "Report-ID: 4c1d9a3e0f6b4d0e9d5c2b7a8e1f3c6d",
            gzip.compress(xml("microsoft", selector)),
            "enterprise.protection.outlook.com!example.com!1795478400!1795564800.xml.gz",
            "application/gzip",
            text="This is a DMARC aggregate report from Microsoft Corporation.",
        ),
        report_mail(
            "dmarchelp@yahooinc.com",
            "Report Domain: example.com Submitter: Yahoo Report-ID: <1795478400.640375>",
            gzip.compress(xml("yahoo")),
            f"yahoo.com!example.com!{span}.xml.gz",
            "application/gzip",
            text="This is an aggregate report from Yahoo.",
        ),
    ]


def dmarc(client, auth, query):
    return client.get(f"/v1/layang/domains/{DOMAIN}/dmarc?{query}", headers=auth)


def test_reports_of_every_shape_sent_over_smtp_give_per_source_figures(
    client, auth, selector, inbound
):
    for data in all_four(selector):
        deliver(inbound, data)
    wait_until(lambda: DmarcReport.select().count() == 4, 10, "the reports were not kept")

    day = dmarc(client, auth, "from=2026-11-24&to=2026-11-24")
    assert day.status_code == 200
    assert day.get_json() == {
        "domain": DOMAIN,
        "from": "2026-11-24",
        "to": "2026-11-24",
        "reports": 3,
        "total": 182,
        "sources": [
            # Layang's own source address, in Google's and Microsoft's reports.
            {
                "ip": "192.0.2.10",
                "count": 132,
                "spf": "pass",
                "dkim": "pass",
                "spfAligned": True,
                "dkimAligned": True,
                "disposition": "none",
                "known": True,
            },
            # Another address, but signed with the domain's Layang key: known.
            {
                "ip": "198.51.100.23",
                "count": 40,
                "spf": "fail",
                "dkim": "pass",
                "spfAligned": False,
                "dkimAligned": True,
                "disposition": "none",
                "known": True,
            },
            {
                "ip": "203.0.113.50",
                "count": 7,
                "spf": "softfail",
                "dkim": "none",
                "spfAligned": False,
                "dkimAligned": False,
                "disposition": "none",
                "known": False,
            },
            # Yahoo: DKIM passed for another domain, not aligned: unknown.
            {
                "ip": "203.0.113.50",
                "count": 3,
                "spf": "pass",
                "dkim": "pass",
                "spfAligned": False,
                "dkimAligned": False,
                "disposition": "none",
                "known": False,
            },
        ],
    }
    sample = dmarc(client, auth, "from=2012-04-28&to=2012-04-28").get_json()
    assert (sample["reports"], sample["total"]) == (1, 2)
    assert sample["sources"] == [
        {
            "ip": "72.150.241.94",
            "count": 2,
            "spf": "pass",
            "dkim": "fail",
            "spfAligned": True,
            "dkimAligned": False,
            "disposition": "none",
            "known": False,
        }
    ]
    # A report sent twice counts once.
    deliver(inbound, all_four(selector)[1])
    again = dmarc(client, auth, "from=2026-11-24&to=2026-11-24").get_json()
    assert (again["reports"], again["total"]) == (3, 182)
    # Taken, not kept for inspection as if it were about no domain here.
    assert InboundMessage.select().count() == 0


def test_only_dmarc_at_a_return_path_domain_takes_reports(client, auth, selector, inbound):
    with pytest.raises(smtplib.SMTPRecipientsRefused):
        deliver(inbound, b"Subject: x\r\n\r\nx\r\n", rcpt=f"dmarc@{DOMAIN}")
    with pytest.raises(smtplib.SMTPRecipientsRefused):
        deliver(inbound, b"Subject: x\r\n\r\nx\r\n", rcpt="dmarc@bounces.elsewhere.test")


def _entities(depth=10):
    lol = "".join(
        f'<!ENTITY lol{n} "{f"&lol{n - 1};" * 10 if n else "lol"}">' for n in range(depth)
    )
    return (
        f'<?xml version="1.0"?><!DOCTYPE feedback [{lol}]><feedback>&lol{depth - 1};</feedback>'
    ).encode()


XXE = (
    b'<?xml version="1.0"?><!DOCTYPE feedback [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
    b"<feedback><report_metadata><org_name>&x;</org_name></report_metadata></feedback>"
)


def _bomb_zip():
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("r.xml", b"<?xml version='1.0'?><feedback>" + b" " * (MAX_XML_BYTES + 10))
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("attachment", "mime", "reason"),
    [
        (_entities(), "text/xml", "the XML is refused: DTDForbidden"),
        (XXE, "text/xml", "the XML is refused: DTDForbidden"),
        (
            gzip.compress(b"<?xml version='1.0'?><feedback>" + b" " * (MAX_XML_BYTES + 10)),
            "application/gzip",
            f"the gzip data inflates past {MAX_XML_BYTES} bytes",
        ),
        (_bomb_zip(), "application/zip", f"a zip member inflates past {MAX_XML_BYTES} bytes"),
        (b"<?xml version='1.0'?><feedback><report_metadata>", "text/xml", "the XML is malformed"),
        (
            b"<?xml version='1.0'?><html></html>",
            "text/xml",
            "the XML is not a DMARC report (its root is 'html')",
        ),
        (b"\x1f\x8bnot really gzip", "application/gzip", "the gzip data is corrupt"),
        (b"PK\x03\x04broken", "application/zip", "the zip archive is corrupt"),
    ],
)
def test_hostile_or_broken_reports_are_refused_and_kept_for_inspection(
    attachment, mime, reason, client, auth, selector, inbound
):
    data = report_mail("x@reporter.test", "Report", attachment, "report", mime, text="Report.")
    found = read_aggregate_reports(data)
    assert isinstance(found, NotAReport) and found.reason.startswith(reason), found
    deliver(inbound, data)  # answered 250, never a crash
    wait_until(lambda: InboundMessage.select().count() == 1, 10, "the mail was not kept")
    kept = InboundMessage.get()
    assert kept.reason.startswith(f"DMARC: {reason}")
    assert DmarcReport.select().count() == 0


def test_a_report_about_a_domain_not_sent_from_here_is_kept_not_counted(
    client, auth, selector, inbound
):
    other = xml("rfc7489").replace(b"<domain>example.com</domain>", b"<domain>other.test</domain>")
    deliver(inbound, report_mail("a@acme.com", "Report", other, "r.xml", "text/xml", text="R."))
    wait_until(lambda: InboundMessage.select().count() == 1, 10, "the mail was not kept")
    assert InboundMessage.get().reason == (
        "DMARC: a report about no verified sending domain reporting here"
    )


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("from=yesterday", "from"),
        ("to=2026-13-01", "to"),
        ("from=2026-11-25&to=2026-11-01", "from"),
    ],
)
def test_bad_dates_are_a_400_naming_the_field(client, auth, selector, query, field):
    answer = dmarc(client, auth, query)
    assert answer.status_code == 400
    assert field in answer.get_json()["errors"]


def test_an_unknown_domain_is_a_404(client, auth):
    assert client.get("/v1/layang/domains/nowhere.test/dmarc", headers=auth).status_code == 404


@pytest.mark.parametrize(
    "query",
    [
        "from=2026-11-24T00:00:00Z&to=2026-11-24T23:59:59Z",
        "from=2026-11-24T08:30:00.250%2B00:00&to=2026-11-25T01:00:00%2B02:00",
        "from=2026-11-23T20:00:00-05:00&to=2026-11-24T12:00:00",
        "from=2026-11-24&to=2026-11-24T00:00:00Z",
    ],
)
def test_from_and_to_take_date_times_as_their_utc_day(client, auth, selector, inbound, query):
    for data in all_four(selector):
        deliver(inbound, data)
    wait_until(lambda: DmarcReport.select().count() == 4, 10, "the reports were not kept")
    by_day = dmarc(client, auth, "from=2026-11-24&to=2026-11-24").get_json()
    answer = dmarc(client, auth, query)
    assert answer.status_code == 200, answer.get_json()
    assert answer.get_json() == by_day
    assert (by_day["from"], by_day["to"], by_day["reports"]) == ("2026-11-24", "2026-11-24", 3)


@pytest.mark.parametrize(
    "value", ["2026-11-24T25:00:00Z", "2026-11-24Tnoon", "2026-11-2\u0664", "2026-11-24T00:00:00Q"]
)
def test_a_bad_date_time_is_a_400(client, auth, selector, value):
    answer = dmarc(client, auth, f"from={value}")
    assert answer.status_code == 400
    assert "from" in answer.get_json()["errors"]
