"""Reading DMARC aggregate reports (RFC 7489 section 7.2, appendix C) out of inbound mail.

A report arrives as an attachment (or the body) holding XML, gzip'd XML or a zip of XML files,
from anyone: every step is bounded. The compressed data is what the inbound server accepted
(``MAX_MESSAGE_BYTES``); each decompressed XML document stops at ``MAX_XML_BYTES`` (a zip or
gzip bomb is refused after that many bytes, whatever its headers claim); a zip's members are
looked at up to ``MAX_ZIP_MEMBERS``; the XML is parsed by defusedxml with DTDs, entities and
external references forbidden; a report keeps at most ``MAX_ROWS`` rows. The kind of an
attachment is told by its first bytes, not its declared type, which reporters get wrong.

Nothing here raises on any input: a message without a readable report is ``NotAReport``.
"""

from __future__ import annotations

import email
import email.message
import email.policy
import io
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from xml.etree.ElementTree import Element

import defusedxml.ElementTree as SafeTree
from defusedxml import DefusedXmlException

from layang.domain.dmarc import AggregateReport, ReportRow

MAX_XML_BYTES = 32 * 1024 * 1024
MAX_ZIP_MEMBERS = 5
MAX_PARTS = 50
MAX_ROWS = 100_000
_GZIP = b"\x1f\x8b"
_ZIP = b"PK\x03\x04"


@dataclass(frozen=True, slots=True)
class NotAReport:
    """Why no report could be read."""

    reason: str


class _Refused(Exception):
    """An attachment that may not be read further (too large, malformed)."""


def read_aggregate_reports(data: bytes) -> list[AggregateReport] | NotAReport:
    """Every aggregate report in ``data`` (a whole message as received). Never raises."""
    try:
        message = email.message_from_bytes(data, policy=email.policy.compat32)
    except Exception as error:  # malformed mail of any kind is only not a report
        return NotAReport(f"could not be parsed: {type(error).__name__}")
    reports: list[AggregateReport] = []
    problems: list[str] = []
    for payload in _payloads(message):
        try:
            for document in _documents(payload):
                reports.append(parse_report(document))
        except _Refused as error:
            problems.append(str(error))
    if reports:
        return reports
    return NotAReport(problems[0] if problems else "no DMARC aggregate report attached")


def _payloads(message: email.message.Message) -> Iterator[bytes]:
    for count, part in enumerate(message.walk()):
        if count >= MAX_PARTS:
            return
        if part.is_multipart():
            continue
        payload = _decoded(part)
        if payload is not None and _kind(payload) is not None:
            yield payload


def _decoded(part: email.message.Message) -> bytes | None:
    try:
        payload = part.get_payload(decode=True)
    except Exception:  # a broken transfer encoding: not a part to read
        return None
    return payload if isinstance(payload, bytes) else None


def _kind(payload: bytes) -> str | None:
    if payload.startswith(_GZIP):
        return "gzip"
    if payload.startswith(_ZIP):
        return "zip"
    start = payload[:512].lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if start.startswith((b"<?xml", b"<feedback")):
        return "xml"
    return None


def _documents(payload: bytes) -> Iterator[bytes]:
    kind = _kind(payload)
    if kind == "gzip":
        yield _gunzip(payload)
    elif kind == "zip":
        yield from _unzip(payload)
    else:
        if len(payload) > MAX_XML_BYTES:
            raise _Refused(f"the XML is larger than {MAX_XML_BYTES} bytes")
        yield payload


def _gunzip(payload: bytes) -> bytes:
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        data = inflater.decompress(payload, MAX_XML_BYTES + 1)
    except zlib.error as error:
        raise _Refused(f"the gzip data is corrupt: {error}") from None
    if len(data) > MAX_XML_BYTES or inflater.unconsumed_tail:
        raise _Refused(f"the gzip data inflates past {MAX_XML_BYTES} bytes")
    return data


def _unzip(payload: bytes) -> Iterator[bytes]:
    try:
        archive = zipfile.ZipFile(io.BytesIO(payload))
        members = [m for m in archive.infolist() if not m.is_dir()][:MAX_ZIP_MEMBERS]
    except (zipfile.BadZipFile, ValueError, OSError) as error:
        raise _Refused(f"the zip archive is corrupt: {error}") from None
    for member in members:
        try:
            # Read at most one byte past the limit, whatever the member's header claims.
            with archive.open(member) as stream:
                data = stream.read(MAX_XML_BYTES + 1)
        except (zipfile.BadZipFile, RuntimeError, NotImplementedError, OSError, zlib.error) as e:
            raise _Refused(f"a zip member cannot be read: {e}") from None
        if len(data) > MAX_XML_BYTES:
            raise _Refused(f"a zip member inflates past {MAX_XML_BYTES} bytes")
        if _kind(data) == "xml":
            yield data


# -- the XML -----------------------------------------------------------------------------------


def _local(tag: str) -> str:
    # DMARC reports come with and without a namespace (the 2.0 drafts add one).
    return tag.rpartition("}")[2]


def _child(element: Element | None, name: str) -> Element | None:
    if element is None:
        return None
    return next((c for c in element if _local(c.tag) == name), None)


def _children(element: Element | None, name: str) -> list[Element]:
    return [] if element is None else [c for c in element if _local(c.tag) == name]


def _text(element: Element | None, *path: str) -> str:
    for name in path:
        element = _child(element, name)
    return (element.text or "").strip() if element is not None else ""


def _epoch_ms(value: str, name: str) -> int:
    try:
        return int(value) * 1000
    except ValueError:
        raise _Refused(f"{name} is not a Unix time: {value[:40]!r}") from None


def parse_report(document: bytes) -> AggregateReport:
    """One aggregate report from its XML. Raises ``_Refused`` for XML that is unsafe (a DTD,
    entities), malformed, or not a DMARC aggregate report."""
    try:
        root = SafeTree.fromstring(
            document, forbid_dtd=True, forbid_entities=True, forbid_external=True
        )
    except DefusedXmlException as error:
        raise _Refused(f"the XML is refused: {type(error).__name__}") from None
    except SafeTree.ParseError as error:
        raise _Refused(f"the XML is malformed: {error}") from None
    if _local(root.tag) != "feedback":
        raise _Refused(f"the XML is not a DMARC report (its root is {_local(root.tag)!r})")
    metadata = _child(root, "report_metadata")
    policy = _child(root, "policy_published")
    domain = _text(policy, "domain").lower().rstrip(".")
    org_name = _text(metadata, "org_name")
    report_id = _text(metadata, "report_id")
    if not (domain and org_name and report_id):
        raise _Refused("the report lacks its domain, org_name or report_id")
    begins = _epoch_ms(_text(metadata, "date_range", "begin"), "date_range/begin")
    ends = _epoch_ms(_text(metadata, "date_range", "end"), "date_range/end")
    rows = [_row(record) for record in _children(root, "record")[:MAX_ROWS]]
    return AggregateReport(
        org_name=org_name[:200],
        report_id=report_id[:255],
        domain=domain[:253],
        begins_at=begins,
        ends_at=ends,
        rows=tuple(row for row in rows if row is not None),
    )


def _row(record: Element) -> ReportRow | None:
    row = _child(record, "row")
    evaluated = _child(row, "policy_evaluated")
    results = _child(record, "auth_results")
    source_ip = _text(row, "source_ip")
    try:
        count = int(_text(row, "count") or "0")
    except ValueError:
        return None
    if not source_ip or count <= 0:
        return None
    dkim_results = _children(results, "dkim")
    spf_results = _children(results, "spf")
    passed = tuple(
        f"{_text(d, 'domain').lower()}:{_text(d, 'selector').lower()}"
        for d in dkim_results
        if _text(d, "result").lower() == "pass"
    )
    dkim = (
        "pass" if passed else (_text(dkim_results[0], "result").lower() if dkim_results else "none")
    )
    spf = _text(spf_results[0], "result").lower() if spf_results else "none"
    return ReportRow(
        source_ip=source_ip[:45],
        count=count,
        disposition=(_text(evaluated, "disposition").lower() or "none")[:16],
        dkim=dkim[:16] or "none",
        spf=spf[:16] or "none",
        dkim_aligned=_text(evaluated, "dkim").lower() == "pass",
        spf_aligned=_text(evaluated, "spf").lower() == "pass",
        header_from=_text(_child(record, "identifiers"), "header_from").lower()[:253],
        dkim_passed=passed,
    )
