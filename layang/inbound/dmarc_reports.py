"""Reading DMARC aggregate reports (RFC 7489 section 7.2, appendix C) out of inbound mail.

A report arrives as an attachment (or the body) holding XML, gzip'd XML or a zip of XML files,
from anyone, so every step is bounded, and the whole read runs in the inbound server's parsing
children under their CPU-time and memory limits (``layang.inbound.parsing``). The compressed
data is what the inbound server accepted (``MAX_MESSAGE_BYTES``); its MIME shape is measured
before it is parsed (``layang.inbound.reports.mime_shape_problem``). The XML is never held
whole: it is inflated in pieces of ``CHUNK_BYTES`` and fed to defusedxml's incremental parser
(DTDs, entities and external references forbidden), which builds one ``<record>`` at a time.
One message may inflate to at most ``MAX_XML_BYTES`` in all (a zip or gzip bomb is refused
after that many bytes, whatever its headers claim), hold at most ``MAX_ELEMENTS`` XML elements
nested at most ``MAX_XML_DEPTH`` deep, and a zip's members are looked at up to
``MAX_ZIP_MEMBERS``; a field's text is read up to ``MAX_TEXT`` characters. Past any of these
the message is not a report (kept for inspection), never a partial one.

Rows that say the same thing (source address, disposition, authentication results, header
From, passing signatures) are one row with their counts summed; a report keeps at most
``MAX_ROWS`` such rows, and the rest are summed into rows with the source ``*`` ("other
sources", by their results), so the totals stay whole (docs/api.md, "DMARC reports").

The kind of an attachment is told by its first bytes, not its declared type, which reporters
get wrong. Nothing here raises on any input: a message without a readable report is
``NotAReport``.
"""

from __future__ import annotations

import email
import email.message
import email.policy
import io
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from xml.etree.ElementTree import Element, TreeBuilder

import defusedxml.ElementTree as SafeTree
from defusedxml import DefusedXmlException

from layang.domain.dmarc import OTHER_SOURCES, AggregateReport, ReportRow
from layang.inbound.report_parts import MAX_PARTS
from layang.inbound.reports import mime_shape_problem

MAX_XML_BYTES = 32 * 1024 * 1024
"""Bytes of XML one message may inflate to, over all its attachments."""
MAX_ELEMENTS = 400_000
"""XML elements one message may hold: about 20,000 records of a typical report."""
MAX_XML_DEPTH = 12
"""Levels of XML nesting (a report has six)."""
MAX_TEXT = 1024
"""Characters of one element's text that are read (a report's fields are short)."""
MAX_ZIP_MEMBERS = 5
MAX_ROWS = 10_000
"""Distinct rows one report keeps; the rest are summed per result as ``OTHER_SOURCES``."""
CHUNK_BYTES = 64 * 1024
MAX_COUNT = 2**31 - 1
"""The largest count a row keeps (a database integer)."""
_GZIP = b"\x1f\x8b"
_ZIP = b"PK\x03\x04"


@dataclass(frozen=True, slots=True)
class NotAReport:
    """Why no report could be read."""

    reason: str


class _Refused(Exception):
    """An attachment that may not be read further (too large, malformed)."""


class _Budget:
    """What one message may still spend: inflated bytes and XML elements."""

    def __init__(self) -> None:
        self.inflated = 0
        self.elements = 0

    def inflate(self, size: int, what: str) -> None:
        self.inflated += size
        if self.inflated > MAX_XML_BYTES:
            raise _Refused(f"{what} inflates past {MAX_XML_BYTES} bytes")

    def element(self) -> None:
        self.elements += 1
        if self.elements > MAX_ELEMENTS:
            raise _Refused(f"the XML holds more than {MAX_ELEMENTS} elements")


def read_aggregate_reports(data: bytes) -> list[AggregateReport] | NotAReport:
    """Every aggregate report in ``data`` (a whole message as received). Never raises."""
    problem = mime_shape_problem(data)
    if problem is not None:
        return NotAReport(problem)
    try:
        message = email.message_from_bytes(data, policy=email.policy.compat32)
    except Exception as error:  # malformed mail of any kind is only not a report
        return NotAReport(f"could not be parsed: {type(error).__name__}")
    budget = _Budget()
    reports: list[AggregateReport] = []
    problems: list[str] = []
    try:
        for payload in _payloads(message):
            try:
                for document in _documents(payload, budget):
                    reports.append(_parse(document, budget))
            except _Refused as error:
                problems.append(str(error))
    except Exception as error:  # odd MIME the parser still trips on
        return NotAReport(f"could not be parsed: {type(error).__name__}")
    if problems:
        # Past a limit the message is not read in part: half a report would mislead.
        return NotAReport(problems[0])
    if reports:
        return reports
    return NotAReport("no DMARC aggregate report attached")


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


def _documents(payload: bytes, budget: _Budget) -> Iterator[Iterator[bytes]]:
    """Each XML document in ``payload``, as the pieces it inflates to."""
    kind = _kind(payload)
    if kind == "gzip":
        yield _gunzip(payload, budget)
    elif kind == "zip":
        yield from _unzip(payload, budget)
    else:
        yield _pieces(payload, budget)


def _pieces(payload: bytes, budget: _Budget) -> Iterator[bytes]:
    for start in range(0, len(payload), CHUNK_BYTES):
        piece = payload[start : start + CHUNK_BYTES]
        budget.inflate(len(piece), "the XML")
        yield piece


def _gunzip(payload: bytes, budget: _Budget) -> Iterator[bytes]:
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    pending = payload
    while pending and not inflater.eof:
        try:
            piece = inflater.decompress(pending, CHUNK_BYTES)
        except zlib.error as error:
            raise _Refused(f"the gzip data is corrupt: {error}") from None
        pending = inflater.unconsumed_tail
        budget.inflate(len(piece), "the gzip data")
        yield piece
    if not inflater.eof:
        raise _Refused("the gzip data is corrupt: it ends early")


def _unzip(payload: bytes, budget: _Budget) -> Iterator[Iterator[bytes]]:
    try:
        archive = zipfile.ZipFile(io.BytesIO(payload))
        members = [m for m in archive.infolist() if not m.is_dir()][:MAX_ZIP_MEMBERS]
    except (zipfile.BadZipFile, ValueError, OSError) as error:
        raise _Refused(f"the zip archive is corrupt: {error}") from None
    for member in members:
        # Read in pieces, counted as they come, whatever the member's header claims.
        stream = _member(archive, member, budget)
        first = next(stream, b"")
        if _kind(first) == "xml":
            yield _chained(first, stream)


def _member(archive: zipfile.ZipFile, member: zipfile.ZipInfo, budget: _Budget) -> Iterator[bytes]:
    try:
        with archive.open(member) as stream:
            while piece := stream.read(CHUNK_BYTES):
                budget.inflate(len(piece), "a zip member")
                yield piece
    except (zipfile.BadZipFile, RuntimeError, NotImplementedError, OSError, zlib.error) as e:
        raise _Refused(f"a zip member cannot be read: {e}") from None


def _chained(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    yield first
    yield from rest


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


class _ReportBuilder:
    """The parser's target: builds each child of ``<feedback>`` (the metadata, the published
    policy, one record) as a small tree, reads it and lets it go, so that memory stays that of
    one record whatever the report's length."""

    def __init__(self, budget: _Budget) -> None:
        self.budget = budget
        self.depth = 0
        self.root = ""
        self.builder: TreeBuilder | None = None
        self.text = 0
        self.metadata: Element | None = None
        self.policy: Element | None = None
        self.rows: dict[ReportRow, int] = {}
        self.other: dict[ReportRow, int] = {}

    def start(self, tag: str, attrs: dict[str, str]) -> None:
        self.budget.element()
        self.depth += 1
        if self.depth > MAX_XML_DEPTH:
            raise _Refused(f"the XML is nested more than {MAX_XML_DEPTH} levels deep")
        if self.depth == 1:
            self.root = _local(tag)
            if self.root != "feedback":
                raise _Refused(f"the XML is not a DMARC report (its root is {self.root!r})")
            return
        if self.depth == 2:
            self.builder = TreeBuilder()
        if self.builder is not None:
            self.builder.start(tag, {})
            self.text = 0

    def data(self, text: str) -> None:
        if self.builder is not None and self.text < MAX_TEXT:
            text = text[: MAX_TEXT - self.text]
            self.text += len(text)
            self.builder.data(text)

    def end(self, tag: str) -> None:
        self.depth -= 1
        if self.builder is None:
            return
        self.builder.end(tag)
        self.text = MAX_TEXT  # text after a child element is not a field's
        if self.depth == 1:
            element = self.builder.close()
            self.builder = None
            self._read(element)

    def close(self) -> None:
        return None

    def _read(self, element: Element) -> None:
        name = _local(element.tag)
        if name == "report_metadata" and self.metadata is None:
            self.metadata = element
        elif name == "policy_published" and self.policy is None:
            self.policy = element
        elif name == "record":
            row = _row(element)
            if row is None:
                return
            key = replace(row, count=0)
            if key in self.rows or len(self.rows) < MAX_ROWS:
                self.rows[key] = min(self.rows.get(key, 0) + row.count, MAX_COUNT)
            elif len(self.other) < MAX_ROWS:
                # Past the cap, sources are summed by their results alone.
                other = replace(key, source_ip=OTHER_SOURCES, header_from="", dkim_passed=())
                self.other[other] = min(self.other.get(other, 0) + row.count, MAX_COUNT)


def _parse(pieces: Iterator[bytes], budget: _Budget) -> AggregateReport:
    """One aggregate report from its XML's pieces. Raises ``_Refused`` for XML that is unsafe
    (a DTD, entities), malformed, past a limit, or not a DMARC aggregate report."""
    target = _ReportBuilder(budget)
    parser = SafeTree.DefusedXMLParser(
        target=target, forbid_dtd=True, forbid_entities=True, forbid_external=True
    )
    try:
        for piece in pieces:
            parser.feed(piece)
        parser.close()
    except DefusedXmlException as error:
        raise _Refused(f"the XML is refused: {type(error).__name__}") from None
    except SafeTree.ParseError as error:
        raise _Refused(f"the XML is malformed: {error}") from None
    domain = _text(target.policy, "domain").lower().rstrip(".")
    org_name = _text(target.metadata, "org_name")
    report_id = _text(target.metadata, "report_id")
    if not (domain and org_name and report_id):
        raise _Refused("the report lacks its domain, org_name or report_id")
    begins = _epoch_ms(_text(target.metadata, "date_range", "begin"), "date_range/begin")
    ends = _epoch_ms(_text(target.metadata, "date_range", "end"), "date_range/end")
    summed = [*target.rows.items(), *target.other.items()]
    return AggregateReport(
        org_name=org_name[:200],
        report_id=report_id[:255],
        domain=domain[:253],
        begins_at=begins,
        ends_at=ends,
        rows=tuple(replace(row, count=count) for row, count in summed),
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
