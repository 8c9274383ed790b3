"""The circuit breaker's counters (docs/api.md, "Streams and the circuit breaker"), kept with the
events they count.

``layang.mail.events`` adds ``counter_statements`` to every batch of events it stores, in the
same transaction: a message that reached a final answer (a ``Delivery``, or a ``Bounce`` the
delivery attempt itself got) counts as sent, a ``hard`` bounce (then or reported later) as a
hard bounce, a ``Complaint`` as a complaint; per account, and per account and From domain, in
buckets of ``BUCKET_MS``. The rates over 24 h are then a sum of a few hundred rows, whichever
process reads them (``layang.domain.breaker``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence

from layang.db import Statement, is_postgresql
from layang.models import BOUNCE, COMPLAINT, DELIVERY

# (recipient id, status, epoch ms, detail as JSON), as layang.mail.events stores them.
EventRow = tuple[str, str, int, str]

BUCKET_MS = 5 * 60 * 1000
WINDOW_MS = 24 * 3600 * 1000
ACCOUNT_WIDE = ""
"""The ``domain`` of an account's own counters."""


def bucket_of(at_ms: int) -> int:
    """The start of the bucket ``at_ms`` falls in."""
    return at_ms - at_ms % BUCKET_MS


def _counts(status: str, detail: str) -> tuple[int, int, int] | None:
    """(sent, hard bounces, complaints) that one event adds, or None."""
    if status == DELIVERY:
        return 1, 0, 0
    if status == COMPLAINT:
        return 0, 0, 1
    if status != BOUNCE:
        return None
    try:
        stored = json.loads(detail)
    except ValueError:
        stored = {}
    if not isinstance(stored, dict):
        stored = {}
    # A bounce report follows a Delivery, which already counted the message as sent.
    sent = 0 if stored.get("source") == "report" else 1
    hard = 1 if stored.get("bounceClass") == "hard" else 0
    return (sent, hard, 0) if sent or hard else None


def counter_statements(rows: Sequence[EventRow]) -> list[Statement]:
    """The two statements (account-wide, and per From domain) adding what ``rows`` count to
    the counters; none when no row counts (opens, clicks, delays), at no cost."""
    values: list[object] = []
    latest = 0
    for recipient_id, status, created_at, detail in rows:
        counts = _counts(status, detail)
        if counts is not None:
            values += [recipient_id, *counts]
            latest = max(latest, created_at)
    if not values:
        return []
    postgresql, count = is_postgresql(), len(values) // 4
    bucket = bucket_of(latest)
    return [
        Statement(_counter_sql(postgresql, count, per_domain=False), [bucket, *values]),
        Statement(_counter_sql(postgresql, count, per_domain=True), [bucket, *values]),
    ]


@functools.lru_cache(maxsize=128)
def _counter_sql(postgresql: bool, rows: int, *, per_domain: bool) -> str:
    if postgresql:
        row = "(?, ?::integer, ?::integer, ?::integer)"
        values = f'(VALUES {", ".join([row] * rows)}) AS v("rid", "sent", "hard", "complaints")'
        rid, sent, hard, complaints = ('v."rid"', 'v."sent"', 'v."hard"', 'v."complaints"')
        bucket = "?::bigint"
    else:
        values = f"(VALUES {', '.join(['(?, ?, ?, ?)'] * rows)}) AS v"
        rid, sent, hard, complaints = (f"v.column{n}" for n in range(1, 5))
        bucket = "?"
    domain = 't."from_domain"' if per_domain else "''"
    group = 'r."account_id", t."from_domain"' if per_domain else 'r."account_id"'
    if postgresql:
        # Each row looked up by its key (OFFSET 0 keeps PostgreSQL from turning the lookup into
        # a join over every record kept).
        records = (
            f'{values} CROSS JOIN LATERAL (SELECT "account_id", "transmission_id" '  # noqa: S608
            f'FROM "recipient" WHERE "id" = {rid} OFFSET 0) AS r '
        )
        if per_domain:
            records += (
                'CROSS JOIN LATERAL (SELECT "from_domain" FROM "transmission" '
                'WHERE "id" = r."transmission_id" OFFSET 0) AS t '
            )
    else:
        records = f'{values} JOIN "recipient" AS r ON r."id" = {rid} '
        if per_domain:
            records += 'JOIN "transmission" AS t ON t."id" = r."transmission_id" '
    # "WHERE true" keeps SQLite from reading ON CONFLICT as a join's ON. Only placeholders and
    # column names go into the text.
    return (
        'INSERT INTO "breaker_count" ("bucket", "account_id", "domain", "sent", '  # noqa: S608
        '"hard_bounces", "complaints") '
        f'SELECT {bucket}, r."account_id", {domain}, SUM({sent}), SUM({hard}), SUM({complaints}) '
        f"FROM {records}WHERE true "
        f"GROUP BY {group} "
        'ON CONFLICT ("account_id", "domain", "bucket") DO UPDATE SET '
        '"sent" = "breaker_count"."sent" + excluded."sent", '
        '"hard_bounces" = "breaker_count"."hard_bounces" + excluded."hard_bounces", '
        '"complaints" = "breaker_count"."complaints" + excluded."complaints"'
    )
