"""Reading DMARC aggregate reports (RFC 7489 section 7.2, appendix C) out of inbound mail.

A report arrives as an attachment (or the body) holding XML, gzip'd XML or a zip of XML files,
from anyone, so every step is bounded, and the whole read runs in the inbound server's parsing
children under their CPU-time and memory limits (``layang.inbound.parsing``). The compressed
data is what the inbound server accepted (``LAYANG_INBOUND_MAX_MB``); its MIME shape is measured
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

import defusedxml.ElementTree as SafeTree
from defusedxml import DefusedXmlException

from layang.domain.dmarc import OTHER_SOURCES, AggregateReport, ReportRow
from layang.inbound.report_parts import MAX_PARTS
from layang.inbound.reports import mime_shape_problem

MAX_XML_BYTES = 32 * 1024 * 1024
"""Bytes of XML one message may inflate to, over all its attachments."""
MAX_ELEMENTS = 1_200_000
"""XML elements one message may hold: 60,000 to 90,000 records, read in about 3 s of CPU."""
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


class _OverLimit(_Refused):
    """A message past one of the limits: not read at all, not even its other attachments."""


class _Budget:
    """What one message may still spend: inflated bytes and XML elements."""

    def __init__(self) -> None:
        self.inflated = 0
        self.elements = 0

    def inflate(self, size: int, what: str) -> None:
        self.inflated += size
        if self.inflated > MAX_XML_BYTES:
            raise _OverLimit(f"{what} inflates past {MAX_XML_BYTES} bytes")


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
            except _OverLimit as error:
                # Not read in part: half a report would mislead.
                return NotAReport(str(error))
            except _Refused as error:
                problems.append(str(error))
    except Exception as error:  # odd MIME the parser still trips on
        return NotAReport(f"could not be parsed: {type(error).__name__}")
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
    while not inflater.eof:
        try:
            piece = inflater.decompress(pending, CHUNK_BYTES)
        except zlib.error as error:
            raise _Refused(f"the gzip data is corrupt: {error}") from None
        pending = inflater.unconsumed_tail
        if not piece and not pending:
            raise _Refused("the gzip data is corrupt: it ends early")
        budget.inflate(len(piece), "the gzip data")
        yield piece


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

_METADATA = {
    ("report_metadata", "org_name"): "org_name",
    ("report_metadata", "report_id"): "report_id",
    ("report_metadata", "date_range", "begin"): "begin",
    ("report_metadata", "date_range", "end"): "end",
    ("policy_published", "domain"): "domain",
}
_RECORD = {
    ("record", "row", "source_ip"): "source_ip",
    ("record", "row", "count"): "count",
    ("record", "row", "policy_evaluated", "disposition"): "disposition",
    ("record", "row", "policy_evaluated", "dkim"): "dkim_aligned",
    ("record", "row", "policy_evaluated", "spf"): "spf_aligned",
    ("record", "identifiers", "header_from"): "header_from",
}
_RESULTS = {("record", "auth_results", "dkim"), ("record", "auth_results", "spf")}


def _local(tag: str) -> str:
    # DMARC reports come with and without a namespace (the 2.0 drafts add one).
    return tag.rpartition("}")[2]


def _epoch_ms(value: str, name: str) -> int:
    try:
        return int(value) * 1000
    except ValueError:
        raise _Refused(f"{name} is not a Unix time: {value[:40]!r}") from None


class _ReportBuilder:
    """The parser's handlers: they keep only the path to the element being read and the fields
    of the record being read, sum each record into the report's rows at its end and let it go,
    so that memory stays that of one record whatever the report's length."""

    def __init__(self, budget: _Budget) -> None:
        self.budget = budget
        self.path: list[str] = []
        self.chars: list[str] = []
        self.size = 0
        self.metadata: dict[str, str] = {}
        self.record: dict[str, str] = {}
        self.results: list[tuple[str, dict[str, str]]] = []
        self.rows: dict[ReportRow, int] = {}
        self.other: dict[ReportRow, int] = {}

    def start(self, tag: str, attrs: object) -> None:
        self.budget.elements += 1
        if self.budget.elements > MAX_ELEMENTS:
            raise _OverLimit(f"the XML holds more than {MAX_ELEMENTS} elements")
        path = self.path
        if len(path) >= MAX_XML_DEPTH:
            raise _OverLimit(f"the XML is nested more than {MAX_XML_DEPTH} levels deep")
        name = _local(tag)
        if not path and name != "feedback":
            raise _Refused(f"the XML is not a DMARC report (its root is {name!r})")
        path.append(name)
        if len(path) == 4 and tuple(path[1:]) in _RESULTS:
            self.results.append((name, {}))
        self.chars = []
        self.size = 0

    def data(self, text: str) -> None:
        if self.size < MAX_TEXT:
            self.chars.append(text)
            self.size += len(text)

    def end(self, tag: str) -> None:
        path = self.path
        key = tuple(path[1:])
        if key and key[0] == "record":
            if len(key) == 1:
                self._add_record()
            elif (field := _RECORD.get(key)) is not None:
                self.record.setdefault(field, self._text())
            elif len(key) == 4 and key[1] == "auth_results" and self.results:
                self.results[-1][1].setdefault(key[3], self._text())
        elif (field := _METADATA.get(key)) is not None:
            self.metadata.setdefault(field, self._text())
        path.pop()
        self.chars = []
        self.size = MAX_TEXT  # text after a child element is no field's

    def close(self) -> None:
        return None

    def _text(self) -> str:
        return "".join(self.chars)[:MAX_TEXT].strip()

    def _add_record(self) -> None:
        record, results = self.record, self.results
        self.record, self.results = {}, []
        found = _row(record, results)
        if found is None:
            return
        key, count = found
        if key in self.rows or len(self.rows) < MAX_ROWS:
            self.rows[key] = min(self.rows.get(key, 0) + count, MAX_COUNT)
        elif len(self.other) < MAX_ROWS:
            # Past the cap, sources are summed by their results alone.
            other = replace(key, source_ip=OTHER_SOURCES, header_from="", dkim_passed=())
            self.other[other] = min(self.other.get(other, 0) + count, MAX_COUNT)


def _parse(pieces: Iterator[bytes], budget: _Budget) -> AggregateReport:
    """One aggregate report from its XML's pieces. Raises ``_Refused`` for XML that is unsafe
    (a DTD, entities), malformed, past a limit, or not a DMARC aggregate report."""
    target = _ReportBuilder(budget)
    parser = SafeTree.DefusedXMLParser(
        target=target, forbid_dtd=True, forbid_entities=True, forbid_external=True
    )
    # defusedxml's handlers refuse DTDs and entities; the elements go straight to the target,
    # skipping the generic parser's per-element work (a third of the time per element).
    expat = parser.parser
    expat.StartElementHandler = target.start
    expat.EndElementHandler = target.end
    expat.CharacterDataHandler = target.data
    try:
        for piece in pieces:
            parser.feed(piece)
        parser.close()
    except DefusedXmlException as error:
        raise _Refused(f"the XML is refused: {type(error).__name__}") from None
    except SafeTree.ParseError as error:
        raise _Refused(f"the XML is malformed: {error}") from None
    domain = target.metadata.get("domain", "").lower().rstrip(".")
    org_name = target.metadata.get("org_name", "")
    report_id = target.metadata.get("report_id", "")
    if not (domain and org_name and report_id):
        raise _Refused("the report lacks its domain, org_name or report_id")
    begins = _epoch_ms(target.metadata.get("begin", ""), "date_range/begin")
    ends = _epoch_ms(target.metadata.get("end", ""), "date_range/end")
    summed = [*target.rows.items(), *target.other.items()]
    return AggregateReport(
        org_name=org_name[:200],
        report_id=report_id[:255],
        domain=domain[:253],
        begins_at=begins,
        ends_at=ends,
        rows=tuple(replace(row, count=count) for row, count in summed),
    )


def _row(
    record: dict[str, str], results: list[tuple[str, dict[str, str]]]
) -> tuple[ReportRow, int] | None:
    """The row a record's fields say (its count left 0, to sum rows by) and its count."""
    source_ip = record.get("source_ip", "")
    try:
        count = int(record.get("count") or "0")
    except ValueError:
        return None
    if not source_ip or count <= 0:
        return None
    dkim_results = [fields for name, fields in results if name == "dkim"]
    spf_results = [fields for name, fields in results if name == "spf"]
    passed = tuple(
        f"{d.get('domain', '').lower()}:{d.get('selector', '').lower()}"
        for d in dkim_results
        if d.get("result", "").lower() == "pass"
    )
    dkim = "pass" if passed else (dkim_results[0].get("result", "") if dkim_results else "none")
    spf = spf_results[0].get("result", "") if spf_results else "none"
    row = ReportRow(
        source_ip=source_ip[:45],
        count=0,
        disposition=(record.get("disposition", "").lower() or "none")[:16],
        dkim=dkim.lower()[:16] or "none",
        spf=spf.lower()[:16] or "none",
        dkim_aligned=record.get("dkim_aligned", "").lower() == "pass",
        spf_aligned=record.get("spf_aligned", "").lower() == "pass",
        header_from=record.get("header_from", "").lower()[:253],
        dkim_passed=passed,
    )
    return row, count
