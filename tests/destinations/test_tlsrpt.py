"""TLS-RPT (RFC 8460): sessions counted per day, and the next day's report sent by mail through
Layang's own outbox and worker (captured as .eml) or POSTed over HTTPS; the JSON validated
against the RFC's report schema and its counts checked against the sessions recorded."""

from __future__ import annotations

import email
import email.policy
import gzip
import json
import re
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import jsonschema
import pytest

from layang.config import Config
from layang.delivery.worker import Worker
from layang.destinations import tlsrpt
from layang.destinations.mta_sts import StsPolicy
from layang.destinations.policy import TransportPolicy
from layang.models import Recipient, TlsReport, Transmission
from tests.conftest import BACKENDS, drain
from tests.support.dns_server import Zone
from tests.support.policy_server import PolicyServer
from tests.support.tls_pki import LocalCA

SCHEMA = json.loads((Path(__file__).parent / "tlsrpt_report.schema.json").read_text())
DOMAIN = "bank.test"
POLICY_TEXT = (
    "version: STSv1\nmode: enforce\nmx: mx1.bank.test\nmx: mx2.bank.test\nmax_age: 86400\n"
)
STS = TransportPolicy(
    DOMAIN,
    kind="mta-sts",
    mode="enforce",
    sts=StsPolicy("20261124", "enforce", ("mx1.bank.test", "mx2.bank.test"), 86400, POLICY_TEXT),
)
NONE = TransportPolicy("plain.test")
ON_THE_DAY = int(datetime(2026, 11, 24, 10, 0, tzinfo=UTC).timestamp() * 1000)
NEXT_MORNING = datetime(2026, 11, 25, 1, 0, tzinfo=UTC)


@pytest.fixture
def config(config: Config, dns_zone: Zone) -> Config:
    return replace(config, dns_resolver=dns_zone.address)


@pytest.fixture
def reporting(app, config: Config) -> Config:
    return replace(config, tlsrpt_from="tlsrpt@layang.test")


def record_the_day() -> None:
    for _ in range(3):
        tlsrpt.record_session(DOMAIN, STS, "mx1.bank.test", True, at_ms=ON_THE_DAY)
    for _ in range(2):
        tlsrpt.record_session(
            DOMAIN,
            STS,
            "MX2.bank.test.",
            False,
            "certificate-host-mismatch",
            "the certificate of mx2.bank.test is not valid for that name",
            at_ms=ON_THE_DAY,
        )
    tlsrpt.record_session("plain.test", NONE, "mx.plain.test", True, at_ms=ON_THE_DAY)


def captured(config: Config) -> list[email.message.EmailMessage]:
    outbox = Path(config.relay_url.partition(":")[2])
    return [
        email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
        for path in sorted(outbox.glob("*.eml"))
    ]


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_next_days_report_is_mailed_and_validates(reporting: Config, dns_zone: Zone) -> None:
    dns_zone.add_txt(f"_smtp._tls.{DOMAIN}", "v=TLSRPTv1; rua=mailto:tls%2Dreports@bank.test")
    record_the_day()
    assert tlsrpt.due_reports(reporting, now=datetime(2026, 11, 24, 23, 0, tzinfo=UTC)) == []

    outcomes = tlsrpt.due_reports(reporting, now=NEXT_MORNING)
    assert [(o.domain, o.status) for o in outcomes] == [
        ("bank.test", "sent"),
        ("plain.test", "no-rua"),
    ]
    assert tlsrpt.due_reports(reporting, now=NEXT_MORNING) == []  # once a day, once
    transmission = Transmission.get()
    assert transmission.account.name == tlsrpt.INTERNAL_ACCOUNT
    drain(Worker(reporting, name="test-worker"))
    assert Recipient.get().status == "Delivery"

    (message,) = captured(reporting)
    assert message["To"] == "tls-reports@bank.test"
    assert message["From"] == "tlsrpt@layang.test"
    assert message["TLS-Report-Domain"] == "bank.test"
    assert message["TLS-Report-Submitter"] == "layang.test"
    assert message.get_content_type() == "multipart/report"
    assert message.get_param("report-type") == "tlsrpt"
    assert re.match(
        r"Report Domain: bank\.test Submitter: layang\.test Report-ID: <.+>$", message["Subject"]
    )
    (part,) = [p for p in message.iter_attachments() if p.get_content_type() != "text/plain"]
    assert part.get_content_type() == "application/tlsrpt+gzip"
    begin = int(datetime(2026, 11, 24, tzinfo=UTC).timestamp())
    assert re.fullmatch(
        rf"layang\.test!bank\.test!{begin}!{begin + 86399}![0-9a-f]+\.json\.gz",
        part.get_filename(),
    )
    report = json.loads(gzip.decompress(part.get_content()))
    jsonschema.validate(report, SCHEMA, format_checker=jsonschema.FormatChecker())
    assert report["date-range"] == {
        "start-datetime": "2026-11-24T00:00:00Z",
        "end-datetime": "2026-11-24T23:59:59Z",
    }
    assert report["organization-name"] == "layang.test"
    (policy,) = report["policies"]
    assert policy["policy"] == {
        "policy-type": "sts",
        "policy-domain": "bank.test",
        "policy-string": [line for line in POLICY_TEXT.splitlines()],
        "mx-host": ["mx1.bank.test", "mx2.bank.test"],
    }
    assert policy["summary"] == {
        "total-successful-session-count": 3,
        "total-failure-session-count": 2,
    }
    assert policy["failure-details"] == [
        {
            "result-type": "certificate-host-mismatch",
            "receiving-mx-hostname": "mx2.bank.test",
            "failed-session-count": 2,
            "additional-information": "the certificate of mx2.bank.test is not valid for that name",
        }
    ]
    assert {r.policy_domain: r.status for r in TlsReport.select()} == {
        "bank.test": "sent",
        "plain.test": "no-rua",
    }


def test_a_report_is_posted_to_an_https_rua(reporting: Config, dns_zone: Zone, tmp_path) -> None:
    ca = LocalCA(tmp_path / "ca")
    server = PolicyServer(ca.server_context("reports.bank.test"))
    try:
        dns_zone.add_address("reports.bank.test", server.address)
        dns_zone.add_txt(f"_smtp._tls.{DOMAIN}", "v=TLSRPTv1;rua=https://reports.bank.test/tlsrpt")
        record_the_day()
        configured = replace(reporting, tls_cafile=str(ca.cafile))
        outcomes = tlsrpt.send_reports(configured, "2026-11-24")
        assert outcomes[0].status == "sent", outcomes
        ((path, content_type, body),) = server.posted
        assert (path, content_type) == ("/tlsrpt", "application/tlsrpt+gzip")
        assert server.hosts == []  # no GET
        report = json.loads(gzip.decompress(body))
        jsonschema.validate(report, SCHEMA)
        assert report["policies"][0]["summary"]["total-failure-session-count"] == 2
    finally:
        server.stop()


def test_an_untrusted_https_rua_is_a_failed_report(reporting: Config, dns_zone: Zone, tmp_path):
    ca = LocalCA(tmp_path / "ca")
    server = PolicyServer(ca.server_context("reports.bank.test"))
    try:
        dns_zone.add_address("reports.bank.test", server.address)
        dns_zone.add_txt(f"_smtp._tls.{DOMAIN}", "v=TLSRPTv1; rua=https://reports.bank.test/r")
        record_the_day()
        (outcome, _) = tlsrpt.send_reports(reporting, "2026-11-24")  # the CA is not trusted
        assert outcome.status == "failed" and "certificate" in outcome.detail.lower()
        assert server.posted == []
    finally:
        server.stop()


def test_reports_can_be_turned_off(reporting: Config, dns_zone: Zone) -> None:
    dns_zone.add_txt(f"_smtp._tls.{DOMAIN}", "v=TLSRPTv1; rua=mailto:r@bank.test")
    record_the_day()
    assert tlsrpt.due_reports(replace(reporting, tlsrpt=False), now=NEXT_MORNING) == []
    assert Transmission.select().count() == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_sessions_are_counted_per_day_and_outcome(reporting: Config) -> None:
    record_the_day()
    counts = tlsrpt.session_counts("2026-11-24", DOMAIN)
    assert [(c.mx_host, c.result_type, c.sessions) for _, c in counts] == [
        ("mx1.bank.test", "", 3),
        ("mx2.bank.test", "certificate-host-mismatch", 2),
    ]
    assert tlsrpt.session_counts("2026-11-25") == []


def test_a_report_from_a_verified_domain_is_dkim_signed(
    reporting: Config, dns_zone: Zone, client, auth, account
) -> None:
    from tests.mail.test_dkim import verified_domain

    verified_domain(client, auth, dns_zone, "example.com")
    dns_zone.add_txt(f"_smtp._tls.{DOMAIN}", "v=TLSRPTv1; rua=mailto:r@bank.test")
    record_the_day()
    configured = replace(reporting, tlsrpt_from="tls-reports@example.com")
    assert tlsrpt.send_reports(configured, "2026-11-24")[0].status == "sent"
    assert Transmission.get().account_id == account.id
    drain(Worker(configured, name="test-worker"))
    (message,) = captured(configured)
    assert "d=example.com" in message["DKIM-Signature"].replace(" ", "")


def test_the_command_sends_a_days_reports(reporting: Config, dns_zone: Zone) -> None:
    from click.testing import CliRunner

    from layang.cli.commands import main

    dns_zone.add_txt(f"_smtp._tls.{DOMAIN}", "v=TLSRPTv1; rua=mailto:r@bank.test")
    record_the_day()
    env = {
        "LAYANG_DATA_DIR": str(reporting.data_dir),
        "LAYANG_DATABASE_URL": reporting.database_url,
        "LAYANG_DNS_RESOLVER": dns_zone.address,
    }
    runner = CliRunner()
    bad = runner.invoke(main, ["tlsrpt", "send", "--day", "24/11/2026"], env=env)
    assert bad.exit_code == 2 and "--day: not a day as YYYY-MM-DD" in bad.output
    off = runner.invoke(main, ["tlsrpt", "send"], env=env | {"LAYANG_TLSRPT": "false"})
    assert off.exit_code == 2 and "LAYANG_TLSRPT is false" in off.output
    result = runner.invoke(main, ["tlsrpt", "send", "--day", "2026-11-24"], env=env)
    assert result.exit_code == 0, result.output
    sent = json.loads(result.stdout)
    assert sent["day"] == "2026-11-24"
    assert [(r["domain"], r["status"]) for r in sent["reports"]] == [
        ("bank.test", "sent"),
        ("plain.test", "no-rua"),
    ]
    again = json.loads(
        runner.invoke(main, ["tlsrpt", "send", "--day", "2026-11-24"], env=env).stdout
    )
    assert {r["status"] for r in again["reports"]} == {"taken"}


# -- what a rua list may ask for -------------------------------------------------------------


def report_recipients() -> list[str]:
    return sorted(r.address for r in Recipient.select())


def test_at_most_five_rua_addresses_get_a_report(reporting: Config, dns_zone: Zone) -> None:
    listed = ",".join(f"mailto:r{n}@third-party{n}.test" for n in range(42))
    again = "mailto:r0@third-party0.test"  # the same address twice gets one report
    dns_zone.add_txt(f"_smtp._tls.{DOMAIN}", f"v=TLSRPTv1; rua={again},{listed}")
    record_the_day()
    (outcome, _) = tlsrpt.send_reports(reporting, "2026-11-24")
    assert outcome.status == "sent"
    assert tlsrpt.MAX_RUA == 5
    assert report_recipients() == [f"r{n}@third-party{n}.test" for n in range(5)]
    assert Transmission.select().count() == 5
    assert TlsReport.get(TlsReport.policy_domain == DOMAIN).rua.count("mailto:") == 5


@pytest.mark.parametrize(
    "invalid",
    [
        "mailto:a@bank.test%0D%0ARCPT%20TO:<victim@else.test>",
        "mailto:a@bank.test\r\nRCPT TO:<victim@else.test>",  # raw, as TXT data may hold it
        "mailto:a%0A@bank.test",
        "mailto:two@bank.test%2Cvictim@else.test",
        "mailto:a b@bank.test",
        "mailto:no-at-sign",
        "mailto:a@-bad-.test",
        "mailto:a@bank.test%00",
        "ftp://bank.test/reports",
    ],
)
def test_invalid_rua_addresses_are_dropped_not_queued(
    reporting: Config, dns_zone: Zone, invalid: str
) -> None:
    dns_zone.add_txt(f"_smtp._tls.{DOMAIN}", f"v=TLSRPTv1; rua={invalid},mailto:Reports@Bank.Test")
    record_the_day()
    (outcome, _) = tlsrpt.send_reports(reporting, "2026-11-24")
    assert outcome.status == "sent", outcome
    assert report_recipients() == ["Reports@bank.test"]
    assert "\r" not in outcome.detail and "\n" not in outcome.detail
    assert "victim" not in TlsReport.get(TlsReport.policy_domain == DOMAIN).rua


def test_a_domain_whose_every_rua_is_invalid_gets_no_report(
    reporting: Config, dns_zone: Zone
) -> None:
    dns_zone.add_txt(f"_smtp._tls.{DOMAIN}", "v=TLSRPTv1; rua=mailto:a@bank.test%0D%0AX")
    record_the_day()
    (outcome, _) = tlsrpt.send_reports(reporting, "2026-11-24")
    assert outcome.status == "failed"
    assert "not one email address" in outcome.detail
    assert Transmission.select().count() == 0
