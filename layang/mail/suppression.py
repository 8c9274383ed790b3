"""The suppression list as the sending path sees it (docs/api.md, "Suppression list"): which events
add an address, and which recipients must not be relayed. Managing the list is
``layang.domain.suppressions``.

An address is suppressed per account. A hard bounce, a complaint or an unsubscribe adds it, in
the transaction that stores the event (``layang.mail.events``). ``unsubscribe`` entries stop
only mail sent with ``transactional: false``; the other reasons stop everything. Acceptance
checks the list once per message, and the worker checks each batch it claims again, so that an
address suppressed while mail to it waits in the queue is not sent to either.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence

from layang.db import Statement, database, is_postgresql
from layang.ids import new_id
from layang.models import BOUNCE, COMPLAINED, COMPLAINT, HARD_BOUNCE, UNSUBSCRIBE, UNSUBSCRIBED

# (recipient id, status, epoch ms, detail as JSON), as layang.mail.events stores them.
EventRow = tuple[str, str, int, str]

MAX_DETAIL = 1000
_BY_STATUS = {COMPLAINT: COMPLAINED, UNSUBSCRIBE: UNSUBSCRIBED}


def applies(reason: str, transactional: bool) -> bool:
    """Whether an entry for ``reason`` stops a message that is (or is not) transactional."""
    return reason != UNSUBSCRIBED or not transactional


def _reason_and_detail(status: str, detail: str) -> tuple[str, str] | None:
    reason = _BY_STATUS.get(status)
    if reason is None and status != BOUNCE:
        return None
    try:
        stored = json.loads(detail)
    except ValueError:
        stored = {}
    if not isinstance(stored, dict):
        stored = {}
    if reason is None:
        if stored.get("bounceClass") != "hard":
            return None
        reason = HARD_BOUNCE
    text = stored.get("reply") or stored.get("diagnostic") or stored.get("reason") or ""
    return reason, str(text)[:MAX_DETAIL]


def suppressions_from(rows: Sequence[EventRow]) -> Statement | None:
    """The one statement adding the suppressions that ``rows`` call for (a hard Bounce, a
    Complaint, an Unsubscribe), taking account, address and transmission from each event's
    recipient record; an address already listed keeps its entry. None when no row calls for
    one, which is the common case and costs no query."""
    values: list[object] = []
    for recipient_id, status, created_at, detail in rows:
        if status not in (BOUNCE, COMPLAINT, UNSUBSCRIBE):
            continue
        found = _reason_and_detail(status, detail)
        if found is not None:
            values += [new_id(), found[0], found[1], created_at, recipient_id]
    if not values:
        return None
    return Statement(_insert_sql(is_postgresql(), len(values) // 5), values)


@functools.lru_cache(maxsize=64)
def _insert_sql(postgresql: bool, rows: int) -> str:
    if postgresql:
        row = "(?, ?, ?, ?::bigint, ?)"
        values = f'(VALUES {", ".join([row] * rows)}) AS v("id", "reason", "detail", "at", "rid")'
        sid, reason, detail, at, rid = ('v."id"', 'v."reason"', 'v."detail"', 'v."at"', 'v."rid"')
    else:
        values = f"(VALUES {', '.join(['(?, ?, ?, ?, ?)'] * rows)}) AS v"
        sid, reason, detail, at, rid = (f"v.column{n}" for n in range(1, 6))
    # "WHERE true" keeps SQLite from reading ON CONFLICT as the join's ON. Only placeholders
    # and column names go into the text.
    return (
        'INSERT INTO "suppression" ("id", "account_id", "email", "email_key", "reason", '  # noqa: S608
        '"transmission_id", "detail", "note", "created_at") '
        f'SELECT {sid}, r."account_id", r."address", LOWER(r."address"), {reason}, '
        f"r.\"transmission_id\", {detail}, '', {at} "
        f'FROM {values} JOIN "recipient" AS r ON r."id" = {rid} WHERE true '
        'ON CONFLICT ("account_id", "email_key") DO NOTHING'
    )


def suppressed_addresses(
    account_id: int, addresses: Iterable[str], *, transactional: bool
) -> dict[str, str]:
    """Lower-cased address → reason, for those of ``addresses`` that the account must not send
    a message to (``transactional`` or not). One indexed query."""
    keys = sorted({address.lower() for address in addresses})
    if not keys:
        return {}
    param = database.obj.param
    cursor = database.execute_sql(
        f'SELECT "email_key", "reason" FROM "suppression" WHERE "account_id" = {param} '  # noqa: S608
        f'AND "email_key" IN ({", ".join([param] * len(keys))})',
        [account_id, *keys],
    )
    return {key: reason for key, reason in cursor.fetchall() if applies(reason, transactional)}


def listed_reasons(account_id: int, addresses: Iterable[str], chunk: int = 5000) -> dict[str, str]:
    """Lower-cased address → reason, for those of ``addresses`` on the account's list, whatever
    the reason (the caller applies ``applies``): a query per ``chunk`` addresses, for many
    messages' recipients at once."""
    keys = sorted({address.lower() for address in addresses})
    found: dict[str, str] = {}
    param = database.obj.param
    for start in range(0, len(keys), chunk):
        part = keys[start : start + chunk]
        cursor = database.execute_sql(
            f'SELECT "email_key", "reason" FROM "suppression" WHERE "account_id" = {param} '  # noqa: S608
            f'AND "email_key" IN ({", ".join([param] * len(part))})',
            [account_id, *part],
        )
        found.update(cursor.fetchall())
    return found


def suppressed_recipients(recipient_ids: Sequence[str]) -> dict[str, str]:
    """Recipient id → reason, for those of ``recipient_ids`` whose address is on their
    account's list now, whatever the reason: the caller applies ``applies`` with what it knows
    of each message. One query, by primary key and the list's unique index."""
    if not recipient_ids:
        return {}
    param = database.obj.param
    cursor = database.execute_sql(
        'SELECT r."id", s."reason" FROM "recipient" AS r JOIN "suppression" AS s '  # noqa: S608
        'ON s."account_id" = r."account_id" AND s."email_key" = LOWER(r."address") '
        f'WHERE r."id" IN ({", ".join([param] * len(recipient_ids))})',
        list(recipient_ids),
    )
    return dict(cursor.fetchall())


def suppressed_event_detail(reason: str) -> str:
    """The detail of a ``Suppressed`` event: why the email was never sent."""
    return json.dumps({"reason": reason})
