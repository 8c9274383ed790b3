"""SMTP TLS reporting (RFC 8460): the outcome of every MX session, counted per day, and one
aggregate report a day to each recipient domain that asks for it (``_smtp._tls`` TXT).

The delivery engine calls :func:`record_session` after each session's TLS check; the worker
calls :func:`due_reports` now and then, which sends yesterday's reports once (the first worker
to claim a domain's report sends it); ``layang tlsrpt send`` sends a day's reports at once.
A report goes by mail through Layang's own outbox (RFC 8460 section 5.3), DKIM-signed when an
account has verified the sender's domain, or is POSTed to an ``https:`` address (section 5.4).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import secrets
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from email.mime.application import MIMEApplication
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText
from email.utils import format_datetime
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

import dns.exception
import dns.resolver
import httpx
import peewee

from layang.clock import now_ms
from layang.config import Config
from layang.db import database, write_transaction
from layang.destinations.addresses import Refused, host_refusal, resolve_blocking
from layang.destinations.dns import lookup_resolver
from layang.destinations.result_types import NO_TLS, VALIDATION_FAILURE
from layang.ids import new_id
from layang.mail.dkim import covering_domain
from layang.mail.message import (
    SMTP_POLICY,
    InvalidAddress,
    domain_of,
    has_line_break,
    normalize_address,
)
from layang.mail.outbox import Submission, enqueue
from layang.models import LIVE, VERIFIED, Account, SendingDomain, TlsReport
from layang.tls_trust import client_ssl_context

log = logging.getLogger("layang.tlsrpt")

SUCCESS = ""  # the result type of a session that met its policy
INTERNAL_ACCOUNT = "layang-tls-reports"
"""The account reports are sent under when no account has verified the sender's domain."""
POST_SECONDS = 30.0
MEDIA_TYPE = "application/tlsrpt+gzip"


class ReportedPolicy(Protocol):
    """What a session's policy tells TLS-RPT (``layang.destinations.policy.TransportPolicy``)."""

    @property
    def report_type(self) -> str: ...

    def report_strings(self, host: str | None = None) -> list[str]: ...


def day_of(ms: int) -> str:
    """The UTC day (``YYYY-MM-DD``) of a time in epoch milliseconds."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d")


def record_session(
    domain: str,
    policy: ReportedPolicy,
    mx_host: str,
    ok: bool,
    failure_type: str | None = None,
    detail: str | None = None,
    *,
    at_ms: int | None = None,
) -> None:
    """Count one session with ``mx_host`` for recipient ``domain``: a success when ``ok`` and
    no ``failure_type``, else a failure of that RFC 8460 result type with ``detail``. Safe
    from any number of processes (one upsert). Blocking: call it off the event loop."""
    at = now_ms() if at_ms is None else at_ms
    day = day_of(at)
    domain = domain.lower().rstrip(".")
    host = mx_host.lower().rstrip(".")
    result_type = SUCCESS if ok and not failure_type else (failure_type or VALIDATION_FAILURE)
    reason = "" if result_type == SUCCESS else (detail or "")
    strings = json.dumps(policy.report_strings(host))
    key_source = json.dumps([day, domain, policy.report_type, strings, host, result_type, reason])
    row_key = hashlib.sha256(key_source.encode()).hexdigest()
    values = (row_key, day, domain, policy.report_type, strings, host, result_type, reason, 1, at)
    param = database.obj.param  # type: ignore[union-attr]
    marks = ", ".join([param] * len(values))
    database.connect(reuse_if_open=True)
    with write_transaction():
        database.execute_sql(
            'INSERT INTO "tls_session_result" ("row_key", "day", "policy_domain", "policy_type", '
            '"policy_strings", "mx_host", "result_type", "detail", "sessions", "updated_at") '
            f'VALUES ({marks}) ON CONFLICT ("row_key") DO UPDATE SET '
            '"sessions" = "tls_session_result"."sessions" + 1, '
            '"updated_at" = excluded."updated_at"',
            values,
        )


# --- Building a report -------------------------------------------------------------------


@dataclass(frozen=True)
class SessionCount:
    policy_type: str
    policy_strings: tuple[str, ...]
    mx_host: str
    result_type: str
    detail: str
    sessions: int


def session_counts(day: str, domain: str | None = None) -> list[tuple[str, SessionCount]]:
    """(policy domain, count) of the sessions counted on ``day`` (for ``domain``, or every
    domain), in the order they were first seen."""
    param = database.obj.param  # type: ignore[union-attr]
    sql = (
        'SELECT "policy_domain", "policy_type", "policy_strings", "mx_host", "result_type", '
        f'"detail", "sessions" FROM "tls_session_result" WHERE "day" = {param}'
    )
    args: list[Any] = [day]
    if domain is not None:
        sql += f' AND "policy_domain" = {param}'
        args.append(domain)
    rows = database.execute_sql(sql + ' ORDER BY "id"', args).fetchall()
    return [
        (row[0], SessionCount(row[1], tuple(json.loads(row[2])), row[3], row[4], row[5], row[6]))
        for row in rows
    ]


def report_json(
    domain: str,
    day: str,
    counts: Sequence[SessionCount],
    *,
    organization: str,
    contact: str,
    report_id: str,
) -> dict[str, Any]:
    """The RFC 8460 section 4 report of ``day`` for ``domain``: one entry per policy seen."""
    grouped: dict[tuple[str, tuple[str, ...]], list[SessionCount]] = defaultdict(list)
    for count in counts:
        grouped[(count.policy_type, count.policy_strings)].append(count)
    policies = []
    for (policy_type, strings), rows in grouped.items():
        policy: dict[str, Any] = {"policy-type": policy_type, "policy-domain": domain}
        if strings:
            policy["policy-string"] = list(strings)
        if policy_type == "sts":
            mx = [s.partition(":")[2].strip() for s in strings if s.lower().startswith("mx:")]
        else:
            mx = sorted({row.mx_host for row in rows})
        if mx:
            policy["mx-host"] = mx
        failures: dict[tuple[str, str, str], int] = defaultdict(int)
        for row in rows:
            if row.result_type != SUCCESS:
                failures[(row.result_type, row.mx_host, row.detail)] += row.sessions
        entry: dict[str, Any] = {
            "policy": policy,
            "summary": {
                "total-successful-session-count": sum(
                    row.sessions for row in rows if row.result_type == SUCCESS
                ),
                "total-failure-session-count": sum(failures.values()),
            },
        }
        if failures:
            entry["failure-details"] = [
                {
                    "result-type": result_type,
                    "receiving-mx-hostname": host,
                    "failed-session-count": sessions,
                    **({"additional-information": detail} if detail else {}),
                }
                for (result_type, host, detail), sessions in failures.items()
            ]
        policies.append(entry)
    return {
        "organization-name": organization,
        "date-range": {
            "start-datetime": f"{day}T00:00:00Z",
            "end-datetime": f"{day}T23:59:59Z",
        },
        "contact-info": contact,
        "report-id": report_id,
        "policies": policies,
    }


# --- Where reports go ----------------------------------------------------------------------


LOOKUP_SECONDS = 5.0


def _resolver(config: Config) -> dns.resolver.Resolver:
    return lookup_resolver(config, LOOKUP_SECONDS)


MAX_RUA = 5
"""At most this many ``rua`` URIs of a domain get its report: RFC 8460 sets no limit, and a
record listing dozens would have Layang mail a report to each of them every day."""


def reporting_addresses(domain: str, config: Config) -> list[str]:
    """The ``rua`` URIs ``domain``'s report goes to: those of :func:`reporting_targets`."""
    return reporting_targets(domain, config)[0]


def reporting_targets(domain: str, config: Config) -> tuple[list[str], list[str]]:
    """(the ``rua`` URIs of ``domain``'s ``_smtp._tls`` TXT record a report may go to, why
    each other one may not): ``mailto:`` with one valid address (written back normalised,
    ``mailto:local@domain``), ``https:`` as :func:`https_problem` allows, the same one once,
    at most ``MAX_RUA``. Both empty when the domain publishes no record or the look-up
    fails."""
    resolver = _resolver(config)
    try:
        answer = resolver.resolve(
            f"_smtp._tls.{domain}", "TXT", raise_on_no_answer=False, search=False
        )
    except (dns.exception.DNSException, OSError):
        return [], []
    records = [b"".join(r.strings).decode("ascii", "replace") for r in (answer.rrset or ())]
    records = [r for r in records if r.replace(" ", "").startswith("v=TLSRPTv1;")]
    if len(records) != 1:
        return [], []
    fields = dict(
        (key.strip().lower(), value.strip())
        for key, _, value in (part.partition("=") for part in records[0].split(";"))
    )
    usable: list[str] = []
    refused: list[str] = []
    for uri in (uri.strip() for uri in fields.get("rua", "").split(",")):
        if not uri:
            continue
        target, problem = _rua_target(uri, config.mx_allow_private)
        if problem is not None:
            refused.append(problem)
        elif target in usable:
            continue
        elif len(usable) >= MAX_RUA:
            refused.append(f"{target}: more than {MAX_RUA} rua URIs; not used")
        else:
            usable.append(target)
    return usable, refused


def _rua_target(uri: str, allow_private: bool) -> tuple[str, str | None]:
    """(the URI as used, why it may not be) of one ``rua`` entry."""
    shown = repr(uri[:100])  # a refused URI is shown as data, never as lines of a log or reply
    scheme = uri.partition(":")[0].lower()
    if scheme == "https":
        return uri, https_problem(uri, allow_private)
    if scheme != "mailto":
        return uri, f"{shown}: not a mailto: or https: URI"
    address = unquote(uri[len("mailto:") :].split("?", 1)[0])
    # As the API takes a recipient: one addr-spec, nothing that could end a line or a command.
    if has_line_break(address) or any(c.isspace() or c == "," for c in address):
        return uri, f"{shown}: not one email address"
    try:
        return f"mailto:{normalize_address(address)}", None
    except InvalidAddress:
        return uri, f"{shown}: not a valid email address"


def https_problem(uri: str, allow_private: bool) -> str | None:
    """Why an ``https:`` rua URI is not one a report may be POSTed to as written (not https,
    no host, a user name or password, a host refused by the address rules), or None. Its
    host's addresses are checked again when it is resolved."""
    if has_line_break(uri) or any(c.isspace() for c in uri):
        # urlsplit would drop them silently, and the URI is stored and shown as written.
        return f"{uri[:100]!r} is not a valid URL (white space)"
    try:
        parts = urlsplit(uri)
        parts.port  # noqa: B018 - raises for a port that is not a number
    except ValueError as error:
        return f"{uri[:100]!r} is not a valid URL ({error})"
    if parts.scheme.lower() != "https" or not parts.hostname:
        return f"{uri[:100]!r} is not an https URL"
    if parts.username is not None or parts.password is not None:
        return f"{parts.hostname}: a report URL must not carry a user name or password"
    return host_refusal(parts.hostname, allow_private)


def sender_address(config: Config) -> str:
    """``LAYANG_TLSRPT_FROM``, by default ``tls-reports@<LAYANG_BOUNCE_DOMAIN>``."""
    return config.tlsrpt_from or f"tls-reports@{config.bounce_domain}"


def report_filename(submitter: str, domain: str, day: str, unique: str) -> str:
    """RFC 8460 section 5.1: ``sender!policy-domain!begin!end!unique-id.json.gz``."""
    begin = int(datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=UTC).timestamp())
    return f"{submitter}!{domain}!{begin}!{begin + 86399}!{unique}.json.gz"


def report_mail(
    report: Mapping[str, Any],
    compressed: bytes,
    filename: str,
    sender: str,
    to: str,
    domain: str,
    message_id: str,
) -> bytes:
    """The RFC 8460 section 5.3 message carrying a gzipped report."""
    submitter = domain_of(sender)
    message = MIMEMultipart("report", **{"report-type": "tlsrpt"})
    message["From"] = sender
    message["To"] = to
    message["Date"] = format_datetime(datetime.now(UTC))
    message["Message-ID"] = message_id
    message["Subject"] = (
        f"Report Domain: {domain} Submitter: {submitter} Report-ID: <{report['report-id']}>"
    )
    message["TLS-Report-Domain"] = domain
    message["TLS-Report-Submitter"] = submitter
    message.attach(
        MIMEText(
            f"This is an aggregate TLS report from {submitter} for {domain}, "
            f"{report['date-range']['start-datetime']} to "
            f"{report['date-range']['end-datetime']}.\n",
            "plain",
            "utf-8",
        )
    )
    part = MIMEApplication(compressed, "tlsrpt+gzip", name=filename)
    part.add_header("Content-Disposition", "attachment", filename=filename)
    message.attach(part)
    return message.as_bytes(policy=SMTP_POLICY)


def _report_account(sender: str) -> Account:
    """The account whose verified domain covers ``sender`` (its DKIM key signs the report),
    else Layang's internal reporting account."""
    domains = {
        row.domain: row.account_id
        for row in SendingDomain.select(SendingDomain.domain, SendingDomain.account).where(
            SendingDomain.status == VERIFIED
        )
    }
    covering = covering_domain(domains, domain_of(sender))
    if covering is not None:
        return Account.get_by_id(domains[covering])
    account, _ = Account.get_or_create(name=INTERNAL_ACCOUNT, defaults={"mode": LIVE})
    return account


def _mail_report(
    address: str,
    report: Mapping[str, Any],
    compressed: bytes,
    filename: str,
    config: Config,
    domain: str,
) -> str:
    recipient = address[len("mailto:") :]  # normalised by reporting_targets
    sender = sender_address(config)
    transmission_id = new_id()
    message_id = f"<{transmission_id}@{domain_of(sender)}>"
    raw = report_mail(report, compressed, filename, sender, recipient, domain, message_id)
    account = _report_account(sender)
    enqueue(
        account,
        Submission(
            transmission_id=transmission_id,
            created_at=now_ms(),
            source="tlsrpt",
            mail_from=sender,
            from_header=json.dumps({"email": sender}),
            subject=f"Report Domain: {domain}",
            message_id=message_id,
            metadata={"tlsrpt": report["report-id"]},
            recipients=[(recipient, "to")],
            raw=raw,
        ),
    )
    return f"queued for {recipient} as {transmission_id}"


def _post_report(address: str, compressed: bytes, config: Config) -> str:
    """POST the report (RFC 8460 section 5.4) to the address its host resolves to through
    ``LAYANG_DNS_RESOLVER``, checked as every host a recipient domain names is (public only,
    unless ``LAYANG_MX_ALLOW_PRIVATE``: :mod:`layang.destinations.addresses`), its certificate
    checked for its name, no redirects."""
    problem = https_problem(address, config.mx_allow_private)
    if problem is not None:
        raise ValueError(problem)
    parts = urlsplit(address)
    host = parts.hostname or ""
    try:
        target = str(resolve_blocking(host, config.mx_allow_private, _resolver(config)))
    except Refused as refused:
        raise ValueError(f"not posted: {refused}") from None
    literal = f"[{target}]" if ":" in target else target
    url = parts._replace(netloc=f"{literal}:{parts.port or 443}").geturl()
    with httpx.Client(
        verify=client_ssl_context(config.tls_cafile or None),
        timeout=POST_SECONDS,
        follow_redirects=False,
        trust_env=False,
    ) as client:
        response = client.post(
            url,
            content=compressed,
            headers={"Content-Type": MEDIA_TYPE, "Host": parts.netloc},
            extensions={"sni_hostname": host},
        )
    if not 200 <= response.status_code < 300:
        raise ValueError(f"{address} answered {response.status_code}")
    return f"posted to {address} ({response.status_code})"


# --- Sending ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReportOutcome:
    """What became of one domain's report: ``status`` is ``sent``, ``failed``, ``no-rua``
    (the domain asks for none) or ``taken`` (already sent, or being sent elsewhere)."""

    domain: str
    status: str
    detail: str


def send_reports(config: Config, day: str) -> list[ReportOutcome]:
    """Send the report of ``day`` (``YYYY-MM-DD``, UTC) to every domain with sessions that
    day and a reporting policy, unless it was already sent. Each domain's report is claimed
    in the database first, so that workers running at once send it once."""
    database.connect(reuse_if_open=True)
    by_domain: dict[str, list[SessionCount]] = defaultdict(list)
    for domain, count in session_counts(day):
        by_domain[domain].append(count)
    return [_send_one(config, day, domain, rows) for domain, rows in sorted(by_domain.items())]


def _send_one(config: Config, day: str, domain: str, rows: list[SessionCount]) -> ReportOutcome:
    sender = sender_address(config)
    submitter = domain_of(sender)
    unique = secrets.token_hex(6)
    report_id = f"{day}T00:00:00Z_{domain}_{unique}@{submitter}"
    try:
        with write_transaction():
            claim = TlsReport.create(
                day=day,
                policy_domain=domain,
                status="sending",
                report_id=report_id,
                rua="",
                detail="",
                created_at=now_ms(),
            )
    except peewee.IntegrityError:
        return ReportOutcome(domain, "taken", "already sent or being sent")
    addresses, refused = reporting_targets(domain, config)
    if not addresses:
        if refused:
            return _finish(claim, ReportOutcome(domain, "failed", "; ".join(refused)), [])
        return _finish(claim, ReportOutcome(domain, "no-rua", "no _smtp._tls record"), [])
    report = report_json(
        domain, day, rows, organization=submitter, contact=sender, report_id=report_id
    )
    compressed = gzip.compress(json.dumps(report, separators=(",", ":")).encode(), mtime=0)
    filename = report_filename(submitter, domain, day, unique)
    results, failed = [], list(refused)
    for address in addresses:
        try:
            if address.lower().startswith("mailto:"):
                results.append(_mail_report(address, report, compressed, filename, config, domain))
            else:
                results.append(_post_report(address, compressed, config))
        except (httpx.HTTPError, ValueError, OSError, peewee.PeeweeException) as error:
            failed.append(f"{address}: {error}")
    status = "sent" if results else "failed"
    log.info("tlsrpt %s day=%s domain=%s %s", status, day, domain, "; ".join(results + failed))
    return _finish(claim, ReportOutcome(domain, status, "; ".join(results + failed)), addresses)


def _finish(claim: TlsReport, outcome: ReportOutcome, addresses: list[str]) -> ReportOutcome:
    with write_transaction():
        TlsReport.update(
            status=outcome.status, detail=outcome.detail, rua=",".join(addresses)
        ).where(TlsReport.id == claim.id).execute()
    return outcome


def yesterday(now: datetime | None = None) -> str:
    """The UTC day before ``now`` (default: now)."""
    moment = now or datetime.now(UTC)
    return (moment.astimezone(UTC).date() - timedelta(days=1)).isoformat()


def due_reports(config: Config, now: datetime | None = None) -> list[ReportOutcome]:
    """Send yesterday's reports not sent yet (nothing with ``LAYANG_TLSRPT=false``). Cheap when
    there is nothing to do, so the worker may call it as often as it likes."""
    if not config.tlsrpt:
        return []
    day = yesterday(now)
    database.connect(reuse_if_open=True)
    param = database.obj.param  # type: ignore[union-attr]
    pending = database.execute_sql(
        'SELECT 1 FROM "tls_session_result" r WHERE r."day" = '
        f'{param} AND NOT EXISTS (SELECT 1 FROM "tls_report" t WHERE t."day" = r."day" '
        'AND t."policy_domain" = r."policy_domain") LIMIT 1',
        [day],
    ).fetchone()
    return send_reports(config, day) if pending else []


def parse_day(value: str) -> str:
    """``YYYY-MM-DD`` checked; raises ``ValueError`` naming the expected form."""
    try:
        return date.fromisoformat(value).isoformat()
    except ValueError:
        raise ValueError(f"not a day as YYYY-MM-DD: {value!r}") from None


# --- What the console shows ---------------------------------------------------------------

POLICY_LABELS = {"sts": "MTA-STS", "tlsa": "DANE", "no-policy-found": "none (opportunistic)"}


@dataclass(frozen=True)
class DomainSecurity:
    """What one recipient domain's MX sessions of the last day met: the policy seen last
    (``policy``, and the cached MTA-STS ``mode`` if any), the sessions that met it with TLS
    (``succeeded``), those that carried mail without TLS where the policy allowed it
    (``plaintext``, "no TLS"), those that failed it, and each failure or plaintext session's
    reason (result type, MX host, detail, sessions)."""

    domain: str
    policy: str
    mode: str | None
    succeeded: int
    failed: int
    failures: tuple[tuple[str, str, str, int], ...]
    last_seen: int
    plaintext: int = 0


def recent_security(account_id: int, now: int | None = None) -> list[DomainSecurity]:
    """Per recipient domain ``account_id`` sent to in the last day, the transport security
    seen in that day's sessions (every account's sessions to the domain count: the policy is
    the domain's), busiest first."""
    since = (now_ms() if now is None else now) - 86_400_000
    param = database.obj.param  # type: ignore[union-attr]
    addresses = database.execute_sql(
        f'SELECT DISTINCT "address" FROM "recipient" WHERE "account_id" = {param} '
        f'AND "updated_at" >= {param} LIMIT 10000',
        [account_id, since],
    ).fetchall()
    domains = sorted({row[0].rpartition("@")[2].lower() for row in addresses})
    if not domains:
        return []
    marks = ", ".join([param] * len(domains))
    rows = database.execute_sql(
        'SELECT "policy_domain", "policy_type", "mx_host", "result_type", "detail", "sessions", '
        f'"updated_at" FROM "tls_session_result" WHERE "policy_domain" IN ({marks}) '
        f'AND "updated_at" >= {param} ORDER BY "updated_at"',
        [*domains, since],
    ).fetchall()
    modes = dict(
        database.execute_sql(
            f'SELECT "domain", "mode" FROM "mta_sts_policy" WHERE "domain" IN ({marks})', domains
        ).fetchall()
    )
    seen: dict[str, dict[str, Any]] = {}
    for domain, policy_type, host, result_type, detail, sessions, updated in rows:
        entry = seen.setdefault(
            domain, {"policy": "", "ok": 0, "failed": 0, "plain": 0, "failures": [], "last": 0}
        )
        entry["policy"], entry["last"] = policy_type, max(entry["last"], updated)
        if result_type == SUCCESS:
            entry["ok"] += sessions
        elif (detail or "").startswith(NO_TLS):
            entry["plain"] += sessions
            entry["failures"].append((result_type, host, detail, sessions))
        else:
            entry["failed"] += sessions
            entry["failures"].append((result_type, host, detail, sessions))
    found = [
        DomainSecurity(
            domain,
            POLICY_LABELS.get(entry["policy"], entry["policy"]),
            modes.get(domain) if entry["policy"] == "sts" else None,
            entry["ok"],
            entry["failed"],
            tuple(entry["failures"]),
            entry["last"],
            entry["plain"],
        )
        for domain, entry in seen.items()
    ]
    return sorted(found, key=lambda d: (-(d.succeeded + d.failed + d.plaintext), d.domain))
