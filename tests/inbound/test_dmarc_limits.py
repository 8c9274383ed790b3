"""What one DMARC report may cost a real ``layang inbound``: it is read in the parsing children
under their CPU and memory limits, streamed, and stopped at the limits on inflated bytes and
XML elements; the sender gets its answer within seconds and the server stays small."""

from __future__ import annotations

import gzip
import os
import smtplib
import threading
import time
from email.message import EmailMessage
from pathlib import Path

import pytest

from layang.inbound.dmarc_reports import MAX_ELEMENTS, MAX_XML_BYTES
from layang.inbound.parsing import PARSE_CPU_SECONDS
from layang.models import DmarcReport, InboundMessage
from tests.delivery.test_crash import free_port, process_env, start, stop, wait_until
from tests.inbound.test_dmarc import (
    MAILBOX,
    _listening,
    all_four,
    config,
    report_mail,
    selector,
    xml,
)

__all__ = ["config", "selector"]  # fixtures, used by name

MIB = 1024 * 1024


@pytest.fixture
def inbound(config, app, tmp_path):
    """A real `layang inbound` process on the test's database: (its port, its pid)."""
    port = free_port()
    env = process_env(config, LAYANG_INBOUND_BIND=f"127.0.0.1:{port}")
    process = start(["inbound"], env, tmp_path / "inbound.log")
    try:
        wait_until(lambda: _listening(port), 30, "layang inbound did not come up")
        yield port, process.pid
    finally:
        stop(process)


def element_bomb() -> bytes:
    """About 30 KB of gzip that inflates to 32 MB of ``<a/>``: 8 million elements."""
    xml = b"<?xml version='1.0'?><feedback>" + b"<a/>" * 8_000_000 + b"</feedback>"
    assert len(xml) < MAX_XML_BYTES  # within the byte limit: only the elements are too many
    return gzip.compress(xml, 9)


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def peak_rss(pid: int) -> int:
    """The process's peak resident memory in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed_delivery(port: int, data: bytes) -> float:
    started = time.monotonic()
    with smtplib.SMTP("127.0.0.1", port, local_hostname="mx.reporter.test", timeout=60) as smtp:
        smtp.sendmail("", [MAILBOX], data)  # raises unless every recipient got 250
    return time.monotonic() - started


def test_a_dmarc_element_bomb_is_answered_quickly_and_read_within_the_childs_limits(
    client, auth, selector, inbound
):
    port, pid = inbound
    bomb = report_mail(
        "x@reporter.test", "Report", element_bomb(), "r.xml.gz", "application/gzip", text="R."
    )
    assert len(bomb) < 64 * 1024
    # A report first: the parsing children are started (once per server) and then wait.
    for report in all_four(selector)[1:3]:
        assert timed_delivery(port, report) < 30
    wait_until(lambda: DmarcReport.select().count() == 2, 10, "the reports were not stored")
    before = cpu_seconds(pid)
    replies: list[float] = []
    errors: list[BaseException] = []

    def send() -> None:
        try:
            replies.append(timed_delivery(port, bomb))
        except (OSError, smtplib.SMTPException) as error:
            errors.append(error)

    senders = [threading.Thread(target=send) for _ in range(2)]
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join(timeout=120)
    assert not errors, errors
    # Each sender has its answer within seconds (a child may be starting for it).
    assert len(replies) == 2 and max(replies) < 10, replies

    # Both kept for inspection, saying why; neither read in part.
    wait_until(lambda: InboundMessage.select().count() == 2, 10, "the bombs were not kept")
    reasons = {m.reason for m in InboundMessage.select()}
    assert reasons == {f"DMARC: the XML holds more than {MAX_ELEMENTS} elements"}
    assert DmarcReport.select().count() == 2

    # The server itself parsed nothing; its children stayed within their bounds.
    assert cpu_seconds(pid) - before < 2
    assert peak_rss(pid) < 200 * MIB
    parsers = children(pid)
    assert parsers
    for child in parsers:
        assert cpu_seconds(child) < PARSE_CPU_SECONDS
        assert peak_rss(child) < 160 * MIB

    # And reports are read as before.
    assert timed_delivery(port, all_four(selector)[3]) < 10
    wait_until(lambda: DmarcReport.select().count() == 3, 10, "the report was not stored")


def _zip_of(members: int, size: int) -> bytes:
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for n in range(members):
            padded = xml("rfc7489").replace(b"</feedback>", b" " * size + b"</feedback>")
            archive.writestr(f"r{n}.xml", padded)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("attachment", "mime", "reason"),
    [
        (
            gzip.compress(b"<feedback>" + b"<a>" * 100_000 + b"</a>" * 100_000 + b"</feedback>"),
            "application/gzip",
            "the XML is nested more than 12 levels deep",
        ),
        # Five members under the limit each, past it together: the limit is the message's.
        (_zip_of(5, MAX_XML_BYTES // 4), "application/zip", "a zip member inflates past"),
    ],
    ids=["deep", "members-together"],
)
def test_every_limit_holds_for_the_whole_message(attachment, mime, reason):
    from layang.inbound.parsing import ReportReader

    data = report_mail("x@reporter.test", "Report", attachment, "report", mime, text="R.")
    reader = ReportReader(processes=1)
    try:
        found = reader.read_dmarc(data)
    finally:
        reader.close()
    assert found.reason.startswith(reason), found


def test_a_broken_attachment_beside_a_report_leaves_the_report_read():
    from layang.inbound.dmarc_reports import read_aggregate_reports

    message = EmailMessage()
    message["From"] = "dmarc@reporter.test"
    message["Subject"] = "Report"
    message.set_content("Two attachments.")
    message.add_attachment(b"\x1f\x8bnot gzip", maintype="application", subtype="gzip")
    report = gzip.compress(xml("rfc7489"))
    message.add_attachment(report, maintype="application", subtype="gzip", filename="r.xml.gz")
    found = read_aggregate_reports(message.as_bytes())
    assert [r.report_id for r in found] == ["9391651994964116463"]
